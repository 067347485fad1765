"""The model replay's results as values: times per level, the estimate next to them, JSON and the calibration.

Pure (no torch): :mod:`.model_replay` fills these dataclasses, the CLI renders and writes them, the CPU tests
build them from synthetic numbers. Times in ms (``_ms`` in every name), SMs, tokens.

What the measured times are (:mod:`.model_replay` takes them):

- a decode **step** is GPU time between CUDA events around back-to-back steps on the stream (host time on
  the CPU); a decode **round** is the host time of one pdmux-loop round with decode alone: launch the step,
  wait for the decode stream (SGLang's loop runs with the overlap scheduler off). ``overhead_ms`` is their
  difference: the replay loop's host time per round that the GPU does not hide;
- **co-run**: SGLang's loop with a prefill in flight. ``itl`` is the host time of each round (a decode step
  launched, the next prefill slice submitted, the decode stream waited for) until the round that sees the
  prefill's last event done; ``decode_step`` the decode step's GPU time in those rounds; ``prefill`` the
  prefill's GPU time from its first slice to its last; ``tokens_during_prefill`` the rounds it took (one
  token per decode request each).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from ..costmodel.calibration_file import Calibration
from ..messages import render_all
from ..util.errors import Finding, InputError
from .replay_plan import Predicted, Predictions, ReplayPlan, predicted_dict
from .stats import median, percentile


@dataclass(frozen=True)
class TimeStats:
    """Times of several runs (ms): median, p10, p90, min, max and how many."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    runs: int

    @classmethod
    def from_ms(cls, values: list[float]) -> TimeStats:
        """Summarise ``values`` (ms). Raises :class:`InputError` for none, or a time < 0 (a broken timer)."""
        if not values:
            raise InputError("no timed runs to summarise")
        if min(values) < 0:
            raise InputError(f"a timed run took {min(values)} ms: the timer went backwards")
        return cls(median(values), percentile(values, 10), percentile(values, 90), min(values), max(values),
                   len(values))

    def to_dict(self) -> dict[str, float | int]:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms,
                "min_ms": self.min_ms, "max_ms": self.max_ms, "runs": self.runs}


@dataclass(frozen=True)
class DecodeTimes:
    """Decode alone on its SMs: ``step`` (device time per step), ``round`` (host time per loop round)."""

    step: TimeStats
    round: TimeStats

    @property
    def overhead_ms(self) -> float:
        """Host time per round the device does not hide (median round - median step), ms."""
        return self.round.median_ms - self.step.median_ms


@dataclass(frozen=True)
class CorunTimes:
    """SGLang's loop with the prefill in flight (module docstring). ``tokens_during_prefill``: the median
    rounds an episode took."""

    itl: TimeStats
    decode_step: TimeStats
    prefill: TimeStats
    tokens_during_prefill: int

    @property
    def overhead_ms(self) -> float:
        """Host time per co-run round beyond the decode step (median ITL - median step), ms."""
        return self.itl.median_ms - self.decode_step.median_ms


@dataclass(frozen=True)
class LevelReplay:
    """One level measured: its split as SGLang asks for it, as the driver granted it (``None`` on the CPU),
    its stream group, whether SGLang picks it for the decode batch, and the times."""

    prefill_sms: int
    decode_sms: int
    group: int | None
    chosen: bool
    granted_prefill_sms: int | None
    granted_decode_sms: int | None
    decode: DecodeTimes
    prefill: TimeStats
    corun: CorunTimes


@dataclass(frozen=True)
class WholeReplay:
    """The whole device, plain stream: a decode step (the estimate's "decode only") and the prefill of the
    prompt in SGLang's slices back to back (its "prefill first")."""

    decode: DecodeTimes
    prefill: TimeStats


@dataclass(frozen=True)
class ReplayRunInfo:
    """Identity of one replay: ``device_kind`` ``"cuda"`` or ``"cpu"``; ``device_name`` as reported;
    ``gpu_name``: the GPU the levels and predictions are for; versions; ``date`` (ISO, UTC);
    ``moe_kernel``: ``"grouped_mm"`` (``torch._grouped_mm``, one GEMM per layer for all experts),
    ``"per-expert"`` (one GEMM per expert, host-synchronised) or ``None`` for a dense model; ``gqa``:
    ``"native"`` (``enable_gqa``) or ``"repeated"`` (K and V repeated per query head, older torch)."""

    device_kind: str
    device_name: str
    gpu_name: str
    sm_count: int
    compute_capability: tuple[int, int]
    device_index: int | None
    profile_key: str | None
    torch_version: str
    cuda_version: str | None
    driver_cuda_version: str | None
    date: str
    started_at: str
    moe_kernel: str | None = None
    gqa: str = "native"


