"""What every command shares: one-line errors, option parsing helpers, JSON and atomic file output.

Kept free of heavy imports: this module is on the start-up path of every command.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

from ..errors import InputError, PdmuxError, printable


def fail_line(message: str) -> None:
    """Write one line to stderr, prefixed ``pdmux: error:``: whitespace runs become one space,
    other unprintable characters (ESC, NUL, bidi overrides from file names or file contents) are
    written as escapes."""
    text = printable(" ".join(str(message).split()))
    sys.stderr.write(f"pdmux: error: {text}\n")


def _click_classes(name: str) -> tuple[type, ...]:
    """Exception class ``name`` from every click typer may use.

    typer < 0.20 runs on the click package; newer typer vendors its own copy (``typer._click``)
    and may not install click at all.
    """
    classes: list[type] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = __import__(module, fromlist=[name])
        except ImportError:
            continue
        cls = getattr(mod, name, None)
        if cls is not None and cls not in classes:
            classes.append(cls)
    return tuple(classes)


_USAGE_ERRORS = _click_classes("UsageError")
_CLICK_ERRORS = _click_classes("ClickException")
_ABORTS = _click_classes("Abort")


class OneLineErrorGroup(TyperGroup):
    """The typer group of ``pdmux``: every failure becomes one line on stderr, never a traceback.

    Usage errors (click's, and :class:`InputError`) exit 2; :class:`~pdmux_cli.errors.DeviceError`
    and other runtime failures exit 1; Ctrl-C exits 130.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if sys.stdout is None:  # started with stdout closed (`pdmux ... >&-`)
            fail_line("standard output is closed: nothing to write the result to")
            if standalone_mode:
                sys.exit(1)
            return 1
        try:
            rv = super().main(args=args, prog_name=prog_name or "pdmux", complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except _USAGE_ERRORS as e:
            message = e.format_message()
            if message.strip():
                hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
                fail_line(message + hint)
                code = e.exit_code
            else:  # no_args_is_help: the help was printed, nothing went wrong
                code = 0
        except _CLICK_ERRORS as e:
            fail_line(e.format_message())
            code = e.exit_code
        except _ABORTS:
            fail_line("aborted")
            code = 130
        except PdmuxError as e:
            fail_line(str(e))
            code = e.exit_code
        except OSError as e:  # writing the result failed: stdout full, broken pipe
            fail_line(f"cannot write the output: {e.strerror or e}")
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


def parse_int_list(text: str, what: str, minimum: int = 1) -> list[int]:
    """``"1,6,12"`` -> ``[1, 6, 12]``; :class:`InputError` naming ``what`` for anything else."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise InputError(f"{what}: give a comma-separated list of integers, e.g. 1,6,12")
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise InputError(f"{what}: {item!r} is not an integer (e.g. 1,6,12)") from None
        if value < minimum:
            raise InputError(f"{what}: {value} must be >= {minimum}")
        values.append(value)
    return values


def parse_float_list(text: str, what: str) -> list[float]:
    """``"44,66,88"`` -> ``[44.0, 66.0, 88.0]``; every value must be > 0."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    values = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise InputError(f"{what}: {item!r} is not a number (e.g. 44,66,88)") from None
        if not (value > 0 and math.isfinite(value)):
            raise InputError(f"{what}: {item} must be a finite number > 0")
        values.append(value)
    if not values:
        raise InputError(f"{what}: give a comma-separated list of numbers, e.g. 44,66,88")
    return values


def parse_cc(text: str) -> tuple[int, int]:
    """``--cc 9.0`` -> ``(9, 0)`` (one-line :class:`InputError` otherwise)."""
    from ..policy import parse_compute_capability

    return parse_compute_capability(text)


NON_FINITE = "the inputs give a non-finite result (NaN or infinity): check the sizes and efficiencies"


def _json_text(data: Any, problem: str) -> str:
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except ValueError:
        raise InputError(problem) from None


def require_finite(data: Any, problem: str = NON_FINITE) -> None:
    """:class:`InputError` (``problem``) when a number in ``data`` (JSON-like) is NaN or infinite:
    a table must not show ``inf ms`` where the JSON of the same result is refused."""
    _json_text(data, problem)


def print_json(data: Any, problem: str = NON_FINITE) -> None:
    """Print ``data`` as indented JSON on stdout (stable key order as built).

    Raises :class:`InputError` (``problem``) when a number is NaN or infinite (not valid JSON):
    inputs that extreme give no meaningful result.
    """
    sys.stdout.write(_json_text(data, problem) + "\n")


def console(stderr: bool = False) -> Any:
    """A rich console (stdout, or stderr) for tables and notes.

    Markup and emoji codes are off: tables and notes carry user text (file names, GPU and model
    names, YAML keys, calibration fields) that must print as written; with markup on, ``[/x]`` in
    a name raises rich's MarkupError and ``[bold]`` restyles. Our own styles are rich ``Text``
    (:func:`styled`). 100 columns when the terminal reports a useless width (COLUMNS=0).
    """
    cls = _table_console_class()
    con = cls(stderr=stderr, markup=False, emoji=False)
    return con if con.width >= 40 else cls(stderr=stderr, markup=False, emoji=False, width=100)


@functools.cache
def _table_console_class() -> Any:
    """The Console class :func:`console` makes (built on first use: rich is imported lazily)."""
    from rich.console import Console
    from rich.table import Table

    class TableConsole(Console):
        """A rich Console that prints a table's title on a line of its own when the title is wider than
        the table (rich wraps a title to the table's width: under a narrow table, a column of words)."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            if len(objects) == 1 and isinstance(objects[0], Table) and objects[0].title:
                table = objects[0]
                width = self.measure(table).maximum
                if len(str(table.title)) > width:
                    title, table.title = table.title, None
                    super().print(title, soft_wrap=True)
                    try:
                        super().print(table, **kwargs)
                    finally:
                        table.title = title
                    return
            super().print(*objects, **kwargs)

    return TableConsole


def styled(text: str, style: str) -> Any:
    """``text`` in a rich ``style`` (``"bold red"``), never parsed as markup."""
    from rich.text import Text

    return Text(text, style=style)


def print_note(con: Any, note: str) -> None:
    """``note: ...`` on ``con`` (a :func:`console`), the label in yellow, the text as written."""
    con.print(styled("note:", "yellow"), note, soft_wrap=True)


def progress_bar(con: Any, disable: bool = False) -> Any:
    """A transient rich progress bar on ``con``: description (as written), bar, done/total, time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=con, transient=True, disable=disable)


def model_file(model: str) -> Path | None:
    """``--model`` when it names an existing file or folder (an input not to overwrite), else ``None``."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path / "config.json"
    return path if path.is_file() else None


def gpu_file(gpu: str | None) -> Path | None:
    """``--gpu`` when it names an existing profile file (an input not to overwrite), else ``None``."""
    if gpu is None:
        return None
    path = Path(gpu.strip()).expanduser()
    return path if path.is_file() else None


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (see :mod:`pdmux_cli.atomic`).

    Raises :class:`InputError` when the folder does not exist or is not writable.
    """
    from ..atomic import write_text_atomic

    return write_text_atomic(path, text)
