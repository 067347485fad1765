"""Whole-process time of issue 31's commands, against its targets (a benchmark, not a test).

1. ``pdmux simulate AzureLLMInferenceTrace_conv.csv --json`` (the 3 default policies, 19,366 requests):
   target 1.5 s wall.
2. ``pdmux capacity AzureLLMInferenceTrace_conv.csv --max-requests 5000 --json``: target 5 s wall.
3. ``pdmux tune --trace AzureLLMInferenceTrace_code.csv --slo-ttft 1000 --slo-itl 60 --json``: target 8 s
   wall.
4. With ``--synthetic``: ``pdmux simulate --synthetic --qps 5 --max-requests 1000000 --policies chunked
   --json``: target 20 s wall (once); with ``--huge`` also 5,000,000 requests: target 2 min wall and 1 GiB
   peak RSS (once: it takes minutes). Both are one policy of SGLang's default loop on a long trace, cut in
   time over the cores (:mod:`pdmux_cli.simulate.time_split`).

Each command runs ``--runs`` times, the commands taking turns (a load that comes and goes on a shared
machine then hits each of them), in a fresh process started from a small wrapper that reads
``resource.getrusage(RUSAGE_CHILDREN)``: wall time (the pdmux process's, from its start to its exit; the
wrapper's own interpreter start, 0.06-0.10 s, is not counted), CPU time (user + sys of the process and
its workers) and the largest single process's peak RSS; medians are reported, and every run's wall time.
pdmux's bytecode is compiled first, as pip does when it installs a package (``PYTHONDONTWRITEBYTECODE=1``,
set on some machines, would otherwise make every start compile every module: about 0.2 s a command);
``benchmarks/bench_cli.py`` does the same.

Usage: ``python benchmarks/bench_event_speed.py [--runs N] [--synthetic] [--huge] [--write]``; ``--write``
replaces this benchmark's section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import os
import platform
import statistics

import results_md
from whole_process import CODE, CONV, ROOT, run_pdmux

SECTION = "## Event speed (issue 31): the targets"

#: The peak RSS target of the 5,000,000-request run, MiB.
HUGE_RSS_MIB = 1024


def commands(synthetic: bool, huge: bool = False) -> list[tuple[str, list[str], float]]:
    """``(label, pdmux arguments, target wall s)`` of each command measured."""
    out = [
        ("`simulate conv --json` (3 default policies)", ["simulate", str(CONV), "--json"], 1.5),
        ("`capacity conv --max-requests 5000 --json`",
         ["capacity", str(CONV), "--max-requests", "5000", "--json"], 5.0),
        ("`tune --trace code --slo-ttft 1000 --slo-itl 60 --json`",
         ["tune", "--trace", str(CODE), "--slo-ttft", "1000", "--slo-itl", "60", "--json"], 8.0),
    ]
    if synthetic:
        out.append(("`simulate --synthetic --qps 5 --max-requests 1000000 --policies chunked --json`",
                    ["simulate", "--synthetic", "--qps", "5", "--max-requests", "1000000", "--policies",
                     "chunked", "--json"], 20.0))
    if huge:
        out.append(("`simulate --synthetic --qps 5 --max-requests 5000000 --policies chunked --json`",
                    ["simulate", "--synthetic", "--qps", "5", "--max-requests", "5000000", "--policies",
                     "chunked", "--json"], 120.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command, taking turns (medians)")
    parser.add_argument("--synthetic", action="store_true", help="also the 1,000,000-request run (once)")
    parser.add_argument("--huge", action="store_true", help="also the 5,000,000-request run (once)")
    parser.add_argument("--write", action="store_true", help="write the figures into benchmarks/RESULTS.md")
    opts = parser.parse_args()
    for path in (CONV, CODE):
        if not path.exists():
            raise SystemExit(f"missing {path}")
    compileall.compile_dir(str(ROOT / "pdmux_cli"), quiet=1)
    compileall.compile_dir(str(ROOT / "pdmux"), quiet=1)
    todo = commands(opts.synthetic, opts.huge)
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _, _ in todo}
    for i in range(opts.runs):
        for label, args, _ in todo:
            if i and ("1000000" in args or "5000000" in args):
                continue  # the long runs once
            wall, cpu, rss, _ = run_pdmux(args, ROOT)
            runs[label].append((wall, cpu, rss))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        SECTION,
        "",
        (f"Measured {datetime.date.today().isoformat()} by `python benchmarks/bench_event_speed.py --runs "
         f"{opts.runs}{' --synthetic' if opts.synthetic else ''}{' --huge' if opts.huge else ''}` on "
         f"{platform.machine()}, {cores} core(s), "
         f"Python {platform.python_version()}, load average {load:.1f} at the end; the whole pdmux process "
         "(not the wrapper's start), bytecode compiled (as installed), the commands taking turns."),
        "",
        "| command | target | wall, median | CPU, median | peak RSS | every run's wall |",
        "|---|---|---|---|---|---|",
    ]
    met = 0
    for label, _, target in todo:
        walls = [w for w, _, _ in runs[label]]
        wall = statistics.median(walls)
        cpu = statistics.median(c for _, c, _ in runs[label])
        rss = max(r for _, _, r in runs[label])
        rss_target = HUGE_RSS_MIB if "5000000" in label else None
        met += wall <= target and (rss_target is None or rss <= rss_target)
        shown = f"{target:g} s" + (f", {rss_target} MiB" if rss_target else "")
        lines.append(f"| {label} | {shown} | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MiB | "
                     f"{', '.join(f'{w:.2f}' for w in walls)} s |")
    lines += ["", f"Targets met: {met} of {len(todo)}.", ""]
    text = "\n".join(lines)
    print(text)
    if opts.write:
        results_md.write_section(SECTION, text)


if __name__ == "__main__":
    main()
