"""Fit the serving terms of ``profiles/efficiency/serving.yaml`` to the public SGLang serving runs.

For each SGLang release line of ``profiles/measurements/serving/sglang_serving_runs.yaml`` (0.5 is the
default every command uses; 0.4 and 0.3 replay older runs in ``pdmux accuracy --serving``), a coordinate
search over four terms, each on a grid, replaying every run of that line end to end
(:mod:`pdmux_cli.simulate.serving_accuracy`):

- ``admission_delay_s``: TTFT's fixed part, from a request's arrival until the scheduler can admit it
  (client-side timings cannot split it from ``first_token_delay_s``, the stream back: every token pays
  both the same way; the whole delay is put on the admission side and ``first_token_delay_s`` is 0);
- ``per_request_step_s``: what every step spends per request in its batch beyond the kernels (ITL's
  growth with the running requests);
- ``admission_interval_s``: the front end's time per request (a burst enters the scheduler one request
  per interval);
- ``eager_launch_s`` (searched first): the host time per kernel of an eager forward; every run
  prefilled eagerly (SGLang <= 0.5.6), so a short prefill takes at least its kernels' launches.

The scheduler's fixed CPU time per step stays the published 0.31 ms (tenstorrent/tt-inference-server issue
3560), and its CPU time per running request (``per_request_s``, hidden by the overlap scheduler) stays 0:
every public run used the overlap scheduler, which hides it, except the 2024 runs of older code.

The search and its objective are :mod:`pdmux_cli.simulate.serving_fit`'s (``pdmux calibrate --bench-serving``
runs the same on the user's own runs). Deterministic.

Usage: ``python benchmarks/fit_serving.py [--check] [--workers N]``; ``--check`` fits and compares with the
file on disk (exit 1 when a term differs) instead of writing it. About 5-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdmux_cli.simulate import serving_accuracy as sa
from pdmux_cli.simulate import serving_fit

OUT = ROOT / "profiles" / "efficiency" / "serving.yaml"

STEP_SOURCE = ("step_s: SGLang's per-token CPU overhead measured against a mock forward, batch 1 "
               "(tenstorrent/tt-inference-server issue 3560, 2026-05: 2.94 ms TPOT vs a 2.632 ms forward "
               "floor)")


def fit_line(line: str, pool: ProcessPoolExecutor) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The coordinate search (pdmux_cli.simulate.serving_fit) over one release line's runs."""
    runs = [r for r in sa.load_runs() if r.release_line == line]
    return serving_fit.fit_public(runs, mapper=pool.map)


def build(workers: int) -> dict:
    runs = sa.load_runs()
    lines = Counter(r.release_line for r in runs)
    fits = {}
    with ProcessPoolExecutor(workers) as pool:
        for line in sorted(lines, reverse=True):
            terms, errors = fit_line(line, pool)
            fits[line] = (terms, errors)
            print(f"line {line}: {terms} -> {serving_fit.summary(errors)}", file=sys.stderr)
    sources = {line: sorted({r.source_url.split('/blob/')[0].replace('https://github.com/', '') for r in runs
                             if r.release_line == line}) for line in lines}

    def seconds(terms: dict, option: str) -> float:
        return float(f"{terms[option] / 1e3:.4g}")

    top, top_errors = fits["0.5"]
    fitted = (f"fitted by benchmarks/fit_serving.py ({date.today().isoformat()}) to {lines['0.5']} public "
              f"SGLang 0.5.x serving runs ({', '.join(sources['0.5'])}; profiles/measurements/serving/)")
    doc = {
        "format": "pdmux-efficiency/1",
        "fitted_by": "benchmarks/fit_serving.py",
        "scheduler": {
            "step_s": 0.00031,
            "per_request_s": 0.0,
            "per_request_step_s": seconds(top, "per_request_overhead_ms"),
            "eager_launch_s": seconds(top, "eager_launch_ms"),
            "source": (f"{STEP_SOURCE}; per_request_s: not identifiable from the public runs (the overlap "
                       f"scheduler they ran hides it), 0; per_request_step_s and eager_launch_s (host time "
                       f"per kernel of an eager prefill, with the kernels SGLang's layers launch counted "
                       f"from "
                       f"its code: costmodel.operators.eager_kernels_per_layer; every run prefilled eagerly, "
                       f"SGLang <= 0.5.6): {fitted}"),
        },
        "request_path": {
            "admission_delay_s": seconds(top, "admission_delay_ms"),
            "first_token_delay_s": 0.0,
            "admission_interval_s": seconds(top, "admission_interval_ms"),
            "source": (f"{fitted}; first_token_delay_s: client-side timings cannot tell it from the "
                       "admission delay (both add to TTFT and E2E alike), so the whole fixed delay is on the "
                       "admission side"),
        },
        "fit": serving_fit.summary(top_errors),
        "older_releases": {
            line: {"per_request_step_s": seconds(terms, "per_request_overhead_ms"),
                   "eager_launch_s": seconds(terms, "eager_launch_ms"),
                   "admission_delay_s": seconds(terms, "admission_delay_ms"),
                   "first_token_delay_s": 0.0,
                   "admission_interval_s": seconds(terms, "admission_interval_ms"),
                   "runs": lines[line], "fit": serving_fit.summary(errors),
                   "source": f"the {lines[line]} public runs of SGLang {line}.x ({', '.join(sources[line])})"}
            for line, (terms, errors) in sorted(fits.items()) if line != "0.5"
        },
    }
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the file on disk instead of writing")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    doc = build(args.workers)
    header = ("# pdmux serving profile, written by benchmarks/fit_serving.py; do not edit by hand.\n# Units: "
              "seconds.\n")
    text = header + yaml.safe_dump(doc, sort_keys=False, width=118)
    if args.check:
        old = yaml.safe_load(OUT.read_text())
        keys = [("scheduler", "per_request_step_s"), ("request_path", "admission_delay_s"),
                ("request_path", "admission_interval_s")]
        diff = [k for k in keys if old[k[0]][k[1]] != doc[k[0]][k[1]]]
        print("serving.yaml matches the fit" if not diff else f"serving.yaml differs: {diff}")
        return 1 if diff else 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
