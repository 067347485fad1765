"""Whole-process speed and memory of ``pdmux simulate`` and ``pdmux tune`` (a benchmark, not a test).

1. ``pdmux simulate AzureLLMInferenceTrace_conv.csv --policies pdmux,chunked --chunk-sizes 512,2048``
   (19,366 requests, three policies): target under 8 s whole process (issue "Cost model v2") and under
   1 GB peak RSS. Also the default policies (pdmux, chunked at SGLang's default size, mixed-chunk 512)
   and all four kinds, for reference.
2. ``pdmux tune --trace AzureLLMInferenceTrace_code.csv`` over the default grid (at least 50
   configs on H100): target under 2 minutes whole process, on the cores available.
3. ``pdmux simulate AzureLLMInferenceTrace_conv.csv --dp 8`` (the whole trace on 8 replicas behind the
   router, the three default policies): target under 20 s whole process on a 2-core machine (issue
   "More than one GPU"); and ``--disagg 4P4D`` beside them (four policies on 8 GPUs), for reference.

The policies of one simulate run share the cores (``--workers``, default: the cores available).

Each command runs ``--runs`` times in a fresh process (``python -m pdmux_cli``, started from a small
wrapper that reads ``resource.getrusage(RUSAGE_CHILDREN)``); the median wall time (of the pdmux process,
not the wrapper's own interpreter start) and the largest peak RSS (of a single process: the simulator,
or the tune parent or one of its workers) are reported.

Usage: ``python benchmarks/bench_simulate.py [--runs N] [--write]``; ``--write`` replaces the
``## pdmux simulate`` section of benchmarks/RESULTS.md (other sections are kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics

import results_md
from whole_process import CODE, CONV, ROOT, run_pdmux

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## pdmux simulate"


def run_once(args: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB of the largest process, stdout) of ``python -m pdmux_cli ARGS``."""
    wall, _, rss, stdout = run_pdmux(args, ROOT)
    return wall, rss, stdout


def measure(args: list[str], runs: int) -> dict:
    walls, rss, stdout = [], [], ""
    for _ in range(runs):
        wall, peak, stdout = run_once(args)
        walls.append(wall)
        rss.append(peak)
    return {"args": args, "wall_s": statistics.median(walls), "walls": walls, "peak_rss_mib": max(rss),
            "stdout": stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per command (median wall time)")
    parser.add_argument("--write", action="store_true", help="write the figures into benchmarks/RESULTS.md")
    opts = parser.parse_args()
    for path in (CONV, CODE):
        if not path.exists():
            raise SystemExit(f"missing {path}")

    three = measure(["simulate", str(CONV), "--policies", "pdmux,chunked", "--chunk-sizes", "512,2048",
                     "--json"],
                    opts.runs)
    default = measure(["simulate", str(CONV), "--json"], 1)
    four = measure(["simulate", str(CONV), "--policies", "pdmux,chunked,mixed-chunk,prefill-first", "--json"],
                   1)
    dp8 = measure(["simulate", str(CONV), "--dp", "8", "--json"], opts.runs)
    disagg = measure(["simulate", str(CONV), "--disagg", "4P4D", "--json"], 1)
    dp_data = json.loads(dp8["stdout"])
    dp_att = ", ".join(f"{p['policy']} {p['slo_attainment']:.1%}" for p in dp_data["policies"])
    tune = measure(["tune", "--trace", str(CODE), "--slo-ttft", "1000", "--slo-itl", "60", "--json"], 1)
    tune_data = json.loads(tune["stdout"])
    sim_data = json.loads(three["stdout"])
    configs = len(tune_data["rows"])
    best = tune_data["rows"][tune_data["best"]]

    cpu = os.cpu_count()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = cpu
    lines = [
        SECTION,
        "",
        (f"Measured {datetime.date.today().isoformat()} by `python benchmarks/bench_simulate.py --runs "
        f"{opts.runs}` on {platform.machine()}, {cores} core(s) available, Python "
        f"{platform.python_version()} (whole process: `python -m pdmux_cli ...`; peak RSS = largest single "
        "process)."),
        "",
        "| command | requests | target | wall (median) | peak RSS |",
        "|---|---|---|---|---|",
        ("| `simulate conv --policies pdmux,chunked --chunk-sizes 512,2048 --json` | "
        f"{sim_data['trace']['requests']} | < 8 s, < 1 GB | {three['wall_s']:.1f} s | "
        f"{three['peak_rss_mib']:.0f} MiB |"),
        ("| `simulate conv --json` (defaults: pdmux, chunked 8192, mixed-chunk 512) | "
        f"{sim_data['trace']['requests']} | - | {default['wall_s']:.1f} s | {default['peak_rss_mib']:.0f} "
        "MiB |"),
        ("| `simulate conv --policies pdmux,chunked,mixed-chunk,prefill-first --json` | "
        f"{sim_data['trace']['requests']} | - | {four['wall_s']:.1f} s | {four['peak_rss_mib']:.0f} MiB |"),
        ("| `simulate conv --dp 8 --json` (3 default policies, 8 replicas each) | "
        f"{dp_data['trace']['requests']} | < 20 s | {dp8['wall_s']:.1f} s | {dp8['peak_rss_mib']:.0f} MiB |"),
        (f"| `simulate conv --disagg 4P4D --json` (the 3 as DP 8, and 4P4D) | {dp_data['trace']['requests']} "
        f"| - | {disagg['wall_s']:.1f} s | {disagg['peak_rss_mib']:.0f} MiB |"),
        (f"| `tune --trace code --slo-ttft 1000 --slo-itl 60` ({configs} configs, {tune_data['workers']} "
        f"workers) | {tune_data.get('requests', '')} | < 120 s, >= 50 configs | {tune['wall_s']:.1f} s | "
        f"{tune['peak_rss_mib']:.0f} MiB |"),
        "",
        (f"Runs of the 3-policy command: {', '.join(f'{w:.1f}' for w in three['walls'])} s. Tune winner on "
        f"the code trace (Qwen3-8B, H100, roofline cost model): {best['description']}, SLO attainment "
        f"{best['slo_attainment']:.1%}. Runs of `--dp 8`: {', '.join(f'{w:.1f}' for w in dp8['walls'])} s; "
        f"SLO attainment on 8 GPUs: {dp_att}."),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    ok = (three["wall_s"] < 8 and three["peak_rss_mib"] < 1024 and tune["wall_s"] < 120 and configs >= 50
          and dp8["wall_s"] < 20)
    print("targets met" if ok else "TARGET MISSED")
    if opts.write:
        write_section(text)


def write_section(text: str) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md."""
    results_md.write_section(SECTION, text, RESULTS)


if __name__ == "__main__":
    main()
