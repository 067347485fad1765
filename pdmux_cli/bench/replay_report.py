"""Rich tables for ``pdmux bench --model``: the replay plan (``--dry-run``) and the measured times next to the
estimate's. rich is imported lazily (through :func:`report._table`)."""

from __future__ import annotations

from typing import Any

from .replay_plan import Predicted, Predictions, ReplayPlan, replay_params_total
from .replay_results import ReplayResults, level_measured, whole_measured
from .report import _table


def _bytes(value: int) -> str:
    return f"{value / 1e9:,.2f} GB" if value >= 1e8 else f"{value / 1e6:,.1f} MB"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def _pair(pred: float | None, cal: float | None) -> str:
    text = f"est {_ms(pred)}"
    return text + (f" | cal {_ms(cal)}" if cal is not None else "")


def _group(group: int | None, chosen: bool) -> str:
    """A level's stream group (``-`` for a split SGLang does not build), ``*`` on SGLang's choice."""
    return ("-" if group is None else str(group)) + (" *" if chosen else "")


def replay_plan_tables(plan: ReplayPlan, predicted: Predictions | None = None) -> list[Any]:
    """Tables of ``pdmux bench --model NAME --dry-run``: what is built and run, and the estimate per level."""
    m, mem, dev = plan.model, plan.memory, plan.device
    head = _table(f"pdmux bench --model plan: {m.name} on {dev.name} ({dev.sm_count} SMs)",
                  [("item", "left"), ("value", "left")])
    built = ", ".join(f"{n} x {k.label}" for k, n in mem.built)
    rows = [
        ("model", f"{m.name}: {m.num_layers} layers, {replay_params_total(m) / 1e9:.2f} B parameters, hidden "
                  f"{m.hidden_size}, {m.num_attention_heads} heads / {m.num_kv_heads} KV heads x {m.head_dim}"
         + (f", {m.num_experts} experts top-{m.experts_per_token}" if m.is_moe else "")),
        ("layers built",
         f"{mem.built_layers} of {m.num_layers} ({built}); every step runs all {m.num_layers}"),
        ("scenario",
         (f"{plan.decode_bs} decode requests at {plan.context_tokens} tokens; a {plan.prompt_tokens}-token "
                     f"prompt in {len(plan.slices)} round(s) of {plan.layers_per_round} layer(s)")),
        ("memory",
         (f"weights {_bytes(mem.layer_weight_bytes)}, decode KV {_bytes(mem.decode_kv_bytes)}, prefill KV "
                   f"{_bytes(mem.prefill_kv_bytes)}, lm_head {_bytes(mem.head_bytes)}, activations "
                   f"{_bytes(mem.activation_bytes)}, headroom {_bytes(mem.headroom_bytes)}")),
        ("memory needed / free", f"{_bytes(mem.needed_bytes)} / {_bytes(mem.available_bytes)}"),
        ("levels",
         ", ".join(f"{s.prefill_sms}/{s.decode_sms}" + (" (SGLang's choice)" if s == plan.chosen_level
                                                        else "")
                             for s in plan.levels) + f"  ({plan.level_source})"),
        ("runs",
         (f"device {plan.device_kind}; median of {plan.repeats}, {plan.warmup} warm-up; decode as a CUDA "
                 f"graph: {'yes' if plan.cuda_graph else 'no'}")),
    ]
    for item, value in rows:
        head.add_row(item, value)
    tables = [head]
    if predicted is not None:
        pred = _table(f"pdmux estimate for the same scenario ({predicted.source})",
                      [("group", "left"), ("prefill/decode SMs", "right"), ("decode step ms", "right"),
                       ("prefill ms alone", "right"), ("ITL ms both", "right"), ("prefill ms both", "right")])
        w = predicted.whole
        pred.add_row("whole GPU", f"{dev.sm_count}", _ms(w.decode_alone_ms), _ms(w.prefill_alone_ms), "-",
                     "-")
        for s in plan.levels:
            p = predicted.levels.get((s.prefill_sms, s.decode_sms)) or Predicted()
            pred.add_row(_group(plan.group_of(s), s == plan.chosen_level), f"{s.prefill_sms}/{s.decode_sms}",
                         _ms(p.decode_alone_ms), _ms(p.prefill_alone_ms), _ms(p.itl_ms),
                         _ms(p.prefill_corun_ms))
        tables.append(pred)
    return tables


def replay_tables(res: ReplayResults) -> list[Any]:
    """The measured times per level, each cell the measurement over the estimate's (``est``) and, with a
    calibration, the calibrated estimate's (``cal``)."""
    plan = res.plan
    cal_label = f"; cal = with {res.calibration_label}" if res.calibration_label else ""
    title = (f"{plan.get('model')} on {res.run.device_name} ({res.run.gpu_name} levels): "
             f"{plan.get('decode_bs')} decode requests at {plan.get('context_tokens')} tokens, a "
             f"{plan.get('prompt_tokens')}-token prompt in {plan.get('prefill_rounds')} round(s) of "
             f"{plan.get('layers_per_round')} layer(s); ms measured, est = pdmux estimate{cal_label}")
    table = _table(title, [("group", "left"), ("prefill/decode SMs", "right"), ("decode step", "right"),
                           ("prefill alone", "right"), ("ITL both", "right"), ("prefill both", "right"),
                           ("tokens during prefill", "right")])

    def cells(measured: dict[str, float], pred: Predicted | None, cal: Predicted | None,
              keys: list[str]) -> list[str]:
        out = []
        for key in keys:
            if key not in measured:
                out.append("-")
                continue
            p = getattr(pred, key) if pred is not None else None
            c = getattr(cal, key) if cal is not None else None
            out.append(f"{_ms(measured[key])}\n{_pair(p, c)}")
        return out

    keys = ["decode_alone_ms", "prefill_alone_ms", "itl_ms", "prefill_corun_ms"]
    if res.whole is not None:
        pred = res.predicted.whole if res.predicted else None
        cal = res.predicted_calibrated.whole if res.predicted_calibrated else None
        table.add_row("whole device", f"{res.run.sm_count}" if res.run.device_kind == "cuda" else "cpu",
                      *cells(whole_measured(res.whole), pred, cal, keys), "-")
    for lv in res.levels:
        key = (lv.prefill_sms, lv.decode_sms)
        pred = res.predicted.levels.get(key) if res.predicted else None
        cal = res.predicted_calibrated.levels.get(key) if res.predicted_calibrated else None
        sms = f"{lv.prefill_sms}/{lv.decode_sms}"
        if lv.granted_prefill_sms is not None and (lv.granted_prefill_sms, lv.granted_decode_sms) != key:
            sms += f"\n(granted {lv.granted_prefill_sms}/{lv.granted_decode_sms})"
        table.add_row(_group(lv.group, lv.chosen), sms, *cells(level_measured(lv), pred, cal, keys),
                      f"{lv.corun.tokens_during_prefill}")
    tables = [table]
    overhead = _table("host time per pdmux round beyond the decode step (ms): the replay loop's launch and "
                      "wait",
                      [("where", "left"), ("decode alone", "right"), ("with the prefill", "right")])
    if res.whole is not None:
        overhead.add_row("whole device", _ms(res.whole.decode.overhead_ms), "-")
    for lv in res.levels:
        overhead.add_row(f"{lv.prefill_sms}/{lv.decode_sms}", _ms(lv.decode.overhead_ms),
                         _ms(lv.corun.overhead_ms))
    tables.append(overhead)
    return tables
