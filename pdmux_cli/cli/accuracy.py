"""``pdmux accuracy``: how far the roofline cost model is from the public measurements it ships with
(kernel terms, speculative decoding's speedup; with ``--serving``, whole servers).

Parse, call :func:`pdmux_cli.workflows.accuracy.accuracy`, render. Pure Python; about a second (with
``--serving``, the public serving runs replayed).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import typer

from .root import app
from .common import console, print_json, print_note
from .options import deferred, request_of, with_options


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.1%}"


def _terms_table(terms: list, title: str, first: str) -> object:
    """The accuracy table: a row per term (median, p90 and median signed error, the worst point's)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in ((first, "left"), ("method", "left"), ("points", "right"), ("median", "right"),
                      ("p90", "right"), ("bias", "right"), ("worst", "right")):
        table.add_column(col, justify=just)
    for t in terms:
        worst = t.worst
        table.add_row(t.term, t.method, str(len(t.points)), _pct(t.median_abs_error), _pct(t.p90_abs_error),
                      f"{t.median_error:+.1%}", f"{worst.error:+.0%}" if worst else "-")
    table.caption = "bias: median signed error (> 0: the model predicts too long or too much)"
    table.caption_justify = "left"
    return table


def _accuracy_options(function: Any) -> Any:
    """accuracy's options, built from its request's declarations when typer first builds the command
    (:func:`~.options.deferred`: the accuracy workflow is imported only then)."""
    from ..workflows.accuracy import AccuracyRequest

    return with_options(AccuracyRequest, ("as_json", "serving", "runs", "workers"), "accuracy")(function)


@app.command()
@deferred(_accuracy_options)
def accuracy(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (errors as fractions: 0.05 = 5%)."),
    **options: Any,
) -> None:
    """Predict every shipped measurement (Vidur, NanoFlow, aiconfigurator, SGLang's green-context tables) with the roofline cost model:
    median and p90 error per term, and the worst point; then speculative decoding's speedup at the published
    accept length against public SGLang runs (nothing fitted).

    Each row says how it was judged: LOMO (each model predicted by a fit that left it out), out-of-sample (nothing fitted to the points) or in-sample (the constants fitted to those very points). --serving: the whole server against public SGLang serving runs: leave one source out, held out, in-sample."""  # noqa: E501 (the help's first line)
    from ..workflows.accuracy import AccuracyRequest
    from ..workflows.accuracy import accuracy as run

    request = request_of(AccuracyRequest, options)
    result = run(request)
    if as_json:
        print_json(result.to_dict())
    elif request.serving:
        _print_serving(result.terms, result.outcomes, request.runs, result.heldout_coverage())
    else:
        _print_terms(result.terms)
        if result.speculative is not None:
            _print_speculative(result.speculative)


def _print_terms(terms: list) -> None:
    """The kernel-level table, the worst point of each term, and what the methods mean."""
    from ..costmodel.accuracy import METHODS

    con = console()
    con.print(_terms_table(terms, "Roofline cost model vs measurements (|predicted - measured| / "
                                  "measured)", "term"))
    for t in terms:
        if t.worst is not None:
            con.print(f"worst {t.term}: {t.worst.what} ({t.worst.error:+.0%}); data: "
                      f"{t.data}", soft_wrap=True)
    for method, meaning in METHODS.items():
        print_note(con, f"{method}: {meaning}")
    print_note(con, "Vidur has no attention times: the step terms are one layer's GEMMs and element-wise "
                    "ops; attention is its own term. Green ctx: SGLang's tables name no model or TP, so "
                    "their shapes (time on s SMs over the whole GPU's) are compared. Data: "
                    "profiles/measurements/ (Vidur MIT, NanoFlow Apache-2.0, aiconfigurator-core 0.12.0 "
                    "Apache-2.0, SGLang 56f74d24 Apache-2.0)")