@dataclass
class ReplayResults:
    """A replay, complete or not. ``plan``: :func:`replay_plan.replay_plan_dict`. ``predicted`` /
    ``predicted_calibrated``: the estimate without and with a calibration (``calibration_label`` says
    which); ``calibration``: the whole-GPU terms this replay measured (:func:`calibration_from_replay`),
    when it gave some. ``complete``, ``interrupted``, ``error``, ``step_errors``: as ``pdmux bench``."""

    run: ReplayRunInfo
    plan: dict[str, Any]
    whole: WholeReplay | None = None
    levels: list[LevelReplay] = field(default_factory=list)
    predicted: Predictions | None = None
    predicted_calibrated: Predictions | None = None
    calibration_label: str | None = None
    calibration: Calibration | None = None
    complete: bool = False
    interrupted: bool = False
    error: str | None = None
    step_errors: list[str] = field(default_factory=list)
    notes: list[Finding | str] = field(default_factory=list)
    cuda_graph: bool = False


def now_utc() -> tuple[str, str]:
    """``(date, started_at)``: today's ISO date and the ISO time, UTC."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.date().isoformat(), now.isoformat(timespec="seconds")


def _error_percent(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured <= 0:
        return None
    return (predicted - measured) / measured * 100


def _compare(measured: dict[str, float | None], predicted: Predicted | None) -> dict[str, float | None]:
    """``(predicted - measured) / measured`` in percent for each measured time the prediction has."""
    p = predicted_dict(predicted) or {}
    return {key: _error_percent(p.get(key), value) for key, value in measured.items()}


def level_measured(lv: LevelReplay) -> dict[str, float]:
    """The level's measured medians under the prediction's names (ms)."""
    return {"decode_alone_ms": lv.decode.step.median_ms, "prefill_alone_ms": lv.prefill.median_ms,
            "decode_corun_ms": lv.corun.decode_step.median_ms, "prefill_corun_ms": lv.corun.prefill.median_ms,
            "itl_ms": lv.corun.itl.median_ms}


def whole_measured(w: WholeReplay) -> dict[str, float]:
    """The whole device's measured medians under the prediction's names (ms)."""
    return {"decode_alone_ms": w.decode.step.median_ms, "prefill_alone_ms": w.prefill.median_ms}


def _predictions_for(preds: Predictions | None, key: tuple[int, int] | None) -> Predicted | None:
    if preds is None:
        return None
    return preds.whole if key is None else preds.levels.get(key)


def results_dict(res: ReplayResults) -> dict[str, Any]:
    """JSON of a replay (``results.json`` and ``--json``); units in the key names."""
    r = res.run
    whole = None
    if res.whole is not None:
        w = res.whole
        measured = whole_measured(w)
        whole = {
            "decode_step": w.decode.step.to_dict(), "decode_round": w.decode.round.to_dict(),
            "round_overhead_ms": w.decode.overhead_ms, "prefill": w.prefill.to_dict(),
            "predicted": predicted_dict(_predictions_for(res.predicted, None)),
            "predicted_calibrated": predicted_dict(_predictions_for(res.predicted_calibrated, None)),
            "error_percent": _compare(measured, _predictions_for(res.predicted, None)),
            "error_percent_calibrated": _compare(measured, _predictions_for(res.predicted_calibrated, None)),
        }
    levels = []
    for i, lv in enumerate(res.levels, start=1):
        key = (lv.prefill_sms, lv.decode_sms)
        measured = level_measured(lv)
        levels.append({
            "level": i, "group": lv.group, "chosen": lv.chosen, "prefill_sms": lv.prefill_sms,
            "decode_sms": lv.decode_sms, "granted_prefill_sms": lv.granted_prefill_sms,
            "granted_decode_sms": lv.granted_decode_sms,
            "decode_alone": {"step": lv.decode.step.to_dict(), "round": lv.decode.round.to_dict(),
                             "round_overhead_ms": lv.decode.overhead_ms},
            "prefill_alone": lv.prefill.to_dict(),
            "corun": {"itl": lv.corun.itl.to_dict(), "decode_step": lv.corun.decode_step.to_dict(),
                      "prefill": lv.corun.prefill.to_dict(),
                      "tokens_during_prefill": lv.corun.tokens_during_prefill,
                      "round_overhead_ms": lv.corun.overhead_ms},
            "measured": measured,
            "predicted": predicted_dict(_predictions_for(res.predicted, key)),
            "predicted_calibrated": predicted_dict(_predictions_for(res.predicted_calibrated, key)),
            "error_percent": _compare(measured, _predictions_for(res.predicted, key)),
            "error_percent_calibrated": _compare(measured, _predictions_for(res.predicted_calibrated, key)),
        })
    cal = res.calibration
    return {
        "kind": "model-replay",
        "complete": res.complete,
        "interrupted": res.interrupted,
        "error": res.error,
        "step_errors": list(res.step_errors),
        "device_kind": r.device_kind,
        "device_name": r.device_name,
        "green_contexts": r.device_kind == "cuda",
        "gpu": r.gpu_name,
        "gpu_profile": r.profile_key,
        "sm_count": r.sm_count,
        "compute_capability": f"{r.compute_capability[0]}.{r.compute_capability[1]}",
        "device_index": r.device_index,
        "torch_version": r.torch_version,
        "cuda_version": r.cuda_version,
        "driver_cuda_version": r.driver_cuda_version,
        "date": r.date,
        "started_at": r.started_at,
        "model": res.plan.get("model"),
        "scenario": {k: res.plan.get(k) for k in ("decode_bs", "context_tokens", "prompt_tokens",
                                                  "split_forward_token_budget", "sm_group_num",
                                                  "decode_bs_divisor")},
        "cuda_graph": res.cuda_graph,
        "moe_kernel": r.moe_kernel,
        "gqa": r.gqa,
        "plan": res.plan,
        "whole_device": whole,
        "levels": levels,
        "prediction_source": res.predicted.source if res.predicted else None,
        "calibration_used": res.calibration_label,
        "calibration": None if cal is None or cal.whole_gpu is None else {
            "decode_fixed_ms": cal.whole_gpu.decode_fixed_s * 1e3,
            "uncalibrated_error": cal.whole_gpu.uncalibrated_median_error,
            "source": cal.whole_gpu.source,
        },
        "notes": render_all(res.notes),
    }


def calibration_from_replay(res: ReplayResults, plan: ReplayPlan, gpu: Any) -> tuple[
    Calibration | None, Finding | None]:
    """The whole-GPU terms this replay measured, as a calibration file, or ``(None, why not)`` (a finding,
    ``bench.replay.no_calibration.*``).

    The measured per-step overhead is the roofline model's ``decode_fixed_s`` (``calibration.WholeGpuTerms``:
    time per decode step its operators do not account for): fitted by
    :func:`costmodel.whole_gpu_fit.fit_whole_gpu` to the whole GPU's decode step (one point, CUDA graph), with
    the GPU's shipped efficiencies kept (the replay's attention and small ops are torch's, not SGLang's
    kernels: only the fixed time is taken from it). None on the CPU, for a model not stored in bf16 (the
    replay's bf16 weights would land in the fixed time), without a GPU profile, without a whole-GPU decode
    measurement, or when the step is too far from the model for the fit
    (:func:`costmodel.whole_gpu_fit.check_points`).
    """
    if res.run.device_kind != "cuda":
        return None, Finding("bench.replay.no_calibration.cpu")
    if res.whole is None:
        return None, Finding("bench.replay.no_calibration.not_measured")
    if gpu is None:
        return None, Finding("bench.replay.no_calibration.no_profile", {"gpu": res.run.gpu_name}, "gpu")
    model = plan.model
    if model.weight_dtype != "bf16":
        return None, Finding("bench.replay.no_calibration.weights", {"model": model.name,
                                                                     "dtype": model.weight_dtype})
    from ..costmodel import build_step_model
    from ..costmodel.whole_gpu_fit import CalPoint, check_points, fit_whole_gpu

    base = build_step_model(gpu, model, flops_dtype="bf16")
    where = f"pdmux bench --model {model.name} (whole GPU, {plan.decode_bs} x {plan.context_tokens})"
    point = CalPoint("decode", "pdmux replay", plan.decode_bs, float(plan.context_tokens),
                     res.whole.decode.step.median_ms / 1e3, where, res.cuda_graph)
    try:
        points, _ = check_points(base, gpu, [point])
        if not points:
            return None, Finding("bench.replay.no_calibration.too_far")
        fit = fit_whole_gpu(base, points, source=f"{where}, {res.run.date}, torch {res.run.torch_version}")
    except InputError as exc:
        return None, Finding("bench.replay.no_calibration.refused", {"reason": str(exc)})
    cal = Calibration(
        gpu_name=res.run.gpu_name, sm_count=res.run.sm_count, compute_capability=res.run.compute_capability,
        date=res.run.date, whole_gpu=fit.terms, gpu_key=getattr(gpu, "key", "") or "",
        terms_from=(("whole_gpu", f"pdmux bench --model {model.name} {res.run.date}"),),
        source=f"pdmux bench --model {model.name}: fixed time per decode step; shipped efficiencies",
    )
    return cal, None
