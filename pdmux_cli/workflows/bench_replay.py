"""``pdmux bench --model NAME|config.json`` as a use case: the model replay, called from
:func:`pdmux_cli.workflows.bench.bench`.

Checks every input before any device work, runs :mod:`pdmux_cli.bench.model_replay` (a progress bar per
step, ``results.json`` checkpointed after each), puts the estimate next to it and writes ``results.json`` and,
when the replay measured one, ``calibration.yaml`` (the fixed time per decode step,
:func:`pdmux_cli.bench.replay_results.calibration_from_replay`). torch is imported only on the paths that run
the replay.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..util.errors import Finding, InputError
from .bench_results import (CALIBRATION_FILE, RESULTS_FILE, BenchDryRun, BenchRun, check_before_device,
                            check_out_dir, make_out_dir, run_checkpointed)
from .files import gpu_file, model_file
from .progress import ProgressFactory

if TYPE_CHECKING:
    from .bench import BenchRequest


def _combined(given: Any, given_path: Path | None, own: Any) -> tuple[Any, str | None]:
    """The calibration of the calibrated column and its label: the ``--calibration`` file, with this replay's
    whole-GPU term added when the file has none; or this replay's alone."""
    if given is not None:
        if given.whole_gpu is None and own is not None:
            joined = dataclasses.replace(given, whole_gpu=own.whole_gpu,
                                         terms_from=given.terms_from + own.terms_from)
            return joined, f"{given_path} + this replay's fixed time per decode step"
        return given, str(given_path)
    if own is not None:
        return own, "this replay's fixed time per decode step"
    return None, None


def _predict(plan: Any, gpu: Any, calibration: Any, notes: list[Finding | str]) -> Any:
    """The estimate for the plan, or ``None`` with a note when it cannot be made."""
    from ..bench.replay_plan import predict

    if gpu is None:
        notes.append(Finding("bench.replay.no_profile", {"device": plan.device.name}, "gpu"))
        return None
    try:
        preds = predict(plan, gpu, calibration)
    except InputError as exc:
        notes.append(Finding("bench.replay.no_estimate", {"calibrated": calibration is not None,
                                                         "error": str(exc)}, exc.param))
        return None
    notes.extend(n for n in preds.notes if n not in notes)
    return preds


def model_replay(r: BenchRequest, progress: ProgressFactory | None = None) -> BenchDryRun | BenchRun:
    """``pdmux bench --model`` (module docstring): its plan with ``r.dry_run``, else the replay's results.
    Raises :class:`InputError` for bad input (unknown model, MLA, sizes, a model that does not fit, a
    calibration of another GPU, an output over an input) and :class:`DeviceError` for a missing GPU, driver
    or torch. Sizes and SGLang knobs left ``None`` take the estimate's defaults (32 x 2048, 8192 tokens) and
    SGLang's."""
    from ..bench.replay_plan import check_replayable, check_scenario
    from ..catalog.model import load_model

    assert r.model is not None
    options = _options(r)
    mdl = load_model(r.model)
    check_replayable(mdl)
    check_scenario(mdl, options["decode_bs"], options["context_tokens"], options["prompt_tokens"])
    given = None
    if r.calibration is not None:
        from ..costmodel.calibration_file import load_calibration

        given = load_calibration(r.calibration)
    if r.output is not None:
        from ..util.atomic import refuse_overwriting_inputs

        for name in (RESULTS_FILE, CALIBRATION_FILE):
            refuse_overwriting_inputs(r.output / name, r.calibration, model_file(r.model), gpu_file(r.gpu))
    check_out_dir(r.output)  # the run a dry run plans would refuse it: so does the plan
    if r.dry_run:
        return _dry_run(mdl, r.gpu, given, options, r.output)
    plan, rdev, info, profile = _prepare(mdl, r.gpu, r.cpu, r.levels, r.device, options)
    if given is not None and profile is not None:
        given.check_device(profile)
    out_dir = make_out_dir(r.output)
    res, own = _replay(plan, rdev, info, profile, given, r.calibration, out_dir, progress)
    written: list[Path] = []
    if out_dir is not None:
        from ..bench.replay_results import results_dict
        from ..util.atomic import write_text_atomic

        written.append(write_text_atomic(out_dir / RESULTS_FILE,
                                         json.dumps(results_dict(res), indent=2) + "\n"))
        if own is not None:
            from ..costmodel.calibration_file import dump_calibration

            written.append(write_text_atomic(out_dir / CALIBRATION_FILE, dump_calibration(own)))
    return BenchRun(res, written, out_dir, replay=True, calibration=own)


