"""``pdmux bench --model NAME|config.json``: the model replay, called from :func:`pdmux_cli.cli.bench.bench`.

Parses nothing itself (``bench`` holds the options); checks every input before any device work, runs
:mod:`pdmux_cli.bench.model_replay` under a progress bar, puts the estimate next to it and writes
``results.json`` (checkpointed after each step) and, when the replay measured one, ``calibration.yaml``
(the fixed time per decode step, :func:`pdmux_cli.bench.replay_results.calibration_from_replay`).
torch is imported only on the paths that run the replay.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..messages import render_all
from ..util.errors import Finding, InputError
from .bench_shared import (CALIBRATION_FILE, RESULTS_FILE, check_out_dir, exit_for, make_out_dir,
                           print_tables_and_notes, run_with_progress)
from .common import (
    gpu_file,
    model_file,
    print_json,
    write_atomic,
)


def _predictions_json(preds: Any, plan: Any) -> dict[str, Any] | None:
    from ..bench.replay_plan import predicted_dict

    if preds is None:
        return None
    return {
        "source": preds.source,
        "whole": predicted_dict(preds.whole),
        "levels": [{"prefill_sms": s.prefill_sms, "decode_sms": s.decode_sms,
                    **(predicted_dict(preds.levels.get((s.prefill_sms, s.decode_sms))) or {})}
                    for s in plan.levels],
    }


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
        notes.append(f"no GPU profile matches {plan.device.name}: no estimate to compare with (pass --gpu)")
        return None
    try:
        preds = predict(plan, gpu, calibration)
    except InputError as exc:
        notes.append(f"no {'calibrated ' if calibration is not None else ''}estimate: {exc}")
        return None
    notes.extend(n for n in preds.notes if n not in notes)
    return preds


def run_model_replay(
    *,
    model: str,
    gpu: str | None,
    dry_run: bool,
    cpu: bool,
    decode_bs: int | None,
    context: int | None,
    prompt_tokens: int | None,
    levels: str | None,
    repeats: int | None,
    quick: bool,
    device_index: int,
    sm_group_num: int,
    decode_bs_divisor: int | None,
    token_budget: int | None,
    calibration: Path | None,
    out: Path | None,
    as_json: bool,
) -> None:
    """``pdmux bench --model``: see the module docstring. Raises :class:`InputError` for bad input (unknown
    model, MLA, sizes, a model that does not fit, a calibration of another GPU, an output over an input) and
    :class:`DeviceError` for a missing GPU, driver or torch; exits 1 (130 on Ctrl-C) when a run stops.
    Sizes and SGLang knobs left ``None`` take the estimate's defaults (32 x 2048, 8192 tokens) and
    SGLang's."""
    from ..bench.replay_plan import check_replayable, check_scenario
    from ..catalog.model import load_model

    options = _options(decode_bs, context, prompt_tokens, levels, sm_group_num, decode_bs_divisor,
                       token_budget, repeats, quick)
    mdl = load_model(model)
    check_replayable(mdl)
    check_scenario(mdl, options["decode_bs"], options["context_tokens"], options["prompt_tokens"])
    given = None
    if calibration is not None:
        from ..costmodel.calibration_file import load_calibration

        given = load_calibration(calibration)
    if out is not None:
        from ..util.atomic import refuse_overwriting_inputs

        for name in (RESULTS_FILE, CALIBRATION_FILE):
            refuse_overwriting_inputs(out / name, calibration, model_file(model), gpu_file(gpu))
    check_out_dir(out)  # the run a dry run plans would refuse it: so does the plan
    if dry_run:
        _dry_run(mdl, gpu, given, options, out, as_json)
        return
    plan, rdev, info, profile = _prepare(mdl, gpu, cpu, levels, device_index, options)
    if given is not None and profile is not None:
        given.check_device(profile)
    out_dir = make_out_dir(out)
    res, own = _replay(plan, rdev, info, profile, given, calibration, out_dir)
    written: list[Path] = []
    if out_dir is not None:
        from ..bench.replay_results import results_dict

        written.append(write_atomic(out_dir / RESULTS_FILE, json.dumps(results_dict(res), indent=2) + "\n"))
        if own is not None:
            from ..costmodel.calibration_file import dump_calibration

            written.append(write_atomic(out_dir / CALIBRATION_FILE, dump_calibration(own)))
    _show(res, own, written, as_json)
    exit_for(res, out_dir)


