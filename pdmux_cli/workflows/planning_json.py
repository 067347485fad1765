"""The JSON of ``pdmux splits`` and ``pdmux estimate`` (what their results' ``to_dict()`` returns, before the
``"pdmux"`` provenance block). No computation of its own.

JSON keys are stable; numbers are in base units or carry their unit in the key (``itl_ms``,
``memory_bytes``). Imports nothing outside the standard library at module level (``import pdmux`` stays
light: no typer, no rich).
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING, Any

from ..messages import layout_text, render_all

if TYPE_CHECKING:  # type names only: rendering splits must not import the cost model
    from ..planning.estimate import Estimate
    from ..sglang.split_levels import Split


def group_kind(index: int, groups: list[Split]) -> str:
    """``"all prefill"``, ``"level k"`` or ``"all decode"`` for stream group ``index``."""
    if index == 0:
        return "all prefill (plain streams)"
    if index == len(groups) - 1:
        return "all decode (plain streams)"
    return f"level {index} (green contexts)"


def splits_dict(info: dict[str, Any]) -> dict[str, Any]:
    """The JSON of ``pdmux splits`` for one device (``info``:
    :attr:`pdmux_cli.workflows.splits.SplitsResult.info`)."""
    groups: list[Split] = info["groups"]
    thresholds = info.get("thresholds")
    return {
        "gpu": info["gpu"],
        "sm_count": info["sm_count"],
        "compute_capability": info["compute_capability"],
        "source": info["source"],
        "sm_group_num": info["sm_group_num"],
        "decode_bs_divisor": info["decode_bs_divisor"],
        "split_forward_token_budget": info["token_budget"],
        "tp": info.get("tp", 1),
        "gpus": info.get("tp", 1),
        "groups": [
            {
                "group": i,
                "kind": group_kind(i, groups).split(" (")[0],
                "prefill_sms": g.prefill_sms,
                "decode_sms": g.decode_sms,
                "decode_bs_threshold": thresholds[i - 1] if thresholds and 0 < i < len(groups) - 1 else None,
            }
            for i, g in enumerate(groups)
        ],
        "decode_bs_choice": [
            {
                "decode_bs": bs,
                "group": k,
                "prefill_sms": groups[k].prefill_sms,
                "decode_sms": groups[k].decode_sms,
                "older_sglang_crashes": crash,
            }
            for bs, k, crash in info["choices"]
        ],
        "decode_only_group": len(groups) - 1,
        "prefill_only_group": 0,
        "model": info["model"],
        "num_layers": info["num_layers"],
        "prefill_layers_per_round": [
            {"prompt_tokens": t, "layers_per_round": n, "rounds": r} for t, n, r in info["layers"]
        ],
        "notes": render_all(info["notes"]),
    }


def link_dict(link: Any) -> dict[str, Any] | None:
    """A :class:`pdmux_cli.multigpu.disaggregation.KvLink` as JSON (``None`` stays ``None``)."""
    if link is None:
        return None
    return {
        "kind": link.kind,
        "bytes_per_s": link.bytes_per_s,
        "latency_s": link.latency_s,
        "source": link.source,
    }


def estimate_dict(est: Estimate) -> dict[str, Any]:
    """The JSON of ``pdmux estimate``."""
    sc = est.scenario
    return {
        "gpu": est.gpu,
        "model": est.model,
        "scenario": {
            "decode_bs": sc.decode_bs,
            "context_tokens": sc.context_tokens,
            "prompt_tokens": sc.prompt_tokens,
            "chunk_sizes_tokens": [r.chunk_tokens for r in est.rows if r.policy == "chunked"],
            "mixed_chunk_sizes_tokens": list(sc.mixed_chunk_sizes),
            "bandwidth_efficiency": sc.cost.bandwidth_efficiency,
            "mfu": sc.cost.mfu,
            "weight_bytes_per_param": sc.weight_bytes_per_param,
            "kv_bytes_per_element": sc.kv_bytes_per_element,
            "tp": sc.tp,
        },
        "tp": est.tp,
        "gpus": est.tp,
        "fits": est.memory.fits,
        "memory": {
            "per_gpu": True,
            "weight_bytes": est.memory.weight_bytes,
            "kv_cache_bytes": est.memory.kv_cache_bytes,
            "needed_bytes": est.memory.needed_bytes,
            "gpu_memory_bytes": est.memory.gpu_memory_bytes,
            "kv_tokens_needed": est.memory.kv_tokens_needed,
            "sglang_pdmux_kv_pool_tokens": est.memory.pdmux_pool_tokens,
        },
        "level": {
            "group": est.group_index,
            "prefill_sms": est.level.prefill_sms,
            "decode_sms": est.level.decode_sms,
            "source": est.level_source,
        },
        "groups": [{"prefill_sms": g.prefill_sms, "decode_sms": g.decode_sms} for g in est.groups],
        "prefill_layers_per_round": est.layers_per_round,
        "prefill_rounds": est.prefill_rounds,
        "flops_dtype": est.flops_dtype,
        "cost_model": est.cost_model,
        "throughput_source": est.throughput_source,
        "cpu_step_ms": est.cpu_step_ms,
        "per_request_overhead_ms": est.per_request_ms,
        "request_delay_ms": est.request_delay_ms,
        # how sure the rows' ttft_interval_ms are, as simulate's "uncertainty" says it (issue 29)
        "ttft_uncertainty": _ttft_uncertainty(est.ttft_method),
        "rows": [
            {
                "policy": r.policy,
                "label": r.label,
                "itl_ms": r.itl_ms,
                "decode_steps_during_prefill": r.steps,
                "prefill_ms": r.prefill_ms,
                "ttft_ms": est.ttft[k][0] if k < len(est.ttft) and math.isfinite(est.ttft[k][0]) else None,
                "ttft_interval_ms": (list(est.ttft[k][1]) if k < len(est.ttft) and est.ttft[k][1] is not None
                                     else None),
                "tokens_during_prefill": r.tokens_during_prefill,
                "chunk_tokens": r.chunk_tokens,
                "prefill_sms": r.prefill_sms,
                "decode_sms": r.decode_sms,
                "s_sat_sms": r.s_sat,
                "decode_alone_ms": r.decode_alone_ms,
                "prefill_alone_ms": r.prefill_alone_ms,
                "decode_corun_ms": r.decode_corun_ms,
                "prefill_corun_ms": r.prefill_corun_ms,
                "gpus": r.gpus,
                "layout": layout_text(r.layout),
                "transfer_ms": r.transfer_ms,
                "link": link_dict(est.kv_link) if r.policy == "disagg" else None,
                "runs": est.pdmux_runs if r.policy == "pdmux" else True,
            }
            for k, r in enumerate(est.rows)
        ],
        "sglang_support": est.pdmux_support.as_dict() if est.pdmux_support is not None else None,
        "speculation": ({**est.speculation, "pdmux_refusal": est.speculation_refusal}
                        if est.speculation is not None else None),
        "levels": [
            {
                "group": lv.group,
                "prefill_sms": lv.prefill_sms,
                "decode_sms": lv.decode_sms,
                "chosen": lv.chosen,
                "prefill_ms": lv.prefill_ms,
                "itl_ms": list(lv.itl_ms),
                "tokens_during_prefill": list(lv.tokens_during_prefill),
                "decode_alone_ms": lv.decode_alone_ms,
                "prefill_alone_ms": lv.prefill_alone_ms,
                "decode_corun_ms": lv.decode_corun_ms,
                "prefill_corun_ms": lv.prefill_ms,
            }
            for lv in est.levels
        ],
        "disagg": _disagg_dict(est),
        "notes": render_all(est.notes),
    }


def _ttft_uncertainty(method: str) -> dict[str, Any] | None:
    """How sure the rows' ``ttft_interval_ms`` are (``method``: :attr:`Estimate.ttft_method`; ``None``
    without intervals, where the uncertainty module was never needed)."""
    if not method:
        return None
    from ..costmodel.uncertainty import COVERAGE

    return {"coverage": COVERAGE, "method": method}


def _disagg_dict(est: Estimate) -> dict[str, Any] | None:
    """``--disagg``'s summary: instances, GPUs, the link, bytes moved per GPU and the TTFT's parts."""
    row = next((r for r in est.rows if r.policy == "disagg"), None)
    if row is None or est.scenario.disagg is None:
        return None
    x, y = est.scenario.disagg
    return {
        "prefill_instances": x,
        "decode_instances": y,
        "tp": est.scenario.disagg_tp or est.tp,
        "gpus": row.gpus,
        "layout": layout_text(row.layout),
        "link": link_dict(est.kv_link),
        "kv_transfer_bytes_per_gpu": est.kv_transfer_bytes,
        "prefill_ms": row.prefill_alone_ms,
        "transfer_ms": row.transfer_ms,
        "ttft_ms": row.prefill_ms,
        "itl_ms": row.itl_ms,
    }
