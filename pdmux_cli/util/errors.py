"""The two kinds of failure pdmux reports, and how their messages quote user input.

The core raises these; the CLI catches them once (``pdmux_cli.cli``) and turns each into a single
line on stderr with the exit code the class carries. Nothing below the CLI prints or exits.

The core also returns what it notices as data, :class:`Finding` (a code, its values, the parameter at
fault), and names parameters in its errors by their Python names (``InputError(..., param="tp")``):
the English of a finding and the command-line flag of a parameter live in one rendering module,
:mod:`pdmux_cli.messages`.
"""

from __future__ import annotations

import reprlib
import string
from dataclasses import dataclass, field
from typing import Any, TypeVar


@dataclass(frozen=True, eq=True)
class Finding:
    """Something the core noticed and the user should read: a note, a refusal's reason, a hint.

    ``code``: what was found (``"estimate.kv_pool_short"``; :mod:`pdmux_cli.messages` maps each code to
    its sentence). ``values``: the numbers and names the sentence quotes (units in the keys: ``_ms``,
    ``_bytes``, ``_gib``), JSON-like. ``param``: the parameter at fault or to change, by its Python name
    (``"tp"``, ``"disagg_tp"``: a request field and keyword of the API), or ``None``; the CLI renders it
    as its flag. No English here: the rendering layer owns it.
    """

    code: str
    values: dict[str, Any] = field(default_factory=dict)
    param: str | None = None

    __hash__ = None  # type: ignore[assignment]  # values is a dict

    def __str__(self) -> str:
        from ..messages import render  # lazy: the core never needs the English, only str() does

        return render(self)


class _Flags:
    """``{flag.NAME}`` in an error's template: ``names(NAME)`` after the error's aliases
    (:meth:`PdmuxError.retargeted`)."""

    def __init__(self, names: Any, aliases: dict[str, str]) -> None:
        self._names, self._aliases = names, aliases

    def __getattr__(self, name: str) -> str:
        return self._names(self._aliases.get(name, name))


_FORMATTER = string.Formatter()
_E = TypeVar("_E", bound="PdmuxError")


class PdmuxError(Exception):
    """Base class: a failure with a one-line, user-facing message.

    ``exit_code`` is what the CLI exits with (1 for runtime failures). The message may be a template that
    names parameters by their Python names (:meth:`__init__`), for every kind of failure: bad input
    (:class:`InputError`) and runtime failures (:class:`DeviceError`) alike.
    """

    exit_code = 1
    #: Who reads the message: ``"cli"`` (parameters named by their flags, ``--tp``) or ``"api"`` (by their
    #: keywords, ``tp``); the Python API sets ``"api"`` on what it raises (:meth:`for_api`).
    audience = "cli"

    def __init__(self, message: str = "", *, param: str | None = None, values: dict[str, Any] | None = None,
                 prefix: str = "", aliases: dict[str, str] | None = None) -> None:
        """``message``: the one line; with ``values`` (possibly empty) a template whose ``{NAME}`` fields
        are ``values[NAME]`` and whose ``{flag.NAME}`` fields name a parameter by its Python name (the
        request field, the API keyword: ``tp``, ``disagg_tp``; ``{param_flag}``: ``param``'s); the rendering
        layer turns each into its CLI flag (:func:`pdmux_cli.messages.error_text`, which ``str()`` uses) or
        leaves the Python name (:func:`pdmux_cli.messages.api_error_text`). User text belongs in ``values``,
        never in a template. ``param``: the parameter at fault (or, for a runtime failure, the one to
        change), or ``None``. ``prefix``: text before the message (``"what: "``), kept apart so that a
        wrapped error keeps its template. ``aliases``: parameter renames (:meth:`retargeted`)."""
        self.template = message
        self.values = values
        self.param = param
        self.prefix = prefix
        self.aliases = dict(aliases or {})
        super().__init__(message)

    def __str__(self) -> str:
        if self.values is None:
            text = self.prefix + self.template
        else:
            from ..messages import api_error_text, error_text  # lazy: flag names live in the rendering module

            text = api_error_text(self) if self.audience == "api" else error_text(self)
        # the CLI escapes what it prints (cli/common.py); the API's line is escaped here: one line even
        # where it quotes a path or name holding a newline
        return printable(text) if self.audience == "api" else text

    def for_api(self: _E) -> _E:
        """This error, its message naming parameters by their keywords (``str()``; :attr:`audience`) and
        user text holding control characters escaped (:func:`printable`, as the CLI prints it): what the
        Python API raises."""
        self.audience = "api"
        return self

    def text(self, names: Any) -> str:
        """The message with each ``{flag.NAME}`` as ``names(NAME)`` (after :attr:`aliases`)."""
        if self.values is None:
            return self.prefix + self.template
        flags = _Flags(names, self.aliases)
        own = getattr(flags, self.param) if self.param else ""
        return self.prefix + _FORMATTER.vformat(
            self.template, (), {**self.values, "flag": flags, "param_flag": own}
        )

    def prefixed(self: _E, prefix: str) -> _E:
        """This error with ``prefix`` before its message (``"task: "``), its template and parameter kept."""
        return self._same(type(self)(self.template, param=self.param, values=self.values,
                                     prefix=prefix + self.prefix, aliases=self.aliases))

    def _same(self: _E, other: _E) -> _E:
        other.audience = self.audience
        return other

    def retargeted(self: _E, aliases: dict[str, str], **values: Any) -> _E:
        """This error about another parameter with the same rules: each ``{flag.OLD}`` read as ``NEW``
        (``{"tp": "disagg_tp"}``: a TP value refused for disaggregation's instances), ``param`` likewise,
        and ``values`` replacing those of the same name that the template has (``sglang_tp="TP"``)."""
        merged = None if self.values is None else {**self.values,
                                                     **{k: v for k, v in values.items() if k in self.values}}
        return self._same(type(self)(self.template,
                                     param=aliases.get(self.param, self.param) if self.param else None,
                                     values=merged, prefix=self.prefix, aliases={**self.aliases, **aliases}))

    def __reduce__(self) -> Any:  # across a process pool or Ray: the template and parameter kept
        return _rebuild_error, (
            type(self),
            self.template,
            self.param,
            self.values,
            self.prefix,
            self.aliases,
            self.audience,
        )


