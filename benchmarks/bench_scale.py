"""Production scale: a long trace streamed in bounded memory, and tune on Ray (a benchmark, not a test).

1. ``pdmux simulate --synthetic --qps 5 --max-requests 5000000 --policies chunked --json``: five million
   requests (11.6 days of traffic at 5 req/s; 1024-token prompts, 128-token outputs), SGLang's default
   schedule on one H100, streamed (per-request results folded as requests finish, a window of decode
   steps): targets under 10 minutes whole process and under 1.5 GB peak RSS (issue "Production-scale
   traces"). ``--csv`` too, once, with ``--csv-requests`` (the file is 50 bytes a request).
2. ``pdmux tune --trace AzureLLMInferenceTrace_code.csv --slo-ttft 1000 --slo-itl 60 --workers 2 --json`` on
   the local process pool, then with ``--executor ray --ray-address auto`` on a local two-worker Ray
   (``ray start --head --num-cpus 2``, started here and stopped after): target Ray within 1.5x of the
   pool, and the same JSON byte for byte.

Each command runs in a fresh process (``bench_simulate.measure``: median wall time, largest single-process
peak RSS; for Ray the driver's: the workers are the cluster's processes). The machine's load average before
each run is reported: the numbers are only as quiet as the machine was.

Usage: ``python benchmarks/bench_scale.py [--requests N] [--runs N] [--no-ray] [--write]``; ``--write``
replaces this benchmark's section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_md
from bench_simulate import CODE, RESULTS, measure

SECTION = "## Production scale: streamed runs and Ray"


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _ray(*args: str) -> None:
    ray = Path(sys.executable).with_name("ray")
    subprocess.run([str(ray), *args], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000_000,
                        help="requests of the long synthetic trace")
    parser.add_argument("--csv-requests", type=int, default=1_000_000,
                        help="requests of the run with --csv (0: none)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each tune (median wall time)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    parser.add_argument("--write", action="store_true", help="write the figures into benchmarks/RESULTS.md")
    opts = parser.parse_args()

    lines = [SECTION, ""]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines.append(f"Measured {datetime.date.today().isoformat()} by `python benchmarks/bench_scale.py` on "
                 f"{platform.machine()}, {cores} core(s), Python {platform.python_version()} (whole process; "
                 "peak RSS = largest single process). Load average (1/5/15 min) before each run in the "
                 "table: the machine is shared, and a loaded one is slower.")
    lines += ["", "| command | requests | target | wall | peak RSS | load before |",
              "|---|---|---|---|---|---|"]
    ok = True

    load = _load()
    big = measure(["simulate", "--synthetic", "--qps", "5", "--max-requests", str(opts.requests),
                   "--policies", "chunked", "--json"], 1)
    data = json.loads(big["stdout"])
    policy = data["policies"][0]
    print(f"5M run: {big['wall_s']:.1f} s, {big['peak_rss_mib']:.0f} MiB, load {load}", flush=True)
    lines.append(f"| `simulate --synthetic --qps 5 --max-requests {opts.requests:,} --policies chunked` | "
                 f"{data['trace']['requests']:,} | < 10 min, < 1.5 GB | {big['wall_s'] / 60:.1f} min | "
                 f"{big['peak_rss_mib']:.0f} MiB | {load} |")
    if opts.requests == 5_000_000:
        ok &= big["wall_s"] < 600 and big["peak_rss_mib"] < 1536
    notes = [n for n in policy["notes"] if "histogram" in n]
    detail = (f"{policy['decode_steps']:,} decode steps; SLO attainment {policy['slo_attainment']:.2%}; TTFT "
              f"p99 {policy['ttft_ms']['p99']:.1f} ms, ITL p50/p99 "
              f"{policy['itl_ms']['p50']:.2f}/{policy['itl_ms']['p99']:.2f} ms")
    if opts.csv_requests:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "rows.csv"
            load_csv = _load()
            with_csv = measure(["simulate", "--synthetic", "--qps", "5", "--max-requests",
                                str(opts.csv_requests), "--policies", "chunked", "--csv", str(out), "--json"],
                                1)
            size = out.stat().st_size
        lines.append(f"| `... --max-requests {opts.csv_requests:,} --csv rows.csv` ({size / 2**20:.0f} MiB "
                     f"of rows) | {opts.csv_requests:,} | - | {with_csv['wall_s']:.0f} s | "
                     f"{with_csv['peak_rss_mib']:.0f} MiB | {load_csv} |")

    if not opts.no_ray:
        tune_args = ["tune", "--trace", str(CODE), "--slo-ttft", "1000", "--slo-itl", "60", "--workers", "2",
                     "--json"]
        load_pool = _load()
        pool = measure(tune_args, opts.runs)
        _ray("start", "--head", "--num-cpus", "2", "--include-dashboard=false", "--disable-usage-stats")
        try:
            load_ray = _load()
            on_ray = measure([*tune_args, "--executor", "ray", "--ray-address", "auto"], opts.runs)
        finally:
            _ray("stop")
        same = on_ray["stdout"] == pool["stdout"]
        configs = len(json.loads(pool["stdout"])["rows"])
        ratio = on_ray["wall_s"] / pool["wall_s"]
        lines.append(f"| `tune --trace code --workers 2` ({configs} configs), local process pool | 8819 | - "
                     f"| {pool['wall_s']:.1f} s | {pool['peak_rss_mib']:.0f} MiB | {load_pool} |")
        lines.append("| the same, `--executor ray --ray-address auto` (local Ray, 2 CPUs) | 8819 | <= 1.5x "
                     f"the pool | {on_ray['wall_s']:.1f} s ({ratio:.2f}x) | {on_ray['peak_rss_mib']:.0f} MiB "
                     f"(driver) | {load_ray} |")
        ok &= ratio <= 1.5 and same
        detail_ray = (f"Ray's JSON {'is' if same else 'is NOT'} byte for byte the pool's. Runs: pool "
                      f"{', '.join(f'{w:.1f}' for w in pool['walls'])} s; Ray "
                      f"{', '.join(f'{w:.1f}' for w in on_ray['walls'])} s.")
    lines += ["",
              f"The {data['trace']['requests']:,}-request run: {detail}" + (
                  f"; {notes[0]}" if notes else "") + "."]
    if not opts.no_ray:
        lines += ["", detail_ray]
    lines.append("")
    text = "\n".join(lines)
    print(text)
    print("targets met" if ok else "TARGET MISSED")
    if opts.write:
        results_md.write_section(SECTION, text, RESULTS)


if __name__ == "__main__":
    main()
