#!/usr/bin/env python
"""``make gpu-check``: the GPU tests, then a short ``pdmux bench --quick`` over every level, then a verdict.

Needs an NVIDIA GPU with a CUDA >= 12.4 driver and the ``bench`` and ``test`` extras' packages
(``pip install -e '.[bench,test]'``, or already in the image: the check runs this checkout's code
from the source tree either way). Takes about 1-2
minutes on an H100/H200 (budget: under 5). Steps:

1. ``python -m pytest -m gpu tests/test_bench_gpu.py`` (granted splits, disjoint SM ids at every level,
   both kernels running side by side at every level, the launch gate, clocks, read kernel >= 90% of
   copy, GEMM within 5% of torch.matmul on the default stream, teardown);
2. ``pdmux bench --quick --output OUT`` (all levels, 3 repeats, 50 ms co-run windows), then the model
   replay's GPU tests and ``pdmux bench --quick --model qwen3-8b --output OUT/model`` (issue 11): prints its
   own tables and writes results.json, calibration.yaml and curves.png;
3. a summary table of the checks read back from OUT/results.json (per level: disjoint SMs, and both
   kernels running together for >= 80% of the co-run window without the factors of time-sharing).

Exit status 0 only when every step passed; the GPU tests count as failed when pytest skipped every
one of them (a GPU is there, so a skip means the test set-up is broken, e.g. torch missing).
Usage: ``python benchmarks/gpu_check.py [--out DIR]``; ``--print-extra`` prints the pdmux extra for
this machine's driver (``bench-cu12`` for a CUDA 12 driver, else ``bench``) and exits: ``make
gpu-check`` installs it where the packages are not importable yet. Imports only the standard
library at module level (it runs before anything is installed).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 290.0
JUNIT_FILE = "gpu-tests.xml"
#: A level passes when both kernels ran together for at least this share of the co-run window (the
#: rest: launch boundaries and each read launch's last wave) and its factors are not those of
#: time-sharing (results' ``serialised``). An acceptance threshold, not a measurement.
MIN_OVERLAP_SHARE = 0.8


def parse_nvidia_smi_cuda(text: str) -> int | None:
    """CUDA major of the driver from ``nvidia-smi``'s banner (``CUDA Version: 12.8``), or ``None``."""
    m = re.search(r"CUDA Version:\s*([0-9]+)\.[0-9]+", text)
    return int(m.group(1)) if m else None


def _libcuda_major() -> int | None:
    """``cuDriverGetVersion`` through ctypes (no cuInit, no cuda-python needed), or ``None``."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000


def _nvidia_smi_major() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi_cuda(out)


def bench_extra(driver_cuda_major: int | None) -> str:
    """The pdmux extra for a driver of that CUDA major: ``bench-cu12`` for 12 (cuda-python and NVRTC
    12.x, torch < 2.11), ``bench`` otherwise (CUDA 13 drivers; unknown: the bench's own probe then
    says what is wrong)."""
    return "bench-cu12" if driver_cuda_major == 12 else "bench"


def driver_cuda_major() -> int | None:
    """The driver's CUDA major: ``cuDriverGetVersion`` from libcuda, else ``nvidia-smi``'s banner."""
    major = _libcuda_major()
    return major if major is not None else _nvidia_smi_major()


def junit_counts(path: Path) -> dict[str, int] | None:
    """``tests``, ``skipped``, ``failures``, ``errors`` summed over a pytest JUnit XML file's test
    suites; ``None`` when the file is missing or unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {"tests": 0, "skipped": 0, "failures": 0, "errors": 0}
    for suite in suites:
        for key in counts:
            try:
                counts[key] += int(suite.get(key, "0"))
            except ValueError:
                return None
    return counts


def gpu_tests_row(rc: int, counts: dict[str, int] | None) -> tuple[str, bool, str]:
    """The summary row of the GPU tests: passed only when pytest exited 0 AND ran at least one test
    (on a machine with a GPU, every test skipped means the tests could not see it)."""
    if counts is None:
        return ("GPU tests (pytest -m gpu)", False, f"exit {rc}, no test report")
    ran = counts["tests"] - counts["skipped"]
    detail = f"exit {rc}, {ran} ran, {counts['skipped']} skipped of {counts['tests']}"
    if counts["tests"] and not ran:
        detail += ": every GPU test was skipped on a machine with a GPU"
    return ("GPU tests (pytest -m gpu)", rc == 0 and ran > 0, detail)