def _rebuild_error(cls: type, template: str, param: str | None, values: dict[str, Any] | None,
                   prefix: str, aliases: dict[str, str], audience: str = "cli") -> PdmuxError:
    exc = cls.__new__(cls)
    PdmuxError.__init__(exc, template, param=param, values=values, prefix=prefix, aliases=aliases)
    exc.audience = audience
    return exc


class InputError(PdmuxError, ValueError, TypeError):
    """Bad user input: unknown GPU or model, malformed file, impossible sizes. The CLI exits 2.

    A :class:`ValueError` and a :class:`TypeError` both: a caller of the Python API catching either (a wrong
    value, a value of the wrong type: ``tp=True``, ``trace=1``) catches it.

    Also used where SGLang itself refuses a configuration at start-up (no valid SM partition,
    unsupported compute capability): for pdmux's user that is an input problem to fix. Its message is a
    template like any :class:`PdmuxError`'s (``InputError("{flag.tp} must be ...", param="tp", values=...)``).
    """

    exit_code = 2


class DeviceError(PdmuxError, RuntimeError):
    """A runtime failure outside the user's input: no GPU, driver too old, out of memory. Exit 1.

    Its message may be a template (:class:`PdmuxError`): an out-of-memory error names the parameters to
    make smaller (``param="gemm_shape"``, ``{flag.buffer_bytes}``), the CLI as flags, the API as keywords.
    """

    exit_code = 1


_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40
#: Longest quoted value in a message (characters).
SHORT_REPR_CHARS = 120


def short_repr(value: object) -> str:
    """``repr(value)`` cut to at most :data:`SHORT_REPR_CHARS` characters (nested lists after 2
    levels and 4 items, strings after 80 characters, integers after 40 digits), for messages that
    quote user input: a YAML alias bomb stands for billions of items."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int past Python's 4300-digit str() limit
        return "<a number too long to print>"
    return text if len(text) <= SHORT_REPR_CHARS else text[: SHORT_REPR_CHARS - 3] + "..."


def printable(text: str) -> str:
    """``text`` with every character Python does not call printable (controls such as ESC, NUL, CR
    and BEL, format characters such as the bidi override U+202E, separators other than the space)
    written as escapes (``\\x1b``, ``\\u202e``): user text shown on a terminal can then
    neither restyle it nor reorder what it shows."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
