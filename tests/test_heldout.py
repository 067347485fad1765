"""The held-out serving runs (profiles/measurements/serving/sglang_serving_heldout.yaml): kept out of every
fit, replayed as published, reported apart, and the check of the intervals' coverage (issue 29)."""

from __future__ import annotations

import math
from pathlib import Path

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.simulate import serving_accuracy as sa

ROOT = Path(__file__).resolve().parents[1]
HELD = sa.load_runs(sa.HELDOUT_RUNS)


def test_held_out_runs_are_shipped_whole_and_as_published() -> None:
    assert len(HELD) >= 10 and {r.campaign for r in HELD}
    fitted = {r.id for r in sa.load_runs()}
    fitted_sources = {r.campaign for r in sa.load_runs()}
    for run in HELD:
        assert run.id not in fitted and run.campaign not in fitted_sources
        assert find_gpu(run.gpu) and load_model(run.model) and run.source_url.startswith("https://")
        assert run.endpoint in ("generate", "completions", "chat")
    # ree2raz/inference-bench results/summary.csv, sglang,short,64: throughput 913.9 tok/s, TTFT p50 0.3135 s,
    # TPOT p50 0.069 s, latency p50 9.0802 s; the server's flags from bench_lib.SGLANG_SERVER_ARGS
    run = next(r for r in HELD if r.id == "inference-bench-l4-qwen2.5-7b-short-c64")
    assert dict(run.metrics) == {"ttft_p50_ms": 313.5, "tpot_p50_ms": 69.0, "e2e_p50_ms": 9080.2,
                                 "output_tok_s": 913.9}
    assert dict(run.server_args) == {"disable_cuda_graph": True, "max_running_requests": 64,
                                     "mem_fraction_static": 0.85}
    assert (run.max_concurrency, run.request_rate, run.num_prompts) == (64, math.inf, 100)
    trace = sa.workload(run)
    assert trace.block_tokens == 16 and len(trace.hash_ids) == 100
    assert 37 <= min(trace.prompt_tokens) and max(trace.prompt_tokens) <= 46  # the chat template's ~42 tokens


def test_no_fit_reads_the_held_out_runs() -> None:
    """No serving term is fitted to a held-out run: the fitting module never names them, and in
    benchmarks/fit_serving.py only the residuals the intervals are drawn from read them (their residuals
    with the shipped terms, out of sample by construction; each held-out source's coverage is checked
    without its own: tests/test_serving_accuracy.py)."""
    import ast

    text = (ROOT / "pdmux_cli" / "simulate" / "serving_fit.py").read_text(encoding="utf-8")
    assert "HELDOUT" not in text and "heldout" not in text
    tree = ast.parse((ROOT / "benchmarks" / "fit_serving.py").read_text(encoding="utf-8"))
    readers = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
               and "HELDOUT" in ast.unparse(node)}
    assert readers == {"residual_records"}, readers


def test_the_shared_system_prompt_is_found_in_the_radix_cache() -> None:
    """Qwen2.5's chat template puts the same system prompt before every prompt: 100 closed-loop requests
    find most of each short prompt cached (SGLang's radix cache matches per token; pdmux per 16 tokens)."""
    from pdmux_cli.simulate.metrics import summarize
    from pdmux_cli.simulate.runner import simulate
    from pdmux_cli.simulate.schedulers import ChunkedPolicy
    from pdmux_cli.simulate.engine import make_setup

    run = next(r for r in HELD if r.id == "inference-bench-l4-qwen2.5-7b-short-c16")
    setup = make_setup(find_gpu("l4"), load_model(run.model), **dict(run.server_args))
    m = summarize(simulate(sa.workload(run), setup, ChunkedPolicy(4096), max_concurrency=16), 1e9, 1e9)
    assert 0.5 < m.prefix_cache_hit_rate < 0.9


def test_a_clients_warm_up_leaves_its_prompts_in_the_radix_cache() -> None:
    """ree2raz/inference-bench's client (bench_lib.run_benchmark_impl) sends ``prompts[:concurrency * 2]`` to
    the end on the same server before it measures: at 64 streams, all 100 prompts. Replayed
    (``Trace.warm_requests``), the L4's pool holds them all (14,310 distinct prompt tokens in 16-token blocks,
    then 100 x 511 output tokens with KV), and the measured run recomputes only each prompt's last token
    (SGLang matches at most ``extend - 1``). Left out of the shipped held-out file (its ``approximation``)."""
    from dataclasses import replace

    from pdmux_cli.simulate.engine import build_work, make_setup
    from pdmux_cli.simulate.runner import simulate
    from pdmux_cli.simulate.schedulers import ChunkedPolicy

    run = next(r for r in HELD if r.id == "inference-bench-l4-qwen2.5-7b-long-c64")
    assert run.warmup_requests == 0  # not replayed in the shipped file
    setup = make_setup(find_gpu("l4"), load_model(run.model), **dict(run.server_args))
    trace = replace(sa.workload(run), warm_requests=2 * run.max_concurrency)
    pool = setup.kv_pool(2048)
    assert build_work(sa.workload(run), setup, pool.tokens).cache.cached_tokens() == 0
    work = build_work(trace, setup, pool.tokens)
    assert work.cache.cached_tokens() == 14_310 + 100 * 511 and work.cache.evicted_tokens == 0
    assert all(work.cache.cum[work.cache.match(work.keys[rid])[0]] == trace.prompt_tokens[rid]
               for rid in range(100))
    counters = simulate(trace, setup, ChunkedPolicy(2048), max_concurrency=64).counters
    assert (counters["prefix_cache_hit_tokens"], counters["prefix_cache_prompt_tokens"]) == (145_880, 145_980)


def test_the_warm_up_evicts_its_least_recently_used_requests_past_the_pool() -> None:
    """Three warm-up requests of 32 prompt tokens (two 16-token blocks each) and 9 outputs hold 40 tokens each
    (the last output's KV is never written): a 100-token pool keeps the last two whole and evicts the first
    (its outputs, then its prompt: least recently used first); the counters start at 0 after it."""
    from pdmux_cli.simulate.engine import build_work, make_setup
    from pdmux_cli.simulate.traces import Trace

    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
    trace = Trace((0.0, 0.0, 0.0), (32, 32, 32), (9, 9, 9), hash_ids=((1, 2), (3, 4), (5, 6)),
                  block_tokens=16, warm_requests=3)
    work = build_work(trace, setup, 100)
    cache = work.cache
    assert cache.cached_tokens() == 80 and cache.evicted_tokens == 0
    assert [cache.cum[cache.match(work.keys[rid])[0]] for rid in range(3)] == [0, 32, 32]
