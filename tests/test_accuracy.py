"""The accuracy gate: the shipped cost model's errors against the shipped measurements may not grow.

Thresholds were set from the first run of the report (2026-12-01; figures in benchmarks/RESULTS.md and
docs/accuracy.md), rounded up to the next half percent: a change to the model, its fits or its data that
makes any term worse fails here. Never raise a threshold to make a change pass: fix the change, or
say in the closing note why the old figure was wrong.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pdmux_cli.cli import app
from pdmux_cli.costmodel.accuracy import report

#: term -> (largest median |error|, largest p90 |error|), fractions. First run: decode 5.3% / 16.5%,
#: prefill 6.6% / 14.6%, GEMM 6.1% / 23.7%, prefill attention 7.1% / 29.1%, decode attention 1.5% /
#: 17.7%, bandwidth vs SMs 5.1% / 29.7%, GEMM vs SMs 24.4% / 28.6%, interference 0.6% / 22.5%.
#: All-reduce (issue 10, first run): SGLang custom <= 8 MiB 4.6% / 18.8%, NCCL > 8 MiB 1.5% / 6.1%, NCCL
#: from the custom all-reduce's fit (out-of-sample) 10.5% / 21.6%.
#: fp8 and A100 decode attention (issue 18, first run): fp8 per-tensor GEMM 6.1% / 23.3%, fp8 block-scaled
#: GEMM 5.9% / 20.0%, decode attention over an fp8 KV cache 2.1% / 14.4%, A100 decode attention (vLLM's
#: FA2 table) 3.8% / 17.2%, the same fit against SGLang's A100 FlashAttentionBackend table 33.4% / 48.7%
#: (a kernel SGLang does not pick on an A100: the gap is the reason for the re-fit) and against NanoFlow's
#: A100 decode kernel 2.6% / 5.4%. "decode attention" went from 1.5% / 17.7% to 1.4% / 12.7% (A100's
#: points now from vLLM's table); its gate stays.
#: MoE (first run): the fused MoE of aiconfigurator's SGLang tables, a model out per GPU, kernel and dtype
#: 7.7% / 31.6%; the shipped fits in-sample 5.1% / 28.6%; the points the fits leave out (touched weights
#: within L2, not latency-bound) 9.8% / 44.6%.
GATE = {
    "decode step (<= 256 tokens)": (0.055, 0.17),
    "prefill step (>= 512 tokens)": (0.07, 0.15),
    "GEMM": (0.065, 0.24),
    "prefill attention": (0.075, 0.295),
    "decode attention": (0.02, 0.18),
    "GEMM, fp8 per-tensor": (0.065, 0.235),
    "GEMM, fp8 block-scaled": (0.06, 0.205),
    "decode attention, fp8 KV": (0.025, 0.145),
    "A100 decode attention": (0.04, 0.175),
    "A100 decode attention vs SGLang FA-backend table": (0.335, 0.49),
    "A100 decode attention vs NanoFlow kernel": (0.03, 0.055),
    "bandwidth vs SMs": (0.055, 0.30),
    "GEMM vs SMs": (0.245, 0.29),
    "interference": (0.01, 0.23),
    "all-reduce, SGLang custom (<= 8 MiB)": (0.05, 0.19),
    "all-reduce, NCCL (> 8 MiB)": (0.02, 0.065),
    "all-reduce > 8 MiB from custom-AR fit": (0.11, 0.22),
    "MoE": (0.08, 0.32),
    "MoE, shipped fits": (0.055, 0.29),
    "MoE, weights within L2": (0.10, 0.45),
}


@pytest.fixture(scope="module")
def terms():
    return {t.term: t for t in report()}


@pytest.mark.parametrize("name", sorted(GATE))
def test_error_does_not_grow(terms, name: str) -> None:
    term = terms[name]
    median, p90 = GATE[name]
    assert term.points, name
    assert term.median_abs_error <= median, (name, term.median_abs_error)
    assert term.p90_abs_error <= p90, (name, term.p90_abs_error)


def test_issue_targets_on_step_times(terms) -> None:
    """Leave-one-model-out median error <= 10% on decode and prefill step times (issue 'Cost model v2')."""
    assert terms["decode step (<= 256 tokens)"].median_abs_error <= 0.10
    assert terms["prefill step (>= 512 tokens)"].median_abs_error <= 0.10


def test_roofline_beats_the_chapter_where_the_chapter_is_wrong(terms) -> None:
    """The chapter's model: decode ~22% too short, prefill ~26% too long on the same layers."""
    chapter_decode = terms["chapter: decode step (<= 256)"]
    chapter_prefill = terms["chapter: prefill step (>= 512)"]
    assert chapter_decode.median_error < -0.15 and chapter_prefill.median_error > 0.15
    assert terms["decode step (<= 256 tokens)"].median_abs_error < chapter_decode.median_abs_error / 3
    assert terms["prefill step (>= 512 tokens)"].median_abs_error < chapter_prefill.median_abs_error / 3


