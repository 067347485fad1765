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
- ``eager_launch_moe_s`` (searched first, and last: the better fit is kept): the host time per kernel of
  a MoE model's eager forward (a dense model's is measured: ``common.yaml``); every run prefilled eagerly
  (SGLang <= 0.5.6), so a short prefill takes at least its kernels' launches.

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
import math
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
from pdmux_cli.costmodel import uncertainty as unc

OUT = ROOT / "profiles" / "efficiency" / "serving.yaml"

STEP_SOURCE = ("step_s: SGLang's per-token CPU overhead measured against a mock forward, batch 1 "
               "(tenstorrent/tt-inference-server issue 3560, 2026-05: 2.94 ms TPOT vs a 2.632 ms forward "
               "floor)")


def fit_line(line: str, pool: ProcessPoolExecutor) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The coordinate search (pdmux_cli.simulate.serving_fit) over one release line's runs."""
    runs = [r for r in sa.load_runs() if r.release_line == line]
    return serving_fit.fit_public(runs, mapper=pool.map)


#: The front end's time per prompt token, measured (not fitted): ``benchmarks/measure_frontend.py``.
FRONTEND_TOKEN_S = 1.6e-06
FRONTEND_SOURCE = ("frontend_token_s: measured by benchmarks/measure_frontend.py (2026-12-04, AMD EPYC VM, 2 "
                   "shared cores, transformers 5.25 fast tokenizer, Meta's Llama-3.2 tokenizer): "
                   "apply_chat_template(tokenize=True) 65 us + 1.58 us a token over 51-8001-token prompts "
                   "(the "
                   "tokenizer call alone 2.1 us a token in the same run); a server's CPU may be faster")


def seconds(terms: dict, option: str) -> float:
    """A fitted term (ms) as serving.yaml writes it (s, 4 significant digits)."""
    return float(f"{terms[option] / 1e3:.4g}")


def terms_entry(terms: dict) -> dict[str, float]:
    """The serving terms of one fit as serving.yaml's keys (s)."""
    return {"per_request_step_s": seconds(terms, "per_request_overhead_ms"),
            "eager_launch_moe_s": seconds(terms, "eager_launch_moe_ms"),
            "admission_delay_s": seconds(terms, "admission_delay_ms"),
            "first_token_delay_s": 0.0,
            "admission_interval_s": seconds(terms, "admission_interval_ms")}


#: The metric kinds that identify each searched term: a leave-one-source-out fit whose remaining runs measure
#: none of them (e.g. SGLang's H200 attention-backend page: throughput only) cannot place the term, and
#: holds it at the default line's fitted value (a fit that never saw the source either).
IDENTIFIED_BY = {
    "admission_delay_ms": {"TTFT (median)", "E2E latency (median)"},
    "admission_interval_ms": {"TTFT (median)", "E2E latency (median)"},
    "eager_launch_moe_ms": {"TTFT (median)", "E2E latency (median)"},
    "per_request_overhead_ms": {"ITL (median)", "TPOT (median)", "E2E latency (median)", "throughput"},
}


def default_line_terms(doc: dict) -> dict[str, float]:
    """serving.yaml's top-level (default line's) searched terms as ms options."""
    sched, req = doc["scheduler"], doc["request_path"]
    return {"per_request_overhead_ms": sched["per_request_step_s"] * 1e3,
            "eager_launch_moe_ms": sched.get("eager_launch_moe_s", 0.0) * 1e3,
            "admission_delay_ms": req["admission_delay_s"] * 1e3,
            "admission_interval_ms": req["admission_interval_s"] * 1e3}


def held_terms(rest: list, default: dict[str, float]) -> dict[str, float]:
    """The terms ``rest`` cannot identify (:data:`IDENTIFIED_BY`; the MoE launch term without a MoE run),
    held at ``default``."""
    from pdmux_cli.catalog.model import load_model

    kinds = {sa.METRICS[name][0] for r in rest for name, _ in r.metrics}
    moe = any(load_model(r.model).num_experts for r in rest)
    return {term: default[term] for term, needs in IDENTIFIED_BY.items()
            if not kinds & needs or (term == "eager_launch_moe_ms" and not moe)}