def _source_tree_env() -> dict[str, str]:
    """The environment with the repository first on PYTHONPATH: the check runs this checkout's code,
    installed or not (a GPU image without a registry may only have the dependencies)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run(cmd: list[str], timeout: float) -> int:
    print(f"$ {' '.join(cmd)}", flush=True)
    try:
        return subprocess.run(cmd, check=False, cwd=ROOT, env=_source_tree_env(),
                              timeout=max(1.0, timeout)).returncode
    except subprocess.TimeoutExpired:
        print(f"gpu-check: timed out after {timeout:.0f} s", file=sys.stderr)
        return 124


def _checks(results: dict) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) rows from a bench's results.json."""
    rows: list[tuple[str, bool, str]] = []
    copy = (results.get("ceilings") or {}).get("copy") or {}
    matmul = (results.get("ceilings") or {}).get("matmul") or {}
    read_full, gemm_full = results.get("full_read_bytes_per_s"), results.get("full_gemm_flops_per_s")
    rows.append(("bench complete", bool(results.get("complete")), results.get("error")
                 or "; ".join(results.get("step_errors") or []) or "all steps ran"))
    if read_full and copy.get("median_bytes_per_s"):
        ratio = read_full / copy["median_bytes_per_s"]
        rows.append(("read kernel vs copy (>= 90%)", ratio >= 0.9,
                     f"{read_full / 1e9:,.0f} vs {copy['median_bytes_per_s'] / 1e9:,.0f} GB/s = {ratio:.0%}"))
    if gemm_full and matmul.get("median_flops_per_s"):
        ratio = gemm_full / matmul["median_flops_per_s"]
        clock = matmul.get("sm_clock_mhz")
        rows.append(("GEMM vs default-stream matmul (+-5%)", abs(ratio - 1) <= 0.05,
                     f"{gemm_full / 1e12:,.1f} vs {matmul['median_flops_per_s'] / 1e12:,.1f} TFLOP/s = "
                     f"{ratio:.1%}"
                     + (f" (SM clock {clock:.0f} of {results.get('max_sm_clock_mhz') or 0:.0f} MHz)" if clock
                        else "")))
    rows.append(("S_SAT (95% of whole-GPU read)", results.get("s_sat_sms") is not None,
                 f"{results.get('s_sat_sms')} SMs"))
    for lv in results.get("levels", []):
        share = lv.get("overlap_share")
        together = share is not None and share >= MIN_OVERLAP_SHARE and not lv.get("serialised")
        ok = lv["disjoint"] and lv["within_grant"] and together
        both = "?" if share is None else f"{share:.0%}"
        rows.append((
            f"level {lv['prefill_sms']}/{lv['decode_sms']}", ok,
            (f"granted {lv['granted_prefill_sms']}/{lv['granted_decode_sms']}, SM ids "
            f"{lv['smid_prefill_count']}/{lv['smid_decode_count']} "
            f"{'disjoint' if lv['disjoint'] else 'OVERLAP'}; loss GEMM "
            f"{lv['gemm_interference_percent']:.1f}%, read {lv['read_interference_percent']:.1f}%; both ran "
            f"{both}"
            + (" SERIALISED" if lv.get("serialised") else "")),
        ))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/gpu-check",
                        help="directory for the bench's results (default out/gpu-check)")
    parser.add_argument("--print-extra", action="store_true",
                        help="print the pdmux extra for this driver (bench or bench-cu12) and exit")
    args = parser.parse_args()
    if args.print_extra:
        print(bench_extra(driver_cuda_major()))
        return 0
    start = time.monotonic()

    def left() -> float:
        return BUDGET_S - (time.monotonic() - start)

    sys.path.insert(0, str(ROOT))
    try:
        from pdmux_cli.bench import greenctx

        info = greenctx.probe_device(0)
    except Exception as exc:  # noqa: BLE001 - one line, whatever the reason
        print(f"gpu-check: no usable GPU: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(f"gpu-check on {info.name} ({info.sm_count} SMs, driver CUDA {info.driver_version_text})",
          flush=True)

    out = Path(args.out)
    out_abs = out if out.is_absolute() else ROOT / out
    out_abs.mkdir(parents=True, exist_ok=True)
    junit = out_abs / JUNIT_FILE
    junit.unlink(missing_ok=True)
    rc_tests = _run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_bench_gpu.py", "-q", "-rs",
                     "-p", "no:cacheprovider", f"--junitxml={junit}"], left() * 0.6)
    rc_replay_tests = _run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_bench_replay_gpu.py",
                            "-q", "-rs", "-p", "no:cacheprovider"], left() * 0.3)
    rc_bench = _run([sys.executable, "-m", "pdmux_cli", "bench", "--quick", "--output", str(out)],
                    left() * 0.6)
    replay_out = out / "model"
    rc_replay = _run([sys.executable, "-m", "pdmux_cli", "bench", "--quick", "--model", "qwen3-8b",
                      "--output", str(replay_out)], left())

    rows: list[tuple[str, bool, str]] = [gpu_tests_row(rc_tests, junit_counts(junit)),
                                         ("model replay GPU tests", rc_replay_tests == 0,
                                          f"exit {rc_replay_tests}"),
                                         ("pdmux bench --quick", rc_bench == 0, f"exit {rc_bench}"),
                                         ("pdmux bench --quick --model qwen3-8b", rc_replay == 0,
                                          f"exit {rc_replay}")]
    results_path = out_abs / "results.json"
    if results_path.exists():
        rows += _checks(json.loads(results_path.read_text()))
    elapsed = time.monotonic() - start
    rows.append(("time (budget 5 min)", elapsed < 300, f"{elapsed:.0f} s"))

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gpu-check: {info.name}", title_justify="left")
    for col in ("check", "result", "detail"):
        table.add_column(col)
    for name, ok, detail in rows:
        table.add_row(name, "[green]pass[/]" if ok else "[red]FAIL[/]", detail)
    Console().print(table)
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
