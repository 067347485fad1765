"""What ``pdmux bench`` and ``pdmux bench --model`` share: the ``--output DIR`` checks, the file names written
there, a run under a progress bar checkpointing its results (:func:`run_with_progress`) and how a stopped run
ends (:func:`exit_for`).

Shared by :mod:`pdmux_cli.cli.bench` and :mod:`pdmux_cli.cli.bench_model`, so that neither imports the other
for them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from ..util.errors import InputError
from .common import console, fail_line, progress_bar, write_atomic

#: The bench's results in ``--output DIR`` (JSON) and the calibration file it writes there.
RESULTS_FILE = "results.json"
CALIBRATION_FILE = "calibration.yaml"


def print_tables_and_notes(tables: Any, notes: Any) -> Any:
    """Print ``tables`` (rich tables) then ``notes`` (findings or lines) on the console; returns the
    console for what the caller prints after them."""
    from .common import print_note

    con = console()
    for table in tables:
        con.print(table)
    for note in notes:
        print_note(con, note)
    return con


def check_out_dir(out: Path | None) -> None:
    """Refuse ``--output DIR`` before any device work when it cannot become a writable directory: it is
    a file (or device), or the nearest existing folder on its path is not a directory or no file can be
    created there (:func:`_cannot_create_in`: tried, as the run would, and removed)."""
    from ..util.input_files import exists, is_dir

    if out is None:
        return
    if exists(out) and not is_dir(out):
        raise InputError(f"--output {out} is not a directory: give a directory")
    existing = out
    while not exists(existing):
        parent = existing.parent
        if parent == existing:
            break
        existing = parent
    if not is_dir(existing):
        raise InputError(f"--output {out}: {existing} is not a directory")
    reason = _cannot_create_in(existing)
    if reason is not None:
        raise InputError(f"--output {out}: {existing} is not writable ({reason})")


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
        raise InputError(f"--output {out} is not a directory: give a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--output {out}: cannot create the directory ({exc.strerror})") from None
    return out


def exit_for(res: Any, out_dir: Path | None) -> None:
    """End a run that stopped: exit 130 after Ctrl-C, 1 after an error or a failed step (one stderr line,
    naming where the finished steps are); return for a complete run. ``res``: results with ``interrupted``,
    ``error`` and ``step_errors`` (the kernel bench's or the model replay's)."""
    if res.interrupted:
        fail_line("interrupted by Ctrl-C" + (f"; the finished steps are in {out_dir}" if out_dir else ""))
        raise typer.Exit(130)
    if res.error or res.step_errors:
        first = res.error or res.step_errors[0]
        more = f" ({len(res.step_errors)} step(s) failed)" if res.step_errors else ""
        fail_line(first + more + (f"; the finished steps are in {out_dir}" if out_dir else ""))
        raise typer.Exit(1)


def run_with_progress(title: str, total: int, run: Any, to_json: Any, out_dir: Path | None) -> Any:
    """``run(on_step, on_result)`` under a rich progress bar of ``total`` steps (stderr, only on a terminal);
    after each step the results so far (``to_json(results)``) are checkpointed to ``out_dir/results.json``."""
    err = console(stderr=True)
    with progress_bar(err, disable=not err.is_terminal) as progress:
        task = progress.add_task(title, total=total)

        def on_step(label: str) -> None:
            progress.update(task, description=label)

        def on_result(res: Any) -> None:
            progress.advance(task)
            if out_dir is not None:
                write_atomic(out_dir / RESULTS_FILE, json.dumps(to_json(res), indent=2) + "\n")

        return run(on_step, on_result)