def leave_one_source_out(pool: ProcessPoolExecutor, default: dict[str, float]) -> dict[str, dict[str, dict]]:
    """For each release line and each source (campaign, :func:`serving_accuracy.source_of`) of its runs, the
    serving terms fitted to that line's other sources (the terms they cannot identify held at ``default``,
    the default line's fit: :func:`held_terms`): what ``pdmux accuracy --serving`` predicts the source's runs
    with (its out-of-sample row), and the residuals the intervals come from."""
    runs = sa.load_runs()
    out: dict[str, dict[str, dict]] = {}
    for line in sorted({r.release_line for r in runs}, reverse=True):
        mine = [r for r in runs if r.release_line == line]
        for source in sorted({r.campaign for r in mine}):
            rest = [r for r in mine if r.campaign != source]
            held = held_terms(rest, default)
            searches = [{k: v for k, v in grids.items() if k not in held}
                        for grids in serving_fit.PUBLIC_SEARCHES]
            start = {**serving_fit.PUBLIC_START, **held}
            fits = [serving_fit.fit_terms(rest, grids=g, start=start, mapper=pool.map) for g in searches]
            terms, errors = min(fits, key=lambda fit: serving_fit.objective(fit[1]))
            out.setdefault(line, {})[source] = {**terms_entry(terms), "fitted_runs": len(rest),
                                                "left_out_runs": len(mine) - len(rest),
                                                "held_at_default_line": sorted(held)}
            print(f"line {line} without {source}: {terms} (held {sorted(held)}) -> "
                  f"{serving_fit.summary(errors)}", file=sys.stderr)
    return out


def build(workers: int, loso_only: bool = False) -> dict:
    runs = sa.load_runs()
    lines = Counter(r.release_line for r in runs)
    if loso_only:  # keep the file's full fits, refit the leave-one-source-out terms only
        doc = yaml.safe_load(OUT.read_text())
        with ProcessPoolExecutor(workers) as pool:
            doc["leave_one_source_out"] = leave_one_source_out(pool, default_line_terms(doc))
        return doc
    fits = {}
    with ProcessPoolExecutor(workers) as pool:
        for line in sorted(lines, reverse=True):
            terms, errors = fit_line(line, pool)
            fits[line] = (terms, errors)
            print(f"line {line}: {terms} -> {serving_fit.summary(errors)}", file=sys.stderr)
        loso = leave_one_source_out(pool, {k: float(v) for k, v in fits["0.5"][0].items()
                                           if k in IDENTIFIED_BY})
    sources = {line: sorted({r.source_url.split('/blob/')[0].replace('https://github.com/', '') for r in runs
                             if r.release_line == line}) for line in lines}

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
            "eager_launch_moe_s": seconds(top, "eager_launch_moe_ms"),
            "source": (f"{STEP_SOURCE}; per_request_s: not identifiable from the public runs (the overlap "
                       f"scheduler they ran hides it), 0; per_request_step_s and eager_launch_moe_s (host "
                       f"time per kernel of a MoE model's eager prefill, with the kernels SGLang's layers "
                       f"launch counted from "
                       f"its code: costmodel.operators.eager_kernels_per_layer; every run prefilled eagerly, "
                       f"SGLang <= 0.5.6): {fitted}"),
        },
        "request_path": {
            "admission_delay_s": seconds(top, "admission_delay_ms"),
            "first_token_delay_s": 0.0,
            "admission_interval_s": seconds(top, "admission_interval_ms"),
            "frontend_token_s": FRONTEND_TOKEN_S,
            "source": (f"{fitted}; first_token_delay_s: client-side timings cannot tell it from the "
                       "admission delay (both add to TTFT and E2E alike), so the whole fixed delay is on the "
                       f"admission side; {FRONTEND_SOURCE}"),
        },
        "fit": serving_fit.summary(top_errors),
        "older_releases": {
            line: {**terms_entry(terms),
                   "runs": lines[line], "fit": serving_fit.summary(errors),
                   "source": f"the {lines[line]} public runs of SGLang {line}.x ({', '.join(sources[line])})"}
            for line, (terms, errors) in sorted(fits.items()) if line != "0.5"
        },
        "leave_one_source_out": loso,
    }
    return doc


RESIDUALS = ROOT / "profiles" / "efficiency" / unc.RESIDUALS_FILE


def residual_records(workers: int) -> list[dict]:
    """Every public run's residuals (``ln(measured / predicted)``) per figure, with the run's source (its
    campaign), server key and regime (:mod:`pdmux_cli.costmodel.uncertainty`): the fitted runs out of sample
    (the terms of ``leave_one_source_out``) and in-sample (the shipped terms); the held-out runs (read by no
    fit) with the shipped terms, out of sample by construction (``heldout: true``)."""
    from pdmux_cli.catalog.hardware import find_gpu_or_file

    runs = list(sa.load_runs())
    inside = sa.predictions(runs, None, workers)
    outside = sa.predictions(runs, sa.LEAVE_SOURCE_OUT, workers)
    held = list(sa.load_runs(sa.HELDOUT_RUNS))
    held_pred = sa.predictions(held, None, workers)
    out = []
    for run, ins, oos, heldout in [*zip(runs, inside, outside, [False] * len(runs)),
                                   *zip(held, held_pred, held_pred, [True] * len(held))]:
        if not isinstance(ins, dict) or not isinstance(oos, dict):
            continue
        family = unc.gpu_family(find_gpu_or_file(run.gpu).compute_capability)
        seen = set()
        for name, measured in run.metrics:
            figure = unc.RUN_FIGURE[name]
            p_in, p_out = ins.get(name, math.nan), oos.get(name, math.nan)
            usable = math.isfinite(p_in) and math.isfinite(p_out) and p_in > 0 and p_out > 0
            if figure in seen or not usable:
                continue  # one residual per figure a run (its throughputs are one figure)
            seen.add(figure)
            out.append({"run": run.id, "figure": figure,
                        "log_ratio": round(math.log(measured / p_out), 5),
                        "in_sample": round(math.log(measured / p_in), 5),
                        "source": run.campaign, "heldout": heldout,
                        "server": f"{run.campaign}|{run.gpu}|{run.model}|tp{run.tp}|{run.release_line}",
                        "loop": unc.client_loop(run.request_rate, run.max_concurrency),
                        "in_flight": round(oos["in_flight"], 3), "family": family})
    return out