def _print_speculative(block: object) -> None:
    """The speculative-decoding block: per point the measured and predicted speedup, the error and the
    round's cost in plain steps (measured: accept length / speedup); the summary; what was left out."""
    from rich.table import Table

    from ..costmodel.speculative_accuracy import FITTED_NOTE

    term = block.term  # type: ignore[attr-defined]
    table = Table(title="Speculative decoding: pdmux's speedup at the published accept length vs public "
                        "SGLang runs (nothing fitted: out of sample)", title_justify="left")
    for col, just in (("source", "left"), ("setup", "left"), ("accept", "right"), ("measured", "right"),
                      ("pdmux", "right"), ("error", "right"), ("round/step", "right")):
        table.add_column(col, justify=just, overflow="fold")  # fold, never cut, in a narrow terminal
    for p in block.predictions:  # type: ignore[attr-defined]
        x = p.point
        setup = f"{x.model} {x.gpu} TP{x.tp} {x.num_steps}-{x.eagle_topk}-{x.num_draft_tokens} bs {x.batch}"
        table.add_row(x.name + (f" {x.label}" if x.label else ""), setup,
                      f"{x.accept_length:g}", f"{x.speedup:.2f}x", f"{p.speedup:.2f}x", f"{p.error:+.0%}",
                      f"{p.measured_round_over_step:.2f} / {p.round_s / p.plain_s:.2f}")
    table.caption = ("measured: throughput with speculation / without at the same batch (EAGLE3 in every "
                     "source); setup: steps-topk-draft tokens, batch; round/step: one speculative round in "
                     "plain decode steps, measured (accept length / speedup) / pdmux")
    table.caption_justify = "left"
    con = console()
    con.print(table)
    worst = term.worst
    preds = block.predictions  # type: ignore[attr-defined]
    over = sum(p.error > 0 for p in preds)
    if worst is not None:
        con.print(f"speculative decoding ({len(term.points)} points, {term.method}): median |error| "
                  f"{_pct(term.median_abs_error)}, p90 {_pct(term.p90_abs_error)}, bias "
                  f"{term.median_error:+.1%}, worst {worst.error:+.0%} ({worst.what}); pdmux's speedup is "
                  f"above the measured one at {over} of {len(term.points)} points; a round costs "
                  f"{statistics.median(p.measured_round_over_step for p in preds):.2f} plain steps measured, "
                  f"{statistics.median(p.round_s / p.plain_s for p in preds):.2f} in pdmux (medians); the "
                  f"measured speedup lies in pdmux's range (the per-request term paid per verified token, "
                  f"or as the release's worker pays it) at {sum(p.in_range for p in preds)} of "
                  f"{len(preds)} points",
                  soft_wrap=True)
    print_note(con, FITTED_NOTE)
    print_note(con, "pdmux's figures: estimate's decode-only round (draft tree, verify, draft extend, the "
                    "per-request term; the CPU's time added to it where the point's SGLang release runs "
                    "speculation without the overlap scheduler (up to 0.5.10; 0.5.12 at topk > 1), hidden "
                    "behind it otherwise) "
                    "over its plain decode step (the CPU hidden), "
                    "with pdmux's default one-layer draft and the published accept length; data: "
                    "profiles/measurements/speculative/sglang_speculative_points.yaml (each source's URL, "
                    "the assumed context and GPU variant)")
    releases = {p.point.name: p.release + ("" if p.overlap else " (no overlap scheduler)") for p in preds}
    print_note(con, "the SGLang release whose rule each source is predicted with (none states one: the "
                    "newest out by its date, or the one it names): "
                    + "; ".join(f"{name} {rel}" for name, rel in releases.items()))
    left = block.not_comparable  # type: ignore[attr-defined]
    print_note(con, f"{len(left)} collected figures not comparable (no accept length, no run without "
                    "speculation, GPU, model or settings unknown): --json lists each with why")


def _runs_table(outcomes: list) -> object:
    """Every replayed run's figures: measured, pdmux's with the shipped terms and out of sample, the
    errors."""
    from rich.table import Table

    table = Table(title="Public SGLang serving runs replayed (measured / pdmux)", title_justify="left")
    for col, just in (("run", "left"), ("metric", "left"), ("measured", "right"), ("pdmux", "right"),
                      ("error", "right"), ("out of sample", "right")):
        table.add_column(col, justify=just, overflow="fold")  # run ids are long: fold them, never cut

    def err(pred: float, measured: float) -> str:
        return "-" if not math.isfinite(pred) else f"{(pred - measured) / measured:+.0%}"

    for o in outcomes:
        for k, (name, measured) in enumerate(o.run.metrics):
            pred = o.predicted.get(name, math.nan)
            oos = "held out" if o.heldout else err(o.predicted_oos.get(name, math.nan), measured)
            table.add_row((o.run.id + (" (held out)" if o.heldout else "")) if k == 0 else "", name,
                          f"{measured:.4g}", "-" if not math.isfinite(pred) else f"{pred:.4g}",
                          err(pred, measured), oos)
    table.caption = ("out of sample: the error with serving terms fitted without the run's source; held out: "
                     "a run no fit saw, its error is already out of sample")
    table.caption_justify = "left"
    return table


def _print_serving(terms: list, outcomes: list, show_runs: bool, heldout_coverage: tuple[int, int]) -> None:
    """``pdmux accuracy --serving``'s tables and notes."""
    from ..costmodel.accuracy import METHODS

    con = console()
    if show_runs:
        con.print(_runs_table(outcomes))
        for o in outcomes:
            con.print(f"{o.run.id} (SGLang {o.run.sglang_version}): {o.error or o.run.command()}",
                      soft_wrap=True)
    con.print(_terms_table(terms, "Simulated SGLang server vs public serving runs (|predicted - measured| / "
                                  "measured)",
                           "metric"))
    for t in terms:
        if t.worst is not None:
            con.print(f"worst {t.term} ({t.method}): {t.worst.what} ({t.worst.error:+.0%})", soft_wrap=True)
    failed = [o for o in outcomes if o.error]
    if failed:
        print_note(con, f"{len(failed)} run(s) not simulated: " + "; ".join(o.error for o in failed))
    for method in dict.fromkeys(t.method for t in terms):
        print_note(con, f"{method}: {METHODS[method]}" + (
            " (profiles/efficiency/serving.yaml, benchmarks/fit_serving.py)" if method != "held-out" else ""))
    fitted = sum(not o.heldout for o in outcomes)
    held = len(outcomes) - fitted
    inside, total = heldout_coverage
    if total:
        print_note(con, f"80% intervals (simulate's, each held-out source's drawn without its own residuals) "
                        f"hold {inside} of the {total} held-out figures ({inside / total:.0%})")
    print_note(con, f"{fitted} fitted runs and {held} held-out runs from public pages "
                    "(profiles/measurements/serving/, each with its source URL), replayed with the defaults, "
                    "scheduler rules and MoE runner of the SGLang release each used (sglang_version), "
                    "SGLang's default schedule (chunked prefill, the overlap scheduler from 0.4 on) and the "
                    "serving terms of "
                    "the run's release line; ShareGPT lengths are approximations, bench_serving's random "
                    "lengths exact; --runs lists every run and the pdmux simulate command closest to it "
                    "(its release's memory defaults and MoE runner; 0.5.23's scheduler rules)")
