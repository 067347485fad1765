"""``pdmux bench``: the GPU bench (green contexts, NVRTC kernels, torch GEMMs) and its ``--dry-run`` plan.

Module level imports only typer and the CLI helpers: torch, cuda-python, numpy and matplotlib are
imported inside the command, and only on the paths that need them (tests/test_bench_cpu.py checks
that importing ``pdmux_cli.cli`` loads none of them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ..util.errors import InputError
from .app import app
from .bench_shared import (CALIBRATION_FILE, RESULTS_FILE, check_out_dir, exit_for, make_out_dir,
                           print_tables_and_notes, run_with_progress)
from .common import print_json, write_atomic
from .options import deferred, request_of, with_options

PNG_FILE = "curves.png"


def _write_outputs(res: Any, out: Path) -> list[Path]:
    """results.json, calibration.yaml and curves.png in ``out``, each whole or not at all."""
    from ..bench.results import calibration_from_results, results_dict
    from ..costmodel.calibration_file import dump_calibration

    written: list[Path] = []
    cal = calibration_from_results(res)
    if cal is None:
        stale = " (the calibration.yaml there is from an earlier run)" if (
            out / CALIBRATION_FILE).exists() else ""
        res.notes.append("no calibration: the run stopped before the ceilings and a sweep point were "
                         f"measured{stale}")
    png_text = None
    if res.sweep:
        try:
            from ..bench import plot

            png_text = plot
        except ImportError:
            res.notes.append("matplotlib is not installed: no curves.png (pip install 'pdmux[bench]')")
    written.append(write_atomic(out / RESULTS_FILE, json.dumps(results_dict(res), indent=2) + "\n"))
    if cal is not None:
        written.append(write_atomic(out / CALIBRATION_FILE, dump_calibration(cal)))
    if png_text is not None:
        try:
            written.append(png_text.write_png(res, out / PNG_FILE))
        except ImportError:
            res.notes.append("matplotlib is not installed: no curves.png (pip install 'pdmux[bench]')")
    return written


def _dry_run_device(gpu: str | None, sms: int | None, cc: str | None) -> Any:
    from ..bench.plan import PlanDevice
    from ..workflows.planning_inputs import resolve_device

    device = resolve_device(gpu, sms, cc)
    if device.gpu is not None:
        return PlanDevice.from_gpu(device.gpu)
    return PlanDevice(name=device.name, sm_count=device.sm_count, compute_capability=device.cc, l2_bytes=None,
                      memory_bytes=None, source="command line (--sms/--cc)")


#: bench's options in their --help order: its request's declared fields, --json and --out (--output's old
#: name, hidden).
BENCH_OPTIONS = ("dry_run", "gpu", "sms", "cc", "repeats", "quick", "gemm_shape", "buffer_bytes", "levels",
                 "device", "skinny_gemm", "sm_group_num", "output", "out", "as_json", "model", "decode_bs",
                 "context", "prompt_tokens", "token_budget", "decode_bs_divisor", "calibration", "cpu")


def _bench_options(function: Any) -> Any:
    """bench's options, built from its request's declarations when typer first builds the command
    (:func:`~.options.deferred`: the request's module is imported only then)."""
    from ..workflows.bench import BenchRequest

    return with_options(BenchRequest, BENCH_OPTIONS, "bench")(function)


@app.command()
@deferred(_bench_options)
def bench(
    as_json: bool = typer.Option(False, "--json",
                                 help="Print JSON (the plan with --dry-run, else the results) instead of "
                                 "tables."),
    out: Path | None = typer.Option(None, "--out", hidden=True, help="--output's old name (old scripts)."),
    **options: Any,
) -> None:
    """Measure a GEMM and an HBM-read kernel on green-context SM partitions: solo curves, co-run at SGLang's
    levels.

    Writes the calibration 'pdmux estimate --calibration' uses. Needs an NVIDIA GPU, driver CUDA >= 12.4,
    torch with CUDA, cuda-python and NVRTC (pdmux's 'bench' extra); --dry-run needs none of them.

    With --model: replay that model's layers instead, in SGLang's pdmux loop at each level, next to the
    estimate."""
    from ..bench import plan as bplan
    from ..workflows.bench import BenchRequest

    if out is not None:  # --output's old name, kept for scripts written before bench took --output
        if options["output"] is not None:
            raise InputError("--out is --output's old name: give one of them")
        options["output"] = out
    r = request_of(BenchRequest, options)
    gemm, buffer, skinny = _kernel_sizes(r.gemm_shape, r.buffer_bytes, r.skinny_gemm)
    if r.model is not None:
        _refuse_kernel_options(sms=r.sms, cc=r.cc, buffer_bytes=r.buffer_bytes, skinny_gemm=r.skinny_gemm,
                               gemm_shape=r.gemm_shape, gemm=gemm)
        from .bench_model import run_model_replay

        run_model_replay(
            model=r.model, gpu=r.gpu, dry_run=r.dry_run, cpu=r.cpu, decode_bs=r.decode_bs, context=r.context,
            prompt_tokens=r.prompt_tokens, levels=r.levels, repeats=r.repeats, quick=r.quick,
            device_index=r.device, sm_group_num=r.sm_group_num, decode_bs_divisor=r.decode_bs_divisor,
            token_budget=r.token_budget, calibration=r.calibration, out=r.output, as_json=as_json)
        return
    _refuse_replay_options({"--decode-bs": r.decode_bs, "--context": r.context,
                            "--prompt-tokens": r.prompt_tokens, "--token-budget": r.token_budget,
                            "--decode-bs-divisor": r.decode_bs_divisor, "--calibration": r.calibration,
                            "--cpu": r.cpu or None})
    kernel: dict[str, Any] = {
        "gemm": gemm, "buffer_bytes": buffer, "repeats": r.repeats, "quick": r.quick, "levels": r.levels,
        "device_index": r.device, "sm_group_num": r.sm_group_num, "skinny": skinny,
    }
    if r.dry_run:
        check_out_dir(r.output)  # the run it plans would refuse it: so does the plan
        _print_dry_run(bplan.make_plan(_dry_run_device(r.gpu, r.sms, r.cc), **kernel), as_json, r.output)
        return
    _run_kernel_bench(gpu=r.gpu, sms=r.sms, cc=r.cc, levels=r.levels, device=r.device, out=r.output,
                      as_json=as_json, options=kernel)


def _kernel_sizes(gemm_shape: str, buffer_bytes: str | None, skinny_gemm: str | None
                  ) -> tuple[Any, int | None, Any]:
    """The kernel bench's GEMM, read buffer (bytes, ``None``: the default) and skinny GEMM (``None``: none)
    from their options; :class:`InputError` for those (``--repeats``, ``--device`` and ``--sm-group-num``
    out of range: the request's, :class:`pdmux_cli.workflows.bench.BenchRequest`)."""
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

    kernel_only = {"--sms": sms, "--cc": cc, "--buffer-bytes": buffer_bytes, "--skinny-gemm": skinny_gemm,
                   "--gemm-shape": None if gemm == bplan.GemmShape(*bplan.DEFAULT_GEMM_SHAPE) else gemm_shape}
    given = [name for name, value in kernel_only.items() if value is not None]
    if given:
        raise InputError(f"{given[0]} is an option of the kernel bench, not of --model (the model replay)")


def _refuse_replay_options(replay_only: dict[str, Any]) -> None:
    """:class:`InputError` naming the first model-replay option (flag -> value, ``None``: not given) given
    without ``--model``."""
    given = [name for name, value in replay_only.items() if value is not None]
    if given:
        raise InputError(f"{given[0]} goes with --model (the model replay)")


def _print_dry_run(plan: Any, as_json: bool, out: Path | None) -> None:
    """The ``--dry-run`` plan: its JSON, or its tables, notes and the line saying nothing was measured."""
    from ..bench import plan as bplan

    if as_json:
        print_json(bplan.plan_dict(plan))
        return
    from .bench_tables import plan_tables

    con = print_tables_and_notes(plan_tables(plan), plan.notes)
    con.print("dry run: nothing was measured" + (f"; nothing written to {out}" if out else ""))


def _run_kernel_bench(*, gpu: str | None, sms: int | None, cc: str | None, levels: str | None, device: int,
                      out: Path | None, as_json: bool, options: dict[str, Any]) -> None:
    """The kernel bench on the device: usage errors first (before the device is probed), then the run, its
    files in ``out``, its JSON or tables; exits as :func:`exit_for` says."""
    from ..bench import plan as bplan

    if sms is not None or cc is not None:
        raise InputError("--sms/--cc describe a device for --dry-run; a real run measures the device itself")
    check_out_dir(out)
    # Usage errors before the device is probed: on a machine without a driver they would
    # otherwise hide behind "no NVIDIA driver".
    if gpu is not None:
        from ..catalog.hardware import find_gpu_or_file

        find_gpu_or_file(gpu)
    if levels is not None:
        bplan.parse_level_items(levels)
    from ..bench import runner

    info, torch, pdev = runner.prepare(device, gpu)
    plan = bplan.make_plan(pdev, granularity=info.granularity, **options)
    plan_json = bplan.plan_dict(plan)
    plan_json["dry_run"] = False
    out_dir = make_out_dir(out)  # created only once the device is known to be there
    res = _run_with_progress(runner, plan, info, torch, plan_json, out_dir)
    written = _write_outputs(res, out_dir) if out_dir is not None else []
    _print_results(res, written, as_json)
    exit_for(res, out_dir)


def _print_results(res: Any, written: list[Path], as_json: bool) -> None:
    """A run's results: their JSON, or the summary tables, notes and the files written."""
    from ..bench.results import results_dict

    if as_json:
        print_json(results_dict(res))
        return
    from .bench_tables import summary_tables

    con = print_tables_and_notes(summary_tables(res), res.notes)
    for path in written:
        con.print(f"wrote {path}")


def _run_with_progress(runner: Any, plan: Any, info: Any, torch: Any, plan_json: dict,
                       out_dir: Path | None) -> Any:
    """``runner.run_bench`` under :func:`run_with_progress`."""
    from ..bench.results import results_dict

    return run_with_progress(
        "pdmux bench", plan.steps,
        lambda on_step,
        on_result: runner.run_bench(plan, info, torch, plan_json, on_step=on_step, on_result=on_result),
        results_dict, out_dir)