#: The fewest runs a regime cell of the residuals may hold (below it, the figure's whole sample is used).
MIN_CELL = 12


#: A split is kept when it narrows a figure's intervals by at least this share on average.
SPLIT_GAIN = 0.2


def _width(values: list[float]) -> float | None:
    bounds = unc.conformal_bounds(values)
    return None if bounds is None else bounds[1] - bounds[0]


def choose_splits(records: list[dict], edges: tuple[float, ...]) -> dict[str, list[str]]:
    """The regime feature each figure's residuals are split by: per figure, the feature of
    :data:`pdmux_cli.costmodel.uncertainty.FEATURES` whose cells (those with at least :data:`MIN_CELL`
    runs; the others take the whole sample) give the narrowest intervals on average (log width weighted by
    the cell's runs), kept only where that is :data:`SPLIT_GAIN` narrower than the whole sample's. Chosen on
    the same residuals the intervals come from, so the held-out runs' coverage is the check."""
    out: dict[str, list[str]] = {}
    for figure in unc.FIGURES:
        mine = [r for r in records if r["figure"] == figure]
        pooled = _width([r["log_ratio"] for r in mine])
        if pooled is None or len(mine) < 2 * MIN_CELL:
            continue
        best, best_width = None, pooled * (1 - SPLIT_GAIN)
        for feature in unc.FEATURES:
            cells: dict[str, list[float]] = {}
            for r in mine:
                key = unc.load_bin(r["in_flight"], edges) if feature == "load" else r[feature]
                cells.setdefault(key, []).append(r["log_ratio"])
            width = sum(len(v) * ((_width(v) if len(v) >= MIN_CELL else None) or pooled)
                        for v in cells.values()) / len(mine)
            if width < best_width:
                best, best_width = feature, width
        if best is not None:
            out[figure] = [best]
    return out


def residuals_doc(workers: int) -> dict:
    """``serving_residuals.yaml`` (:mod:`pdmux_cli.costmodel.uncertainty`)."""
    records = residual_records(workers)
    edges = LOAD_EDGES
    return {
        "format": unc.FORMAT,
        "written_by": "benchmarks/fit_serving.py",
        "source": (f"{len(records)} residuals of {len({r['run'] for r in records})} public SGLang serving "
                   "runs (profiles/measurements/serving/sglang_serving_runs.yaml and, heldout: true, "
                   "sglang_serving_heldout.yaml), ln(measured / predicted): log_ratio with the serving terms "
                   "fitted without the run's source (serving.yaml leave_one_source_out; the held-out runs "
                   "with the shipped terms, which no held-out run fitted), in_sample with the shipped terms "
                   f"({date.today().isoformat()})"),
        "load_edges": list(edges),
        "min_cell": MIN_CELL,
        "splits": choose_splits(records, edges),
        "residuals": records,
    }


#: Load bins of the residuals' regimes: requests in flight on average.
LOAD_EDGES = (4.0, 32.0)


def write_residuals(workers: int) -> None:
    from pdmux_cli.costmodel import efficiency

    efficiency.release_line_terms.cache_clear()
    efficiency.load_serving.cache_clear()
    doc = residuals_doc(workers)
    header = ("# pdmux serving residuals, written by benchmarks/fit_serving.py; do not edit by hand.\n"
              "# log_ratio, in_sample: ln(measured / predicted); in_flight: requests in flight on average.\n")
    RESIDUALS.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=118))
    print(f"wrote {RESIDUALS}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the file on disk instead of writing")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loso-only", action="store_true",
                        help="keep the file's fits and refit only the leave-one-source-out terms")
    parser.add_argument("--residuals-only", action="store_true",
                        help="fit nothing: rewrite serving_residuals.yaml from serving.yaml's terms")
    args = parser.parse_args()
    if args.residuals_only:
        write_residuals(args.workers)
        return 0
    doc = build(args.workers, args.loso_only)
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
    write_residuals(args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
