"""What ``pdmux bench`` and ``pdmux bench --model`` share (:mod:`.bench`, :mod:`.bench_replay`): what they
give back (:class:`BenchDryRun`, :class:`BenchRun`), the file names written in ``--output DIR``, its checks
before any device work (:func:`check_out_dir`) and its creation once the device is there
(:func:`make_out_dir`), and a run under a progress bar checkpointing its results (:func:`run_checkpointed`).
Imports nothing heavy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.errors import InputError
from .progress import ProgressFactory, entered, start

#: The bench's results in ``--output DIR`` (JSON), the calibration file and the curves it writes there.
RESULTS_FILE = "results.json"
CALIBRATION_FILE = "calibration.yaml"
PNG_FILE = "curves.png"


@dataclass
class BenchDryRun:
    """A ``--dry-run``'s plan, nothing measured: the kernel bench's
    (:class:`pdmux_cli.bench.plan.BenchPlan`) or, with ``replay``, the model replay's
    (:class:`pdmux_cli.bench.replay_plan.ReplayPlan`) with its notes and the estimate beside it
    (``predicted``, ``predicted_calibrated``: :class:`~pdmux_cli.bench.replay_plan.Predictions` or ``None``).
    ``out``: the ``--output`` folder a run would write (nothing written)."""

    plan: Any
    out: Path | None
    replay: bool = False
    notes: list[Any] = field(default_factory=list)
    predicted: Any = None
    predicted_calibrated: Any = None

    def to_dict(self) -> dict[str, Any]:
        """``bench --dry-run --json``."""
        if not self.replay:
            from ..bench.plan import plan_dict

            return plan_dict(self.plan)
        from ..bench.replay_plan import replay_plan_dict
        from ..messages import render_all

        return {"dry_run": True, **replay_plan_dict(self.plan), "notes": render_all(self.notes),
                "predicted": predictions_json(self.predicted, self.plan),
                "predicted_calibrated": predictions_json(self.predicted_calibrated, self.plan)}


@dataclass
class BenchRun:
    """A run's results (:class:`pdmux_cli.bench.results.BenchResults`, or with ``replay``
    :class:`pdmux_cli.bench.replay_results.ReplayResults`: ``interrupted``, ``error``, ``step_errors`` say
    whether it stopped), the files ``written`` in ``out_dir`` (``None``: no ``--output``), and the replay's
    own calibration (``None``: none measured)."""

    results: Any
    written: list[Path]
    out_dir: Path | None
    replay: bool = False
    calibration: Any = None

    def to_dict(self) -> dict[str, Any]:
        """``bench --json``: the results."""
        if self.replay:
            from ..bench.replay_results import results_dict as replay_dict

            return replay_dict(self.results)
        from ..bench.results import results_dict

        return results_dict(self.results)


def predictions_json(preds: Any, plan: Any) -> dict[str, Any] | None:
    """The estimate beside a replay plan (:class:`~pdmux_cli.bench.replay_plan.Predictions`) as the JSON has
    it: the whole GPU's and each level's; ``None`` without one."""
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


def check_before_device(gpu: str | None, levels: str | None) -> None:
    """:class:`InputError` for a bad ``--gpu`` or ``--levels``, checked before the device is probed: on a
    machine without a driver they would otherwise hide behind "no NVIDIA driver"."""
    if gpu is not None:
        from ..catalog.hardware import find_gpu_or_file

        find_gpu_or_file(gpu)
    if levels is not None:
        from ..bench.plan import parse_level_items

        parse_level_items(levels)


def check_out_dir(out: Path | None) -> None:
    """Refuse ``--output DIR`` before any device work when it cannot become a writable directory: it is
    a file (or device), or the nearest existing folder on its path is not a directory or no file can be
    created there (:func:`_cannot_create_in`: tried, as the run would, and removed)."""
    from ..util.input_files import exists, is_dir

    if out is None:
        return
    if exists(out) and not is_dir(out):
        raise InputError("{param_flag} {out} is not a directory: give a directory", param="output",
                         values={"out": out})
    existing = out
    while not exists(existing):
        parent = existing.parent
        if parent == existing:
            break
        existing = parent
    if not is_dir(existing):
        raise InputError("{param_flag} {out}: {existing} is not a directory", param="output",
                         values={"out": out, "existing": existing})
    reason = _cannot_create_in(existing)
    if reason is not None:
        raise InputError("{param_flag} {out}: {existing} is not writable ({reason})", param="output",
                         values={"out": out, "existing": existing, "reason": reason})


def _cannot_create_in(folder: Path) -> str | None:
    """Why a file cannot be created in ``folder`` (the system's reason), or ``None``: a temporary file is
    created there and removed at once, as the run creates its folder and files there. Mode bits
    (``os.access``) cannot tell: root passes them on /proc, where nothing can be created."""
    import tempfile

    try:
        handle, name = tempfile.mkstemp(prefix=".pdmux-check-", dir=folder)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    try:
        os.close(handle)
    finally:
        os.unlink(name)
    return None


def make_out_dir(out: Path | None) -> Path | None:
    """Create ``--output DIR`` up front (before any GPU work); :class:`InputError` when impossible."""
    from ..util.input_files import exists, is_dir

    if out is None:
        return None
    if exists(out) and not is_dir(out):
        raise InputError("{param_flag} {out} is not a directory: give a directory", param="output",
                         values={"out": out})
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError("{param_flag} {out}: cannot create the directory ({error})", param="output",
                         values={"out": out, "error": exc.strerror}) from None
    return out


def run_checkpointed(title: str, total: int, run: Callable[..., Any], to_json: Callable[[Any], Any],
                     out_dir: Path | None, progress: ProgressFactory | None) -> Any:
    """``run(on_step, on_result)`` under ``progress``'s bar of ``total`` steps (labelled by each step); after
    each step the results so far (``to_json(results)``) are checkpointed to ``out_dir/results.json``."""
    from ..util.atomic import write_text_atomic

    task = start(progress, total, title)
    done = 0

    def on_step(label: str) -> None:
        if task is not None:
            task.describe(label)

    def on_result(res: Any) -> None:
        nonlocal done
        done += 1
        if task is not None:
            task.advance(done)
        if out_dir is not None:
            write_text_atomic(out_dir / RESULTS_FILE, json.dumps(to_json(res), indent=2) + "\n")

    with entered(task):
        return run(on_step, on_result)
