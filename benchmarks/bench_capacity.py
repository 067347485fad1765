"""Whole-process speed of ``pdmux capacity`` (a benchmark, not a test).

``pdmux capacity AzureLLMInferenceTrace_conv.csv --max-requests 5000`` (three policies: pdmux, chunked
at SGLang's default size, mixed-chunk 512; TTFT 1 s, ITL 60 ms, target 99%, tolerance 2%): target under
60 s on the cores available (issue "Decide for the user"). Reports the median wall time, peak RSS, the
simulations run and the rates found.

Usage: ``python benchmarks/bench_capacity.py [--runs N] [--write]``; ``--write`` replaces this
benchmark's section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_md
from bench_simulate import CONV, RESULTS, measure

SECTION = "## pdmux capacity"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    cmd = ["capacity", str(CONV), "--max-requests", "5000", "--json"]
    m = measure(cmd, args.runs)
    data = json.loads(m["stdout"])
    rows = [f"| {p['policy']} | {p['max_rate_rps']:.3g} | {len(p['points'])} |" for p in data["policies"]]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    text = "\n".join([
        SECTION, "",
        (f"`python benchmarks/bench_capacity.py --runs {args.runs}` ({datetime.date.today().isoformat()}, "
        f"{cores} cores): `pdmux capacity AzureLLMInferenceTrace_conv.csv --max-requests 5000` (Qwen3-8B, "
        f"H100, TTFT 1 s, ITL 60 ms, target 99%): median {m['wall_s']:.1f} s whole process (target < 60 s), "
        f"peak RSS {m['peak_rss_mib']:.0f} MiB, {sum(len(p['points']) for p in data['policies'])} "
        "simulations."), "",
        "| policy | max rate req/s | simulations |", "|---|---|---|", *rows, "",
        f"verdict: {data['verdict']}", "",
    ])
    print(text)
    if args.write:
        results_md.write_section(SECTION, text, RESULTS)


if __name__ == "__main__":
    main()
