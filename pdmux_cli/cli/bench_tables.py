"""Rich tables for ``pdmux bench``: the dry-run plan and the summary of a run; and for ``pdmux bench
--model``: the replay plan (``--dry-run``) and the measured times next to the estimate's. rich is imported
lazily (:func:`_table`). Rendering only: the figures are the bench's (:mod:`pdmux_cli.bench`)."""

from __future__ import annotations

from typing import Any

from ..bench.plan import GATE_MS, BenchPlan, estimated_seconds
from ..bench.replay_plan import Predicted, Predictions, ReplayPlan, replay_params_total
from ..bench.replay_results import ReplayResults, level_measured, whole_measured
from ..bench.results import BenchResults


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:,.0f}"


def _tf(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e12:,.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _bytes(value: int | None) -> str:
    if value is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.2f} {unit} ({value:,} bytes)"
    return f"{value} bytes"


def _table(title: str, columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name, justify in columns:
        table.add_column(name, justify=justify)
    return table


def plan_tables(plan: BenchPlan) -> list[Any]:
    """Tables of ``pdmux bench --dry-run``: the device and sizes, the levels, the kernels."""
    dev = plan.device
    head = _table(f"pdmux bench plan: {dev.name} ({dev.sm_count} SMs, cc {dev.cc_text})",
                  [("item", "left"), ("value", "left")])
    est = estimated_seconds(plan)
    rows = [
        ("device", f"{dev.name} (device {plan.device_index}; numbers from {dev.source})"),
        ("L2 / memory", f"{_bytes(dev.l2_bytes)} / {_bytes(dev.memory_bytes)}"),
        ("split granularity",
         f"min {plan.granularity[0]} SMs, multiple of {plan.granularity[1]} ({plan.granularity_source})"),
        ("solo sweep (SMs)",
         " ".join(map(str, plan.sweep_sms)) + f"  ({len(plan.sweep_sms)} points; last = whole GPU)"),
        ("co-run levels", f"{len(plan.levels)} ({plan.level_source})"),
        ("GEMM (prefill probe)",
         (f"bf16 {plan.gemm.text} (MxNxK): {plan.gemm.flops / 1e9:,.1f} GFLOP per launch, "
                                  f"operands {_bytes(plan.gemm.operand_bytes)}")),
        ("read buffer (decode probe)", f"{_bytes(plan.buffer_bytes)}"
         + (f" = {plan.buffer_bytes / dev.l2_bytes:.1f}x L2" if dev.l2_bytes else "")),
        ("bytes per launch", (f"read {plan.read_bytes_per_launch:,} (counted once); "
                              f"copy {plan.copy_bytes_per_launch:,} (read + write)")),
        ("timing", (f"~1 s warm-up on the whole GPU; every measurement queued behind a launch gate; "
                    f"{plan.warmup} warm-up, median of {plan.repeats} runs (>= 2 ms each), p10/p90 and "
                    f"min/max; levels: {plan.repeats} rounds of {plan.window_ms:g} ms windows (GEMM alone, "
                    "read alone, both)")),
        ("device memory needed", _bytes(plan.memory_needed_bytes)),
        ("estimated time", f"~{est:.0f} s (rough, datasheet numbers)" if est
         else "unknown (no datasheet numbers)"),
    ]
    if plan.skinny is not None:
        rows.insert(7, ("skinny GEMM", (f"bf16 {plan.skinny.text}, {plan.skinny_copies} weight copies of "
                                        f"{_bytes(plan.skinny.weight_bytes)}")))
    for k, v in rows:
        head.add_row(k, v)

    levels = _table("co-run levels (GEMM on prefill SMs, read kernel on decode SMs, at the same time)",
                    [("level", "right"), ("prefill SMs", "right"), ("decode SMs", "right")])
    for i, (p, d) in enumerate(plan.levels, start=1):
        levels.add_row(str(i), str(p), str(d))

    ks = _table("kernels", [("kernel", "left"), ("role", "left"), ("per launch", "left")])
    from ..bench import kernels

    ks.add_row("pdmux_read_bw (NVRTC)", "bandwidth: solo sweep, decode side of the co-run",
               f"{plan.read_bytes_per_launch:,} bytes; {plan.read_grid_blocks:,} blocks x "
               f"{kernels.READ_BLOCK} threads, {kernels.READ_UNROLL} x 16-byte loads in flight per thread; "
               "first start / last end (%globaltimer)")
    ks.add_row("pdmux_mark (NVRTC)", "%globaltimer around each unit of GEMMs (did both run together?)",
               "1 thread")
    ks.add_row("pdmux_spin (NVRTC)", "launch gate: the GPU waits while a measurement is queued",
               f">= {GATE_MS:g} ms, 1 thread")
    ks.add_row("torch.matmul bf16", "GEMM: solo sweep, prefill side of the co-run",
               f"{plan.gemm.flops:,} FLOPs")
    ks.add_row("pdmux_smid (NVRTC)", "SM ids per partition (disjoint, <= granted)",
               f"{plan.smid_blocks} blocks x {kernels.SMID_BLOCK} threads")
    ks.add_row("copy_ (default stream)", "ceiling: device-to-device copy",
               f"{plan.copy_bytes_per_launch:,} bytes")
    ks.add_row("torch.matmul (default stream)", "ceiling: whole-GPU matmul", f"{plan.gemm.flops:,} FLOPs")
    if plan.skinny is not None:
        ks.add_row("torch.matmul bf16 skinny", "decode-like GEMM (solo sweep)",
                   f"{plan.skinny.flops:,} FLOPs, {plan.skinny.weight_bytes:,} weight bytes")
    return [head, levels, ks]


def summary_tables(res: BenchResults) -> list[Any]:
    """Tables of a run: ceilings and S_SAT, the solo sweep, the levels."""
    full_read, full_gemm = res.full_read_rate(), res.full_gemm_rate()
    r = res.run
    status = "complete" if res.complete else ("INTERRUPTED" if res.interrupted else "INCOMPLETE")
    head = _table(f"pdmux bench: {r.gpu_name} ({r.sm_count} SMs, cc "
                  f"{r.compute_capability[0]}.{r.compute_capability[1]}), {status}",
                  [("item", "left"), ("value", "left")])
    head.add_row("driver / torch CUDA",
                 f"CUDA {r.driver_cuda_version} / {r.cuda_version} (torch {r.torch_version})")
    head.add_row("launch set-up",
                 f"CUDA_DEVICE_MAX_CONNECTIONS={r.cuda_device_max_connections or 'unset (8)'}; "
                                  f"work queues {r.workqueue or '?'}")
    if r.max_sm_clock_mhz:
        whole = res.whole()
        now = whole.gemm.sm_clock_mhz if whole is not None else None
        head.add_row("SM clock (NVML)",
                     f"max {r.max_sm_clock_mhz:.0f} MHz" + (f"; whole-GPU GEMM ran at {now:.0f} MHz" if now
                                                            else ""))
    if res.copy:
        head.add_row("copy ceiling",
                     f"{_gb(res.copy.median)} GB/s (read + write; p10-p90 "
                     f"{_gb(res.copy.p10)}-{_gb(res.copy.p90)})")
    if res.matmul:
        head.add_row("matmul ceiling",
                     f"{_tf(res.matmul.median)} TFLOP/s (p10-p90 "
                     f"{_tf(res.matmul.p10)}-{_tf(res.matmul.p90)})")
    if full_read:
        ratio = f" = {full_read / res.copy.median:.0%} of copy" if res.copy else ""
        head.add_row("read kernel, whole GPU", f"{_gb(full_read)} GB/s{ratio}")
    s_sat = res.s_sat_sms()
    if s_sat is not None:
        head.add_row("S_SAT (95% of whole-GPU read rate)", f"{s_sat} SMs")
    if res.error:
        head.add_row("stopped by", res.error)
    for problem in res.step_errors:
        head.add_row("failed step", problem)

    sweep = _table("solo sweep (each kernel alone; median, p10-p90)",
                   [("SMs asked", "right"), ("granted", "right"), ("read GB/s", "right"),
                    ("p10-p90", "right"), ("of full", "right"), ("GEMM TFLOP/s", "right"),
                    ("p10-p90", "right"), ("of full", "right")])
    for p in res.sweep:
        sweep.add_row(
            f"{p.requested_sms}" + (" (whole)" if p.kind == "whole" else ""), str(p.granted_sms),
            _gb(p.read.median), f"{_gb(p.read.p10)}-{_gb(p.read.p90)}",
            _pct(p.read.median / full_read if full_read else None), _tf(p.gemm.median),
            f"{_tf(p.gemm.p10)}-{_tf(p.gemm.p90)}", _pct(p.gemm.median / full_gemm if full_gemm else None),
        )
    levels = _table("co-run at SGLang's levels (GEMM on prefill SMs + read kernel on decode SMs)",
                    [("level P/D", "left"), ("granted", "left"), ("SM ids P/D", "left"),
                     ("GEMM solo", "right"), ("co-run", "right"), ("loss", "right"),
                     ("read solo GB/s", "right"), ("co-run", "right"), ("loss", "right")])
    for lv in res.levels:
        ok = "ok" if lv.disjoint and lv.within_grant else ("OVERLAP" if not lv.disjoint else "TOO MANY")
        levels.add_row(
            f"{lv.prefill_sms}/{lv.decode_sms}", f"{lv.granted_prefill_sms}/{lv.granted_decode_sms}",
            f"{len(lv.smid_prefill)}/{len(lv.smid_decode)} {ok}", _tf(lv.solo_gemm.median),
            _tf(lv.corun_gemm.median), f"{(1 - lv.flops_factor) * 100:.1f}%", _gb(lv.solo_read.median),
            _gb(lv.corun_read.median), f"{(1 - lv.bandwidth_factor) * 100:.1f}%",
        )
    if not res.levels:
        return [head, sweep]
    concurrency = _table("did the two kernels really run at the same time? (%globaltimer stamps; factors: "
                         "co-run / solo)",
                         [("level P/D", "left"), ("both ran", "right"), ("lowest", "right"),
                          ("flop + bandwidth factor", "right"), ("verdict", "left")])
    for lv in res.levels:
        verdict = "SERIALISED (took turns)" if lv.serialised else "side by side"
        concurrency.add_row(f"{lv.prefill_sms}/{lv.decode_sms}", _pct(lv.overlap_share),
                            _pct(lv.overlap_share_min),
                            f"{lv.flops_factor:.2f} + {lv.bandwidth_factor:.2f} = "
                            f"{lv.flops_factor + lv.bandwidth_factor:.2f}", verdict)
    return [head, sweep, levels, concurrency]


def _size(value: int) -> str:
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
         (f"weights {_size(mem.layer_weight_bytes)}, decode KV {_size(mem.decode_kv_bytes)}, prefill KV "
                   f"{_size(mem.prefill_kv_bytes)}, lm_head {_size(mem.head_bytes)}, activations "
                   f"{_size(mem.activation_bytes)}, headroom {_size(mem.headroom_bytes)}")),
        ("memory needed / free", f"{_size(mem.needed_bytes)} / {_size(mem.available_bytes)}"),
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
