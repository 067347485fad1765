"""What every command shares: one-line errors, option parsing helpers, JSON and atomic file output.

Kept free of heavy imports: this module is on the start-up path of every command.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

from ..util.errors import Finding, InputError, PdmuxError, printable, short_repr
from ..util.signals import Terminated, handling_signals, interrupted, raised_stop
from ..workflows.files import gpu_file, model_file  # noqa: F401 (the commands' inputs, from here too)
from ..workflows.values import parse_float_list, parse_int_list, parse_names  # noqa: F401 (list options)


def fail_line(message: str) -> None:
    """Write one line to stderr, prefixed ``pdmux: error:``: whitespace runs become one space,
    other unprintable characters (ESC, NUL, bidi overrides from file names or file contents) are
    written as escapes. A closed or full stderr (``2>&-``, ``2>/dev/full``) loses the line but never
    changes the exit status: the write is flushed here and its failure ignored."""
    text = printable(" ".join(str(message).split()))
    stream = sys.stderr
    if stream is None:  # started with stderr closed
        return
    try:
        stream.write(f"pdmux: error: {text}\n")
        stream.flush()
    except (OSError, ValueError):
        _silence(stream)


def _silence(stream: Any) -> None:
    """Point ``stream``'s file descriptor at /dev/null, so that Python's final flush at exit cannot fail
    on it again (a failed flush there turns the exit status into 120)."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _escape_unencodable() -> None:
    """Write what stdout's and stderr's encoding cannot hold as escapes (``\\xe9``), never fail on it: a
    file name or GPU name printed on an ASCII terminal (``PYTHONIOENCODING=ascii``, ``LANG=C`` on older
    Pythons), or a file name that is not UTF-8 (its bytes kept as surrogates), would otherwise raise
    ``UnicodeEncodeError`` after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and getattr(stream, "errors", None) == "strict" and hasattr(
            stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError, TypeError):  # pragma: no cover - a stream that cannot change
                pass


def _flush_stdout() -> None:
    """Flush stdout inside :meth:`OneLineErrorGroup.main`, so a reader that went away (EPIPE) or a full
    disk is reported there, not by Python's flush at exit."""
    if sys.stdout is not None:
        sys.stdout.flush()


class _Stopped(Exception):
    """A :class:`~pdmux_cli.util.signals.Terminated` (SIGTERM, SIGHUP) carried past click's handlers: exit
    ``128 + signum`` with one line."""

    def __init__(self, signal: Terminated) -> None:
        super().__init__(signal.name)
        self.signal = signal


class _BrokenPipe(Exception):
    """EPIPE on stdout, as our rich consoles (instead of rich's own ``SystemExit(1)``) and
    :meth:`OneLineErrorGroup.invoke` raise it: exit 0 quietly."""


def _from_rich_broken_pipe(exc: SystemExit) -> bool:
    """Whether ``exc`` is rich's ``Console.on_broken_pipe`` leaving (``SystemExit(1)``): typer prints
    ``--help`` on a console of its own, whose reader may go away (``pdmux --help | head -1``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return exc.code == 1 and tb is not None and tb.tb_frame.f_code.co_name == "on_broken_pipe"


def _flags_without_metavar(command: Any, ctx: Any) -> None:
    """Give ``command``'s on/off flags an empty metavar: typer's help would show ``<bool>`` beside
    ``--json``, as if it took a value."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""