def _options(r: BenchRequest) -> dict[str, Any]:
    """``make_replay_plan``'s keywords, the sizes and SGLang knobs left ``None`` at the estimate's defaults
    and SGLang's."""
    from ..planning.estimate import Scenario
    from ..sglang import split_levels

    defaults = Scenario()
    return {
        "decode_bs": defaults.decode_bs if r.decode_bs is None else r.decode_bs,
        "context_tokens": defaults.context_tokens if r.context is None else r.context,
        "prompt_tokens": defaults.prompt_tokens if r.prompt_tokens is None else r.prompt_tokens,
        "levels": r.levels, "sm_group_num": r.sm_group_num,
        "decode_bs_divisor": (split_levels.DEFAULT_DECODE_BS_DIVISOR if r.decode_bs_divisor is None
                              else r.decode_bs_divisor),
        "token_budget": (split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET if r.token_budget is None
                         else r.token_budget),
        "repeats": r.repeats, "quick": r.quick,
    }


def _dry_run(mdl: Any, gpu: str | None, given: Any, options: dict[str, Any], out: Path | None
             ) -> BenchDryRun:
    """``--dry-run --model``: the plan on ``gpu``'s profile (h100) with the estimate."""
    from ..bench.plan import PlanDevice
    from ..bench.replay_plan import make_replay_plan
    from ..catalog.hardware import find_gpu_or_file

    profile = find_gpu_or_file(gpu or "h100")
    plan = make_replay_plan(mdl, PlanDevice.from_gpu(profile), **options)
    notes = list(plan.notes)
    if given is not None:
        given.check_device(profile)
    preds = _predict(plan, profile, None, notes)
    preds_cal = _predict(plan, profile, given, notes) if given is not None else None
    return BenchDryRun(plan, out, replay=True, notes=notes, predicted=preds, predicted_calibrated=preds_cal)


def _prepare(mdl: Any, gpu: str | None, cpu: bool, levels: str | None, device_index: int,
             options: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(plan, replay device, device info, GPU profile)`` for a run: on the CPU with ``gpu``'s profile
    (h100) for the levels and the estimate, else on CUDA device ``device_index`` (its profile, or ``None``
    when none matches). A bad ``--gpu`` or ``--levels`` fails before the driver is probed."""
    from ..bench.plan import PlanDevice
    from ..bench.replay_plan import make_replay_plan
    from ..catalog.hardware import find_gpu, find_gpu_or_file

    if cpu:
        from ..bench.model_replay import ReplayDevice, host_available_bytes, import_torch_cpu

        profile = find_gpu_or_file(gpu or "h100")  # the levels and the estimate are this GPU's
        plan = make_replay_plan(mdl, PlanDevice.from_gpu(profile), device_kind="cpu",
                                available_bytes=host_available_bytes(), **options)
        return plan, ReplayDevice(import_torch_cpu(), "cpu"), None, profile
    check_before_device(gpu, levels)
    from ..bench import runner
    from ..bench.model_replay import ReplayDevice

    info, torch, device = runner.prepare(device_index, gpu)
    rdev = ReplayDevice(torch, "cuda", device_index)
    plan = make_replay_plan(mdl, device, available_bytes=rdev.free_bytes(), granularity=info.granularity,
                            **options)
    profile = None
    if device.profile_key:
        profile = find_gpu_or_file(gpu) if gpu else find_gpu(device.profile_key)
    return plan, rdev, info, profile


def _replay(plan: Any, rdev: Any, info: Any, profile: Any, given: Any, given_path: Path | None,
            out_dir: Path | None, progress: ProgressFactory | None) -> tuple[Any, Any]:
    """Run the replay (results.json checkpointed in ``out_dir``) and put the estimate next to it, with and
    without a calibration (``given`` and/or the one this replay measured). Returns ``(results, the
    replay's own calibration or None)``."""
    from ..bench.model_replay import run_replay
    from ..bench.replay_plan import replay_plan_dict
    from ..bench.replay_results import calibration_from_replay, results_dict

    pre_notes: list[Finding | str] = []
    predicted = _predict(plan, profile, None, pre_notes)
    plan_json = replay_plan_dict(plan)
    plan_json["dry_run"] = False
    res = run_checkpointed(
        "pdmux bench --model", plan.steps,
        lambda on_step, on_result: run_replay(plan, rdev, plan_json, info, on_step=on_step,
                                              on_result=on_result),
        results_dict, out_dir, progress)
    res.predicted = predicted
    res.notes.extend(n for n in pre_notes if n not in res.notes)
    own, why = calibration_from_replay(res, plan, profile)
    res.calibration = own
    if why:
        res.notes.append(why)
    used, label = _combined(given, given_path, own)
    if used is not None:
        res.predicted_calibrated = _predict(plan, profile, used, res.notes)
        res.calibration_label = label if res.predicted_calibrated is not None else None
    return res, own
