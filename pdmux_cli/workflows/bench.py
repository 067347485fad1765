"""``pdmux bench`` as a use case: :class:`BenchRequest` (its options declared once, issue 32) -> :func:`bench`
-> :class:`BenchDryRun` (the plan) or :class:`BenchRun` (the results and the files written).

The kernel bench here; ``--model``'s replay in :mod:`.bench_replay`. Every input is checked before any
device work (the kernel-only and replay-only options, ``--output DIR``, ``--gpu``, ``--levels``); the device
is probed only for a run, and torch, cuda-python and numpy are imported only then
(:mod:`pdmux_cli.bench.runner`, :mod:`pdmux_cli.bench.model_replay`). Module level: the bench's plan
only, for its bounds (:data:`pdmux_cli.bench.plan.MAX_REPEATS`); imported when the command is built
(:func:`pdmux_cli.cli.options.deferred`). The CLI renders the result and ends a stopped run
(:mod:`pdmux_cli.cli.bench`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.plan import MAX_REPEATS
from ..util.errors import Finding, InputError
from .bench_results import (CALIBRATION_FILE, PNG_FILE, RESULTS_FILE, BenchDryRun, BenchRun,
                            check_before_device, check_out_dir, make_out_dir, run_checkpointed)
from .fields import Checked, Range, declared_as, option
from .pdmux_knobs import PdmuxKnobs
from .progress import ProgressFactory


@dataclass(frozen=True, kw_only=True)
class BenchRequest(Checked):
    """``pdmux bench``'s options (snake_case, the CLI's defaults).

    The kernel bench: ``dry_run`` (the plan only: ``gpu``, or ``sms`` with ``cc``, for any device),
    ``repeats`` (``None``: 10, 3 with ``quick``), ``gemm_shape`` (MxNxK), ``buffer_bytes`` (``None``: max(1
    GiB, 4x L2)), ``levels``, ``device`` (the CUDA index), ``skinny_gemm``, ``sm_group_num`` (SGLang's, at
    least 3), ``output`` (the folder written; the CLI's ``--output``, ``--out`` its old name). The model
    replay, with ``model``: ``decode_bs``, ``context``, ``prompt_tokens`` (``None``: 32, 2048, 8192),
    ``token_budget``, ``decode_bs_divisor`` (``None``: SGLang's), ``calibration``, ``cpu`` (tests: no green
    contexts).
    """

    dry_run: bool = option(False, help=(
        "Print the plan (levels, sizes, kernels, repeats, bytes); needs no GPU or torch."))
    gpu: str | None = option(None, short="-g", help=(
        "GPU profile of the {flag.dry_run} plan (default h100). A real run detects the device; a {flag.gpu} "
        "given then must match its SM count."))
    sms: int | None = option(None, help="{flag.dry_run} for any device: its SM count (with {flag.cc}).")
    cc: str | None = option(None, help="{flag.dry_run} for any device: its compute capability, e.g. 9.0.")
    repeats: int | None = option(None, bounds=Range(1, MAX_REPEATS, template=(
        "{param_flag} must be from {low} to {high}, got {value}")), help=(
        "Timed runs per measurement; the median is reported. Default 10 (3 with {flag.quick})."))
    quick: bool = option(False, help=(
        "Few repeats and short co-run windows: a check (make gpu-check), not a calibration."))
    gemm_shape: str = option("8192x4096x12288", help="bf16 GEMM (prefill probe) as MxNxK.")
    buffer_bytes: str | None = option(None, help=(
        "Read buffer of the bandwidth kernel: bytes, or 1GiB / 512MiB. Default max(1 GiB, 4x L2); never "
        "below 4x L2."))
    levels: str | None = option(None, help=(
        "Co-run only these levels: numbers (1,3) or PREFILL/DECODE SMs (112/20,72/60)."))
    device: int = option(0, bounds=Range(0), help="CUDA device index.")
    skinny_gemm: str | None = option(None, help=(
        "Also time a decode-like GEMM 32 x HIDDENxINTERMEDIATE in the sweep, e.g. 4096x12288."))
    sm_group_num: int = option(8, bounds=Range(3, template=(
        "{param_flag} must be >= 3 (SGLang's rule), got {value}")), help=(
        "SGLang's sm_group_num: its levels are the co-run levels."))
    output: Path | None = option(None, short="-o", help=(
        "Write results.json, calibration.yaml and curves.png into this directory."))
    model: str | None = option(None, short="-m", help=(
        "Replay this model (profile name or config.json) instead of the kernels: its layers with random bf16 "
        "weights, SGLang's pdmux loop at each level, next to 'pdmux estimate'."))
    decode_bs: int | None = option(None, help="{flag.model}: requests in the decode batch (default 32).")
    context: int | None = option(None, help=(
        "{flag.model}: KV-cache tokens of each decode request (default 2048)."))
    prompt_tokens: int | None = option(None, help=(
        "{flag.model}: tokens of the prompt prefilled in layer slices (default 8192)."))
    token_budget: int | None = declared_as(PdmuxKnobs, "token_budget")
    decode_bs_divisor: int | None = declared_as(PdmuxKnobs, "decode_bs_divisor")
    calibration: Path | None = option(None, help=(
        "{flag.model}: a calibration.yaml for the calibrated estimate column (default: this replay's own "
        "fixed time per decode step)."))
    cpu: bool = option(False, hidden=True, help=(
        "{flag.model}: run the replay on the CPU (tiny models, tests): no green contexts."))


def bench(r: BenchRequest, progress: ProgressFactory | None = None) -> BenchDryRun | BenchRun:
    """``pdmux bench`` (module docstring): the kernel bench or, with ``r.model``, the model replay; its plan
    with ``r.dry_run``, else a run on the device (``progress``: a bar per step). Raises :class:`InputError`
    for bad input (before any device work) and :class:`~pdmux_cli.util.errors.DeviceError` for a missing
    GPU, driver or torch."""
    gemm, buffer, skinny = _kernel_sizes(r.gemm_shape, r.buffer_bytes, r.skinny_gemm)
    if r.model is not None:
        _refuse_kernel_options(sms=r.sms, cc=r.cc, buffer_bytes=r.buffer_bytes, skinny_gemm=r.skinny_gemm,
                               gemm_shape=r.gemm_shape, gemm=gemm)
        from .bench_replay import model_replay

        return model_replay(r, progress)
    _refuse_replay_options({"decode_bs": r.decode_bs, "context": r.context, "prompt_tokens": r.prompt_tokens,
                            "token_budget": r.token_budget, "decode_bs_divisor": r.decode_bs_divisor,
                            "calibration": r.calibration, "cpu": r.cpu or None})
    kernel: dict[str, Any] = {
        "gemm": gemm, "buffer_bytes": buffer, "repeats": r.repeats, "quick": r.quick, "levels": r.levels,
        "device_index": r.device, "sm_group_num": r.sm_group_num, "skinny": skinny,
    }
    if r.dry_run:
        from ..bench import plan as bplan

        check_out_dir(r.output)  # the run it plans would refuse it: so does the plan
        return BenchDryRun(bplan.make_plan(_dry_run_device(r.gpu, r.sms, r.cc), **kernel), r.output)
    return _run_kernel_bench(r, kernel, progress)


def _kernel_sizes(gemm_shape: str, buffer_bytes: str | None, skinny_gemm: str | None
                  ) -> tuple[Any, int | None, Any]:
    """The kernel bench's GEMM, read buffer (bytes, ``None``: the default) and skinny GEMM (``None``: none)
    from their options; :class:`InputError` for those (``--repeats``, ``--device`` and ``--sm-group-num``
    out of range: the request's, :class:`BenchRequest`)."""
    from ..bench import plan as bplan

    gemm = bplan.parse_gemm_shape(gemm_shape)
    buffer = bplan.parse_bytes(buffer_bytes) if buffer_bytes is not None else None
    skinny = bplan.parse_skinny(skinny_gemm) if skinny_gemm is not None else None
    return gemm, buffer, skinny


def _refuse_kernel_options(*, sms: int | None, cc: str | None, buffer_bytes: str | None,
                           skinny_gemm: str | None, gemm_shape: str, gemm: Any) -> None:
    """:class:`InputError` naming the first kernel-bench option given with ``--model`` (``--gemm-shape``
    only when it is not the default shape)."""
    from ..bench import plan as bplan

    kernel_only = {"sms": sms, "cc": cc, "buffer_bytes": buffer_bytes, "skinny_gemm": skinny_gemm,
                   "gemm_shape": None if gemm == bplan.GemmShape(*bplan.DEFAULT_GEMM_SHAPE) else gemm_shape}
    given = [name for name, value in kernel_only.items() if value is not None]
    if given:
        raise InputError("{param_flag} is an option of the kernel bench, not of {flag.model} (the model "
                         "replay)", param=given[0], values={})


def _refuse_replay_options(replay_only: dict[str, Any]) -> None:
    """:class:`InputError` naming the first model-replay option (parameter -> value, ``None``: not given)
    given without ``model``."""
    given = [name for name, value in replay_only.items() if value is not None]
    if given:
        raise InputError("{param_flag} goes with {flag.model} (the model replay)", param=given[0], values={})


def _dry_run_device(gpu: str | None, sms: int | None, cc: str | None) -> Any:
    """The plan's device: ``gpu``'s profile (h100), or ``sms`` with ``cc`` for any device."""
    from ..bench.plan import PlanDevice
    from .planning_inputs import resolve_device

    device = resolve_device(gpu, sms, cc)
    if device.gpu is not None:
        return PlanDevice.from_gpu(device.gpu)
    return PlanDevice(name=device.name, sm_count=device.sm_count, compute_capability=device.cc, l2_bytes=None,
                      memory_bytes=None, source="command line (--sms/--cc)")


def _run_kernel_bench(r: BenchRequest, kernel: dict[str, Any], progress: ProgressFactory | None) -> BenchRun:
    """The kernel bench on the device: usage errors first (before the device is probed), then the run and
    its files in ``r.output``."""
    from ..bench import plan as bplan

    if r.sms is not None or r.cc is not None:
        raise InputError("{flag.sms}/{flag.cc} describe a device for {flag.dry_run}; a real run measures the "
                         "device itself", param="sms" if r.sms is not None else "cc", values={})
    check_out_dir(r.output)
    check_before_device(r.gpu, r.levels)
    from ..bench import runner
    from ..bench.results import results_dict

    info, torch, pdev = runner.prepare(r.device, r.gpu)
    plan = bplan.make_plan(pdev, granularity=info.granularity, **kernel)
    plan_json = bplan.plan_dict(plan)
    plan_json["dry_run"] = False
    out_dir = make_out_dir(r.output)  # created only once the device is known to be there
    res = run_checkpointed(
        "pdmux bench", plan.steps,
        lambda on_step, on_result: runner.run_bench(plan, info, torch, plan_json, on_step=on_step,
                                                    on_result=on_result),
        results_dict, out_dir, progress)
    written = _write_outputs(res, out_dir) if out_dir is not None else []
    return BenchRun(res, written, out_dir)


def _write_outputs(res: Any, out: Path) -> list[Path]:
    """results.json, calibration.yaml and curves.png in ``out``, each whole or not at all (what could not be
    written a note in ``res.notes``)."""
    from ..bench.results import calibration_from_results, results_dict
    from ..costmodel.calibration_file import dump_calibration
    from ..util.atomic import write_text_atomic

    written: list[Path] = []
    cal = calibration_from_results(res)
    if cal is None:
        stale = (out / CALIBRATION_FILE).exists()  # an earlier run's
        res.notes.append(Finding("bench.no_calibration", {"stale": stale}))
    png_text = None
    if res.sweep:
        try:
            from ..bench import plot

            png_text = plot
        except ImportError:
            res.notes.append(Finding("bench.no_matplotlib"))
    written.append(write_text_atomic(out / RESULTS_FILE, json.dumps(results_dict(res), indent=2) + "\n"))
    if cal is not None:
        written.append(write_text_atomic(out / CALIBRATION_FILE, dump_calibration(cal)))
    if png_text is not None:
        try:
            written.append(png_text.write_png(res, out / PNG_FILE))
        except ImportError:
            res.notes.append(Finding("bench.no_matplotlib"))
    return written