def _click_classes(name: str) -> tuple[type, ...]:
    """Exception class ``name`` from every click typer may use.

    typer < 0.20 runs on the click package; newer typer vendors its own copy (``typer._click``; ``Abort``
    in ``typer.exceptions``) and may not install click at all. Where typer vendors it, the click package is
    taken only if something has imported it already (importing it costs 7 ms of ``pdmux splits``'s
    start-up, and nothing of pdmux's raises its exceptions).
    """
    classes: list[type] = []
    for module in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        if classes and module.startswith("click") and "click" not in sys.modules:
            continue
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

    Usage errors (click's, and :class:`InputError`) exit 2; :class:`~pdmux_cli.util.errors.DeviceError`
    and other runtime failures exit 1; Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129, after the same
    cleanup (:mod:`pdmux_cli.util.signals`: worker processes terminated, temporary files removed). A reader of
    stdout that goes away (EPIPE: ``pdmux ... | head -1``) is no failure: exit 0, nothing on stderr. A closed
    or full stderr never changes the status (:func:`fail_line`).
    """

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _flags_without_metavar(command, ctx)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _flags_without_metavar(self, ctx)
        super().format_help(ctx, formatter)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; EPIPE on stdout leaves as :class:`_BrokenPipe`, past click's own handler
        (which turns it into ``sys.exit(1)``)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _BrokenPipe() from None
        except Terminated as e:  # past click's KeyboardInterrupt handler, which writes to a stderr maybe gone
            raise _Stopped(e) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if sys.stdout is None:  # started with stdout closed (`pdmux ... >&-`)
            fail_line("standard output is closed: nothing to write the result to")
            if standalone_mode:
                sys.exit(1)
            return 1
        _escape_unencodable()
        try:
            with handling_signals():
                try:
                    rv = super().main(args=args, prog_name=prog_name or "pdmux", complete_var=complete_var,
                                      standalone_mode=False, **extra)
                except _ABORTS as e:
                    if isinstance(e.__cause__, Terminated):  # stopped while parsing the options
                        raise _Stopped(e.__cause__) from None
                    raise
                except SystemExit as e:
                    if _from_rich_broken_pipe(e):  # typer's own help console (`pdmux --help | head -1`)
                        raise _BrokenPipe() from None
                    raise
                stop = raised_stop()
                if stop is not None:  # typer returned 130 for it (a stop while it parsed the options)
                    raise _Stopped(stop)
                code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
                if code == 130 and interrupted():  # typer's Exit(130) for Ctrl-C: say so, as for SIGTERM
                    fail_line("stopped by Ctrl-C (SIGINT)")
                _flush_stdout()
        # SIGTERM or SIGHUP: all unwound (workers gone, no temporary file)
        except (_Stopped, Terminated) as e:
            stop = e.signal if isinstance(e, _Stopped) else e
            fail_line(f"stopped by {stop.name}")
            code = stop.exit_code
        except (BrokenPipeError, _BrokenPipe):
            # the reader of stdout went away (`pdmux ... | head -1`): what it wanted it has; exit 0 quietly,
            # as Unix filters do on EPIPE
            _silence(sys.stdout)
            code = 0
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
            fail_line("stopped by Ctrl-C (SIGINT)" if interrupted() else "aborted")
            code = 130
        except PdmuxError as e:
            fail_line(str(e))
            code = e.exit_code
        except OSError as e:  # writing the result failed: stdout full
            fail_line(f"cannot write the output: {e.strerror or e}")
            if sys.stdout is not None:
                _silence(sys.stdout)
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


def parse_cc(text: str) -> tuple[int, int]:
    """``--cc 9.0`` -> ``(9, 0)``; one-line :class:`InputError` for anything that is not ``MAJOR.MINOR``
    or is not a known NVIDIA capability (:data:`pdmux_cli.sglang.split_levels.KNOWN_COMPUTE_CAPABILITIES`)."""
    from ..sglang.split_levels import check_known_capability, parse_compute_capability

    return check_known_capability(parse_compute_capability(text))


#: The help of every command's ``--json``.
JSON_HELP = "Print JSON (stable keys, units in the key names)."
NON_FINITE = "the inputs give a non-finite result (NaN or infinity): check the sizes and efficiencies"


def _json_text(data: Any, problem: str) -> str:
    try:
        from ..messages import json_default

        return json.dumps(data, indent=2, allow_nan=False, default=json_default)
    except ValueError:
        raise InputError(problem) from None


def require_finite(data: Any, problem: str = NON_FINITE) -> None:
    """:class:`InputError` (``problem``) when a number in ``data`` (JSON-like) is NaN or infinite:
    a table must not show ``inf ms`` where the JSON of the same result is refused."""
    _json_text(data, problem)


def print_json(data: Any, problem: str = NON_FINITE, *, nan_as_null: bool = False) -> None:
    """Print ``data`` as indented, standard JSON on stdout (stable key order as built): every command's
    ``--json``.

    ``nan_as_null``: NaN and infinities become ``null`` (a simulation's figures where nothing was measured:
    no request finished, no decode step); otherwise :class:`InputError` (``problem``) when a number is NaN
    or infinite (not valid JSON): planning inputs that extreme give no meaningful result.
    """
    if nan_as_null:
        from ..workflows.values import finite

        data = finite(data)
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
        """A rich Console that prints a table's title (caption) on lines of their own above (below) it when
        wider than the table (rich wraps them to the table's width: under a narrow table, a column of
        words)."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            if len(objects) == 1 and isinstance(objects[0], Table) and (
                objects[0].title or objects[0].caption):
                table = objects[0]
                width = self.measure(table).maximum
                wide_title = bool(table.title) and len(str(table.title)) > width
                wide_caption = bool(table.caption) and max(map(len, str(table.caption).splitlines()
                                                               or [""])) > width
                if wide_title or wide_caption:
                    title, caption = table.title, table.caption
                    if wide_title:
                        table.title = None
                        super().print(title, soft_wrap=True)
                    if wide_caption:
                        table.caption = None
                    try:
                        super().print(table, **kwargs)
                    finally:
                        table.title, table.caption = title, caption
                    if wide_caption:  # wrapped to the console's width, not the table's
                        super().print(caption)
                    return
            super().print(*objects, **kwargs)

        def on_broken_pipe(self) -> None:  # rich's own raises SystemExit(1): pdmux exits 0 on EPIPE
            raise _BrokenPipe()

    return TableConsole


