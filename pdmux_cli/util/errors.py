"""The two kinds of failure pdmux reports, and how their messages quote user input.

The core raises these; the CLI catches them once (``pdmux_cli.cli``) and turns each into a single
line on stderr with the exit code the class carries. Nothing below the CLI prints or exits.
"""

from __future__ import annotations

import reprlib


class PdmuxError(Exception):
    """Base class: a failure with a one-line, user-facing message.

    ``exit_code`` is what the CLI exits with (1 for runtime failures).
    """

    exit_code = 1


class InputError(PdmuxError, ValueError):
    """Bad user input: unknown GPU or model, malformed file, impossible sizes. The CLI exits 2.

    Also used where SGLang itself refuses a configuration at start-up (no valid SM partition,
    unsupported compute capability): for pdmux's user that is an input problem to fix.
    """

    exit_code = 2


class DeviceError(PdmuxError, RuntimeError):
    """A runtime failure outside the user's input: no GPU, driver too old, out of memory. Exit 1."""

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