def test_every_term_is_reported_with_points_and_a_method(terms) -> None:
    assert set(GATE) <= set(terms)
    for term in terms.values():
        assert term.points and term.method in ("LOMO", "in-sample", "out-of-sample")
        assert term.worst is not None and abs(term.worst.error) >= term.p90_abs_error


def test_accuracy_cli_table_and_json() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["accuracy"])
    assert r.exit_code == 0, r.stderr
    for text in ("decode step", "bandwidth vs SMs", "LOMO", "in-sample", "aiconfigurator-core 0.12.0"):
        assert text in r.stdout
    r = runner.invoke(app, ["accuracy", "--json"])
    data = json.loads(r.stdout)
    names = [t["term"] for t in data["terms"]]
    assert names[:2] == ["decode step (<= 256 tokens)", "prefill step (>= 512 tokens)"]
    assert all(0 <= t["median_abs_error"] <= t["p90_abs_error"] for t in data["terms"])


def test_allreduce_terms_cover_every_kernel_and_size(terms) -> None:
    """The custom term covers every GPU shipped, the NCCL term both Vidur nodes at 2, 4 and 8 GPUs."""
    custom = terms["all-reduce, SGLang custom (<= 8 MiB)"]
    assert {p.what.split()[0] for p in custom.points} == {
        "h100-sxm", "h200-sxm", "b200", "a100-sxm-80gb", "gb200", "l40s", "rtx-pro-6000", "b300", "gb300"}
    nccl = terms["all-reduce, NCCL (> 8 MiB)"]
    assert {(p.what.split()[0], p.what.split(", ")[1]) for p in nccl.points} == {
        (g, f"{n} GPUs") for g in ("h100-sxm", "a100-sxm-80gb") for n in (2, 4, 8)}
    assert all(p.measured > 0 and p.predicted > 0 for p in (*custom.points, *nccl.points))


def test_moe_terms_cover_every_gpu_and_its_kernels(terms) -> None:
    """Every GPU shipped has fused-MoE points; B200's LOMO points cover the TRT-LLM-gen runner in bf16, block
    fp8 and MXFP4 (Triton there is fitted to Mixtral alone: no model to leave out)."""
    shipped = terms["MoE, shipped fits"]
    assert {p.what.split()[0] for p in shipped.points} == {
        "h100-sxm", "h200-sxm", "b200", "a100-sxm-80gb", "gb200", "l40s", "rtx-pro-6000", "b300", "gb300"}
    b200 = {p.what.split()[2] for p in terms["MoE"].points if p.what.startswith("b200 ")}
    assert b200 == {"flashinfer_trtllm/bf16", "flashinfer_trtllm/fp8_block",
                    "flashinfer_trtllm/w4a8_mxfp4_mxfp8"}
    assert all(p.measured > 0 and p.predicted > 0 for p in shipped.points)
