"""pdmux's generated-shared-prefix trace against SGLang's own generator, run on a fake tokenizer.

``pdmux_cli.simulate.traces.generated_shared_prefix_trace`` redraws bench_serving's
``--dataset-name generated-shared-prefix`` without SGLang, numpy or a tokenizer. This script runs SGLang's
``benchmark/datasets/generated_shared_prefix.py`` ``sample_generated_shared_prefix_requests`` itself, as
``benchmark/serving.py`` does (``random.seed`` and ``np.random.seed`` first, ``--tokenize-prompt`` token-id
prompts, then ``get_request``'s ``np.random.exponential`` arrivals), with a tokenizer whose vocabulary is
``0..V-1`` and stubs for ``tqdm`` and ``transformers`` (neither is used for token-id prompts), and checks
for several settings that pdmux's trace has the same prompt and output lengths in the same order, the
same arrival times, and, for pairs of requests, a shared prefix in whole hash blocks equal to the tokens
their prompts share (what SGLang's radix cache, page size 1, matches).

Usage: ``python benchmarks/check_gsp_trace.py SGLANG_PACKAGE_DIR`` (the ``sglang`` package directory,
e.g. ``/work/sglang/sglang``). Needs numpy (pdmux's test extra has it). Writes nothing outside a
temporary folder (SGLang caches its dataset under ``$HOME``, which is pointed there). Prints one line per
setting; exits 1 on a difference. The tests hold literals this script confirmed
(``tests/test_gsp_workload.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import math
import os
import random
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (seed, groups, prompts per group, system, question, output, range ratio, ordered, request rate)
SETTINGS = [
    (0, 4, 3, 700, 50, 20, 1.0, False, math.inf),
    (42, 64, 16, 2048, 128, 256, 1.0, False, math.inf),
    (0, 64, 16, 2048, 128, 256, 1.0, False, 8.0),
    (7, 8, 5, 700, 300, 64, 0.5, False, 4.0),
    (3, 5, 4, 333, 40, 10, 1.0, True, 2.5),
    (11, 6, 6, 1000, 200, 100, 0.9, False, math.inf),
]


class FakeTokenizer:
    """A vocabulary of ``0..size-1`` (Qwen's size by default); token-id prompts never decode or encode."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(self.size)}


def load_sglang(package: Path) -> types.ModuleType:
    """SGLang's generated_shared_prefix module, imported from ``package`` with stub tqdm/transformers."""
    stub_tqdm = types.ModuleType("tqdm.asyncio")
    stub_tqdm.tqdm = lambda items, **_: items
    sys.modules.update({"tqdm": types.ModuleType("tqdm"), "tqdm.asyncio": stub_tqdm})
    stub_transformers = types.ModuleType("transformers")
    stub_transformers.PreTrainedTokenizerBase = object
    sys.modules["transformers"] = stub_transformers
    for name in ("sglang", "sglang.benchmark", "sglang.benchmark.datasets"):
        sys.modules.setdefault(name, types.ModuleType(name))
    datasets = package / "benchmark" / "datasets"
    module = None
    for name in ("common", "generated_shared_prefix"):
        path = datasets / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"sglang.benchmark.datasets.{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def sglang_run(gsp: types.ModuleType, seed: int, groups: int, per_group: int, system: int, question: int,
               output: int, ratio: float, ordered: bool, rate: float,
               vocab: int = 151936) -> tuple[list, list]:
    """bench_serving's requests and arrival times for one setting."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    sys.modules["sglang.benchmark.datasets.common"].get_available_tokens.cache_clear()
    rows = gsp.sample_generated_shared_prefix_requests(groups, per_group, system, question, output, ratio,
                                                      FakeTokenizer(vocab), seed, ordered=ordered,
                                                      input_ids=True)
    times, t = [], 0.0
    for _ in rows:
        times.append(t)
        if rate != math.inf:
            t += np.random.exponential(1.0 / rate)
    return rows, times


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def check(gsp: types.ModuleType, setting: tuple) -> tuple[str, list[str]]:
    """One setting: the line to print and what differs (empty: nothing)."""
    from pdmux_cli.simulate.traces import generated_shared_prefix_trace

    seed, groups, per_group, system, question, output, ratio, ordered, rate = setting
    with contextlib.redirect_stdout(io.StringIO()):  # SGLang's own prints
        rows, times = sglang_run(gsp, *setting)
    trace = generated_shared_prefix_trace(rate, groups, per_group, system, question, output, ratio, ordered,
                                          seed)
    problems = []
    if list(trace.prompt_tokens) != [r.prompt_len for r in rows]:
        problems.append("prompt lengths")
    if list(trace.output_tokens) != [r.output_len for r in rows]:
        problems.append("output lengths")
    if list(trace.arrival_s) != times:
        problems.append("arrival times")
    pairs = list(itertools.combinations(range(len(rows)), 2))
    random.Random(0).shuffle(pairs)
    pairs = pairs[:3000]
    block = trace.block_tokens
    exact = 0
    for i, j in pairs:
        tokens = common_prefix(rows[i].prompt, rows[j].prompt)
        blocks = common_prefix(trace.hash_ids[i], trace.hash_ids[j]) * block
        exact += tokens == min(blocks, trace.prompt_tokens[i], trace.prompt_tokens[j])
    # two prompts whose first differing tokens are equal by chance (1 in the vocabulary: Qwen's 151936 here)
    # share one token more in SGLang
    if exact < len(pairs):
        problems.append(f"shared prefix on {len(pairs) - exact} of {len(pairs)} pairs")
    line = (f"seed {seed}, {groups} x {per_group}, system {system}, question {question}, output {output}, "
            f"ratio {ratio:g}, ordered {ordered}, rate {rate:g}: {len(rows)} requests, block {block}, shared "
            f"prefix checked on {len(pairs)} pairs: "
            + ("; ".join(problems) + " DIFFER" if problems else "equal"))
    return line, problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/check_gsp_trace.py SGLANG_PACKAGE_DIR", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    os.environ["HOME"] = tempfile.mkdtemp()  # SGLang pickles its dataset under ~/.cache/sglang
    gsp = load_sglang(Path(argv[0]))
    failed = False
    for setting in SETTINGS:
        line, problems = check(gsp, setting)
        print(line)
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