def _options(decode_bs: int | None, context: int | None, prompt_tokens: int | None, levels: str | None,
             sm_group_num: int, decode_bs_divisor: int | None, token_budget: int | None, repeats: int | None,
             quick: bool) -> dict[str, Any]:
    """``make_replay_plan``'s keywords, the sizes and SGLang knobs left ``None`` at the estimate's defaults
    and SGLang's."""
    from ..planning.estimate import Scenario
    from ..sglang import split_levels

    defaults = Scenario()
    return {
        "decode_bs": defaults.decode_bs if decode_bs is None else decode_bs,
        "context_tokens": defaults.context_tokens if context is None else context,
        "prompt_tokens": defaults.prompt_tokens if prompt_tokens is None else prompt_tokens,
        "levels": levels, "sm_group_num": sm_group_num,
        "decode_bs_divisor": (split_levels.DEFAULT_DECODE_BS_DIVISOR if decode_bs_divisor is None
                              else decode_bs_divisor),
        "token_budget": (split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET if token_budget is None
                         else token_budget),
        "repeats": repeats, "quick": quick,
    }


def _dry_run(mdl: Any, gpu: str | None, given: Any, options: dict[str, Any], out: Path | None,
             as_json: bool) -> None:
    """``--dry-run --model``: the plan on ``gpu``'s profile (h100) with the estimate, as tables or JSON."""
    from ..bench.plan import PlanDevice
    from ..bench.replay_plan import make_replay_plan, replay_plan_dict
    from ..catalog.hardware import find_gpu_or_file

    profile = find_gpu_or_file(gpu or "h100")
    plan = make_replay_plan(mdl, PlanDevice.from_gpu(profile), **options)
    notes = list(plan.notes)
    if given is not None:
        given.check_device(profile)
    preds = _predict(plan, profile, None, notes)
    preds_cal = _predict(plan, profile, given, notes) if given is not None else None
    if as_json:
        print_json({"dry_run": True, **replay_plan_dict(plan), "notes": render_all(notes),
                    "predicted": _predictions_json(preds, plan),
                    "predicted_calibrated": _predictions_json(preds_cal, plan)})
        return
    from .bench_tables import replay_plan_tables

    con = print_tables_and_notes(replay_plan_tables(plan, preds), notes)
    con.print("dry run: nothing was measured" + (f"; nothing written to {out}" if out else ""))


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
    if gpu is not None:
        find_gpu_or_file(gpu)  # a bad --gpu is a usage error, before the driver is probed
    if levels is not None:
        from ..bench.plan import parse_level_items

        parse_level_items(levels)
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
            out_dir: Path | None) -> tuple[Any, Any]:
    """Run the replay (results.json checkpointed in ``out_dir``) and put the estimate next to it, with and
    without a calibration (``given`` and/or the one this replay measured). Returns ``(results, the
    replay's own calibration or None)``."""
    from ..bench.replay_plan import replay_plan_dict
    from ..bench.replay_results import calibration_from_replay

    pre_notes: list[Finding | str] = []
    predicted = _predict(plan, profile, None, pre_notes)
    plan_json = replay_plan_dict(plan)
    plan_json["dry_run"] = False
    res = _run_with_progress(plan, rdev, plan_json, info, out_dir)
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


def _show(res: Any, own: Any, written: list[Path], as_json: bool) -> None:
    """The replay's results as JSON, or its tables, notes, measured fixed time and the files written."""
    from ..bench.replay_results import results_dict

    if as_json:
        print_json(results_dict(res))
        return
    from .bench_tables import replay_tables

    con = print_tables_and_notes(replay_tables(res), res.notes)
    if own is not None and own.whole_gpu is not None:
        con.print(f"measured fixed time per decode step: {own.whole_gpu.decode_fixed_s * 1e3:.3f} ms "
                  f"(the estimate was {own.whole_gpu.uncalibrated_median_error:.0%} off on the whole "
                  "GPU's step)")
    for path in written:
        con.print(f"wrote {path}")


def _run_with_progress(plan: Any, rdev: Any, plan_json: dict, info: Any, out_dir: Path | None) -> Any:
    """``model_replay.run_replay`` under :func:`~pdmux_cli.cli.bench_shared.run_with_progress` (results.json
    checkpointed each step)."""
    from ..bench.model_replay import run_replay
    from ..bench.replay_results import results_dict

    return run_with_progress(
        "pdmux bench --model", plan.steps,
        lambda on_step,
        on_result: run_replay(plan, rdev, plan_json, info, on_step=on_step, on_result=on_result),
        results_dict, out_dir)
