"""Simulation results as data: JSON dicts and per-request CSV text (the tables are the CLI's,
:mod:`pdmux_cli.cli.simulate_tables`).

Pure functions of :class:`~pdmux_cli.simulate.metrics.PolicyMetrics`; the workflows and the CLI write them.
JSON keys carry units (``_ms``, ``_s``, ``_rps``); ``NaN`` becomes ``null``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from ..messages import layout_text, render_all
from .metrics import PolicyMetrics
from .traces import HASH_BLOCK_TOKENS, Trace

#: The latency rows: (label, field of PolicyMetrics), and their statistics.
LATENCIES = (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("TPOT", "tpot_ms"), ("E2E", "e2e_ms"))
STATS = ("p50", "p90", "p99", "max")


def _num(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def metrics_dict(m: PolicyMetrics) -> dict[str, Any]:
    """One policy's summary as a JSON-able dict (no per-request lists), with the GPUs it ran on and how
    (``gpus``, ``layout``, ``router``: the load-balance method between its servers, ``null`` for one)."""
    out: dict[str, Any] = {
        "policy": m.policy, "kind": m.kind, "gpus": m.gpus, "layout": layout_text(m.layout),
        "router": m.router or None,
        "requests": m.requests, "completed": m.completed,
        "rejected": m.rejected,
    }
    for _, key in LATENCIES:
        out[key] = {s: _num(getattr(m, key)[s]) for s in STATS}
    out.update({
        "slo_met": m.met, "slo_attainment": m.slo_attainment, "goodput_rps": m.goodput_rps,
        "span_s": m.span_s, "gpu_busy_share": m.gpu_busy_share, "decode_steps": m.decode_steps,
        "kv_pool_tokens": m.kv_pool_tokens, "crashed_at_s": m.crashed_at_s,
        "prefix_cache_hit_rate": m.prefix_cache_hit_rate,
        "counters": m.counters, "notes": render_all(m.notes),
        "output_tok_s": _num(m.output_tok_s),
        "uncertainty": m.uncertainty.to_dict() if m.uncertainty is not None else None,
    })
    if m.group_time_share is not None:
        out["group_time_share"] = [
            {"prefill_sms": g[0], "decode_sms": g[1], "share": share} for g, share in m.group_time_share
        ]
    return out


def trace_dict(trace: Trace) -> dict[str, Any]:
    """What was replayed: source, format, size, duration (s), mean rate (req/s; ``None`` where every request
    arrives at once, or there is one), skipped rows, the requests the server rejects as longer than the
    context length (``rejected_past_context``: left out of the replay); for a trace hashed in blocks other
    than Mooncake's 512 tokens (bench_serving's generated-shared-prefix: 1), ``prefix_block_tokens``."""
    n = len(trace)
    out = {
        "source": trace.source, "format": trace.format, "requests": n,
        "duration_s": trace.duration_s, "mean_qps": trace.mean_qps if trace.duration_s > 0 else None,
        "mean_prompt_tokens": sum(trace.prompt_tokens) / n if n else 0,
        "mean_output_tokens": sum(trace.output_tokens) / n if n else 0,
        "prefix_hash_ids": trace.has_hash_ids,
        "bad_rows": trace.bad_rows,
        "bad_row_examples": [{"line": ln, "reason": why} for ln, why in trace.bad_examples],
        "failed_rows": trace.failed_rows, "notes": render_all(trace.notes),
        "rejected_past_context": trace.past_context,
    }
    if trace.block_tokens != HASH_BLOCK_TOKENS:  # bench_serving's generated-shared-prefix: tokens a hash id
        out["prefix_block_tokens"] = trace.block_tokens
    return out


CSV_FIELDS = ("policy", "request", "arrival_s", "prompt_tokens", "output_tokens", "status", "ttft_ms",
              "itl_p99_ms", "itl_max_ms", "tpot_ms", "e2e_ms", "met_slo", "server", "prefill_server")


def per_request_csv(trace: Trace, metrics: Sequence[PolicyMetrics]) -> str:
    """Per-request results of every policy as CSV text (header :data:`CSV_FIELDS`; empty cells for
    values that do not apply; ``status`` is ``done``, ``rejected`` (never fit in KV memory) or
    ``unfinished`` (cut short by a simulated SGLang crash)); ``server``: the DP replica or decode instance
    that served the request (from 0; empty for one server or a request never routed), ``prefill_server``:
    a disaggregation's prefill instance)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_FIELDS)

    def cell(v: float) -> str:
        return "" if not math.isfinite(v) else f"{v:.3f}"

    for m in metrics:
        pr = m.per_request
        ttft, p99, mx, tpot, e2e, met = (pr["ttft_ms"], pr["itl_p99_ms"], pr["itl_max_ms"], pr["tpot_ms"],
                                         pr["e2e_ms"], pr["met_slo"])
        server, prefill_server = pr.get("server") or [], pr.get("prefill_server") or []

        def where(servers: list[int], i: int) -> str:
            return str(servers[i]) if i < len(servers) and servers[i] >= 0 else ""

        for i in range(m.requests):
            done = math.isfinite(ttft[i])
            status = "done" if done else ("unfinished" if m.crashed_at_s is not None and not m.per_request[
                "rejected"][i] else "rejected")
            writer.writerow((m.policy, i, f"{trace.arrival_s[i]:.6f}", trace.prompt_tokens[i],
                             trace.output_tokens[i], status, cell(ttft[i]), cell(p99[i]), cell(mx[i]),
                             cell(tpot[i]), cell(e2e[i]), int(bool(met[i])), where(server, i),
                             where(prefill_server, i)))
    return buf.getvalue()
