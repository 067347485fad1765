"""Whole-process speed of the planning commands (a benchmark, not a test).

1. ``pdmux splits --gpu h100`` against ``../shared/bench/floor_app.py splits`` (a bare typer + rich
   + yaml program: the floor of our dependencies), in paired runs with alternating order; the
   target is a median ratio within 1.3x.
2. ``pdmux estimate --all-levels`` for every GPU profile with a known SM count and 10 model
   profiles, one process each; the target is every run under 2 s.

Usage: ``python benchmarks/bench_cli.py [--pairs N] [--write]``; ``--write`` replaces this
benchmark's section of benchmarks/RESULTS.md with the figures.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import results_md

ROOT = Path(__file__).resolve().parent.parent
FLOOR = ROOT.parent / "shared" / "bench" / "floor_app.py"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Planning commands: whole-process time"
MODELS = ["qwen3-8b", "qwen3-0.6b", "qwen3-32b", "qwen3-30b-a3b", "llama-3.1-8b", "llama-3.1-70b",
          "mistral-7b-v0.3", "mixtral-8x7b", "gpt-oss-20b", "deepseek-v3"]


def pdmux_cmd() -> list[str]:
    """The installed console script (not a pyenv shim, which adds a shell start-up of its own)."""
    script = Path(sysconfig.get_path("scripts")) / "pdmux"
    if script.exists():
        return [str(script)]
    exe = shutil.which("pdmux")
    return [exe] if exe else [sys.executable, "-m", "pdmux_cli"]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    return time.perf_counter() - start


def compile_bytecode() -> None:
    """Cache pdmux's bytecode as pip does at install time (an editable checkout under
    PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every module on every start)."""
    import compileall

    compileall.compile_dir(str(ROOT / "pdmux_cli"), quiet=1)


def bench_splits(pairs: int) -> dict:
    ours, floor, ratios = [], [], []
    cmd_ours = pdmux_cmd() + ["splits", "--gpu", "h100"]
    cmd_floor = [sys.executable, str(FLOOR), "splits"]
    for cmd in (cmd_ours, cmd_floor):  # warm the page cache
        wall(cmd)
    for i in range(pairs):
        if i % 2:
            a = wall(cmd_ours)
            b = wall(cmd_floor)
        else:
            b = wall(cmd_floor)
            a = wall(cmd_ours)
        ours.append(a)
        floor.append(b)
        ratios.append(a / b)
    return {"pairs": pairs, "ours_median_s": statistics.median(ours),
            "floor_median_s": statistics.median(floor), "ratio_median": statistics.median(ratios),
            "ratio_p90": sorted(ratios)[int(0.9 * (len(ratios) - 1))]}


def bench_estimate() -> dict:
    sys.path.insert(0, str(ROOT))
    from pdmux_cli.catalog.hardware import load_gpus

    gpus = [g.key for g in load_gpus() if g.sm_count is not None]
    times = []
    for gpu in gpus:
        for model in MODELS:
            times.append((wall(pdmux_cmd() + ["estimate", "--all-levels", "--gpu", gpu, "--model", model]),
                          gpu, model))
    worst = max(times)
    return {"runs": len(times), "gpus": len(gpus), "models": len(MODELS),
            "median_s": statistics.median(t for t, _, _ in times), "max_s": worst[0],
            "slowest": f"{worst[1]} / {worst[2]}", "total_s": sum(t for t, _, _ in times)}


def write_section(text: str) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md."""
    results_md.write_section(SECTION, text, RESULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    compile_bytecode()
    s = bench_splits(args.pairs)
    e = bench_estimate()
    machine = (f"{platform.node() or 'host'}: {os.cpu_count()} cores, "
               f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    text = (
        f"{SECTION}\n\n"
        f"Measured {datetime.date.today().isoformat()} on {machine} with `python "
        f"benchmarks/bench_cli.py`.\n\n| what | figure | target |\n|---|---|---|\n"
        f"| `pdmux splits --gpu h100` / floor_app.py, median of {s['pairs']} paired runs | "
        f"{s['ratio_median']:.2f}x ({s['ours_median_s'] * 1e3:.0f} ms vs {s['floor_median_s'] * 1e3:.0f} ms; "
        f"p90 ratio {s['ratio_p90']:.2f}x) | <= 1.3x |\n"
        f"| `pdmux estimate --all-levels`, {e['gpus']} GPU profiles x {e['models']} models, one process each "
        f"| max {e['max_s']:.2f} s ({e['slowest']}), median {e['median_s']:.2f} s, {e['runs']} runs in "
        f"{e['total_s']:.0f} s | every run < 2 s |\n"
    )
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
