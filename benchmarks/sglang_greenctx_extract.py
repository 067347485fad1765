"""Extract SGLang's green-context latency tables into ``profiles/measurements/sglang_greenctx/``.

The tables are offline fits of prefill and decode latency (ms) per SM count under CUDA green contexts,
measured by the PD-multiplexing authors and kept for a while in SGLang's tree:
sgl-project/sglang commit 56f74d2489540c89bba016991e45160b930f03d6,
``python/sglang/srt/multiplex/predictor.py`` (Apache-2.0; not in any release). Only the dict literals
(the numbers) are read, with :func:`ast.literal_eval`; nothing of the file's code is copied or run.
The forms the coefficients belong to are those of the file's ``predict_*`` functions, written out in
each CSV's header and in the folder's README.

Usage::

    git -C <sglang mirror> show
    56f74d2489540c89bba016991e45160b930f03d6:python/sglang/srt/multiplex/predictor.py > predictor.py python
    benchmarks/sglang_greenctx_extract.py predictor.py [--out DIR]

Stdlib only; rewrites ``prefill.csv`` and ``decode.csv``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "profiles" / "measurements" / "sglang_greenctx"
COMMIT = "56f74d2489540c89bba016991e45160b930f03d6"
SOURCE = f"sgl-project/sglang commit {COMMIT}, python/sglang/srt/multiplex/predictor.py (Apache-2.0)"

#: GPU prefix of the dict names -> (pdmux GPU key, the SMs of the whole GPU, role in pdmux).
#: ``fit``: the partition constants are fitted to it (with NanoFlow); ``out-of-sample``: kept out of
#: every fit, checked by ``pdmux accuracy``; ``unused``: extracted for completeness only (the RTX 3090's
#: three prefill tables are one table copied three times, and no partition term is fitted to a GeForce).
GPUS = {
    "H800": ("h800-sxm", 132, "fit"),
    "A100": ("a100-sxm-80gb", 108, "fit"),
    "A100_8B": ("a100-sxm-80gb", 108, "out-of-sample"),
    "RTX3090": ("rtx-3090", 82, "unused"),
}

#: Prefill range suffix -> (new tokens above, new tokens up to; 0 = no bound), as the file picks a table.
PREFILL_RANGES = {"SEQLEN_LT_2K": (0, 2048), "SEQLEN_BT_2K_8K": (2048, 8192), "SEQLEN_GT_8K": (8192, 0)}
#: Decode range suffix -> (prefix above, prefix up to; 0 = no bound), as the file picks a table.
DECODE_RANGES = {"SEQLEN_LT_128K": (0, 131072), "SEQLEN_GT_128K": (131072, 0),
                 "SEQLEN_LT_64K": (0, 65536), "SEQLEN_GT_64K": (65536, 0)}
#: The power of ``prefix / 1024`` in each GPU's decode form (the H800 function squares it).
DECODE_PREFIX_POWER = {"H800": 2, "A100": 1, "A100_8B": 1, "RTX3090": 1}

PREFILL_HEADER = (
    f"# SGLang's green-context prefill latency tables: {SOURCE}.\n"
    "# Offline fits by the PD-multiplexing authors; the model and TP behind each table are not stated.\n"
    "# latency_ms = a * (n/1024)^2 + b * (n/1024) * (prefix/1024) + c * (n/1024) + d, n = new tokens of the "
    "batch\n# (the file raises n below 512 to 512), prefix = cached tokens; the table is picked by n: "
    "tokens_above < n <= tokens_upto\n# (tokens_upto 0 = no bound). sms = SMs of the green context (the file "
    "rounds H800/RTX 3090 counts down to 8s).\n# role: fit (pdmux's partition fit uses it), out-of-sample "
    "(kept out of every fit), unused.\n"
)
DECODE_HEADER = (
    f"# SGLang's green-context decode latency tables: {SOURCE}.\n"
    "# Offline fits by the PD-multiplexing authors; the model and TP behind each table are not stated.\n"
    "# latency_ms = a * (prefix/1024)^prefix_power + b * batch_size + c; prefix as the file names it (the "
    "batch's KV\n# tokens is the likely reading; not stated); the table is picked by prefix: prefix_above < "
    "prefix <= prefix_upto\n# (prefix_upto 0 = no bound). sms = SMs of the green context (the file rounds "
    "counts down to multiples of 8).\n# role: fit (pdmux's partition fit uses it), out-of-sample (kept out "
    "of every fit), unused.\n"
)


def read_tables(text: str) -> dict[str, dict[int, list[float]]]:
    """The module-level ``NAME = {sms: [coefficients]}`` literals of ``text`` whose name ends in a range
    suffix. Raises :class:`ValueError` when none is found."""
    tables = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if "_PARAMETERS_" in name and isinstance(node.value, ast.Dict):
                tables[name] = ast.literal_eval(node.value)
    if not tables:
        raise ValueError("no *_PARAMETERS_* tables found: is this SGLang's multiplex/predictor.py?")
    return tables


def split_name(name: str) -> tuple[str, str, str]:
    """``A100_8B_PREFILL_PARAMETERS_SEQLEN_LT_2K`` -> ``("A100_8B", "prefill", "SEQLEN_LT_2K")``."""
    head, suffix = name.split("_PARAMETERS_")
    gpu, phase = head.rsplit("_", 1)
    return gpu, phase.lower(), suffix


def write(tables: dict[str, dict[int, list[float]]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    prefill, decode = [], []
    for name, table in tables.items():
        gpu, phase, suffix = split_name(name)
        key, total, role = GPUS[gpu]
        for sms, coefficients in sorted(table.items()):
            values = [repr(float(x)) for x in coefficients]
            if phase == "prefill":
                above, upto = PREFILL_RANGES[suffix]
                prefill.append([gpu, key, total, role, name, above, upto, sms, *values])
            else:
                above, upto = DECODE_RANGES[suffix]
                decode.append([gpu, key, total, role, name, DECODE_PREFIX_POWER[gpu], above, upto, sms,
                               *values])
    for path, header, columns, rows in (
        (out / "prefill.csv", PREFILL_HEADER,
         ["table", "gpu", "total_sms", "role", "source_name", "tokens_above", "tokens_upto", "sms",
          "a_ms", "b_ms", "c_ms", "d_ms"], prefill),
        (out / "decode.csv", DECODE_HEADER,
         ["table", "gpu", "total_sms", "role", "source_name", "prefix_power", "prefix_above", "prefix_upto",
          "sms", "a_ms", "b_ms", "c_ms"], decode),
    ):
        with path.open("w", newline="", encoding="utf-8") as f:
            f.write(header)
            w = csv.writer(f, lineterminator="\n")
            w.writerow(columns)
            w.writerows(rows)
        print(f"wrote {path} ({len(rows)} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictor", type=Path,
                        help="SGLang's python/sglang/srt/multiplex/predictor.py at " + COMMIT)
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default: %(default)s)")
    args = parser.parse_args()
    try:
        tables = read_tables(args.predictor.read_text(encoding="utf-8"))
    except (OSError, ValueError, SyntaxError) as exc:
        sys.exit(f"{args.predictor}: {exc}")
    write(tables, args.out)


if __name__ == "__main__":
    main()