def styled(text: str, style: str) -> Any:
    """``text`` in a rich ``style`` (``"bold red"``), never parsed as markup."""
    from rich.text import Text

    return Text(text, style=style)


def print_note(con: Any, note: Any) -> None:
    """``note: ...`` on ``con`` (a :func:`console`), the label in yellow, the text as written (a
    :class:`~pdmux_cli.util.errors.Finding` worded by :mod:`pdmux_cli.messages`)."""
    if isinstance(note, Finding):
        from ..messages import render

        note = render(note)
    con.print(styled("note:", "yellow"), note, soft_wrap=True)


def progress_bar(con: Any, disable: bool = False) -> Any:
    """A transient rich progress bar on ``con``: description (as written), bar, done/total, time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=con, transient=True, disable=disable)


def output_path(text: str) -> Path | None:
    """The ``parser`` of the ``--output`` options whose default is standard output (gen-config, tune,
    calibrate): ``-`` is standard output (``None``), as for gen-config; otherwise :func:`output_file`."""
    if str(text).strip() == "-":
        return None
    return output_file(text)


def output_file(text: str) -> Path:
    """The ``parser`` of every output-file option (``--csv``, ``--plot``, ``--output``): the path as
    typed, refused (exit 2, naming the option) when it ends with ``/`` (a folder, which ``Path`` would
    silently turn into a file of that name) or is ``-`` (standard output, which these do not write: a
    file named ``-`` would appear instead)."""
    from typer import BadParameter

    text = str(text)
    if os.path.basename(text) in (".", "..") and text not in (".", ".."):  # out/. is the folder out
        raise BadParameter(f"{short_repr(text)} ends with '/{os.path.basename(text)}', a folder: give a file "
                           f"name (e.g. {short_repr(os.path.join(text, 'out'))})")
    if text.endswith(("/", os.sep)) and text.strip("/" + os.sep):
        raise BadParameter(f"{short_repr(text)} ends with '/', a folder: give a file name "
                           f"(e.g. {short_repr(text.rstrip('/' + os.sep) + '/out')})")
    if not text.strip():
        raise BadParameter("an empty path: give a file name")
    if text.strip() == "-":
        raise BadParameter("'-' (standard output) is not written by this option: give a file name")
    return Path(text)


def one_number(list_in: str) -> Callable[[str], float]:
    """The ``parser`` of an option that takes one number where command ``list_in`` takes a list
    (simulate's, capacity's and tune's ``--s-sat``; estimate's takes 44,66,88): the number, or, for text
    with a comma, a refusal (exit 2, naming the option) that says which command takes a list. Its range is
    the request's to check (:mod:`pdmux_cli.workflows.fields`)."""
    from typer import BadParameter

    def parse(text: str) -> float:
        text = str(text)
        if "," in text:
            raise BadParameter(f"{short_repr(text)} is a list: this command takes one number (run it once "
                               f"per value); a list is taken by pdmux {list_in}")
        try:
            return float(text)
        except ValueError:
            raise BadParameter(f"{short_repr(text)} is not a number") from None

    return parse


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (see :mod:`pdmux_cli.util.atomic`).

    Raises :class:`InputError` when the folder does not exist or is not writable.
    """
    from ..util.atomic import write_text_atomic

    return write_text_atomic(path, text)


def warn_line(message: str) -> None:
    """One line on stderr, prefixed ``pdmux: warning:`` (the exit status is the caller's); written as
    :func:`fail_line` writes (escapes, a closed stderr ignored)."""
    text = printable(" ".join(str(message).split()))
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"pdmux: warning: {text}\n")
        stream.flush()
    except (OSError, ValueError):
        pass
