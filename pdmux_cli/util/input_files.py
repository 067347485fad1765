"""The checks every user-given input file goes through before a loader parses it.

Model configs, pdmux YAMLs, calibration files, GPU profiles and traces are all refused the same way,
with one :class:`~pdmux_cli.util.errors.InputError` line of the form ``"{what} {path}: {problem}"``
(``what`` names the kind of file, e.g. ``"pdmux config"``), optionally followed by ``"; {hint}"``
saying what to give instead. Special files (devices, pipes, sockets) are refused before they are
opened, so a fifo never blocks and ``/dev/zero`` is never read. Stdlib only: the planning
commands import this at start-up.

Sizes are in bytes.
"""

from __future__ import annotations

import stat
from pathlib import Path

from .errors import InputError


def stat_mode(path: str | Path) -> int | None:
    """``path``'s ``st_mode`` (symlinks followed), or ``None`` when it cannot be looked at for any reason:
    missing, a name too long for the file system (ENAMETOOLONG, which ``Path.is_dir`` raises on
    Python < 3.14), a folder on the way without permission, a NUL byte. For the "is it a file or a
    name?" questions (``--model``, ``--gpu``, outputs) that must not fail with an exit-1 ``OSError``."""
    try:
        return Path(path).stat().st_mode
    except (OSError, ValueError):
        return None


def expand_user(path: str | Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded, as the shell does; as written where there is no
    such user or home (``Path.expanduser`` raises ``RuntimeError`` for ``~0``: a name, not a path, then)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def is_dir(path: str | Path) -> bool:
    """True when ``path`` is a directory (:func:`stat_mode`; never raises)."""
    mode = stat_mode(path)
    return mode is not None and stat.S_ISDIR(mode)


def is_file(path: str | Path) -> bool:
    """True when ``path`` is a regular file (:func:`stat_mode`; never raises)."""
    mode = stat_mode(path)
    return mode is not None and stat.S_ISREG(mode)


def exists(path: str | Path) -> bool:
    """True when ``path`` can be looked at (:func:`stat_mode`; never raises)."""
    return stat_mode(path) is not None


#: The first two bytes of a gzip file (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"

#: What is wrong with a gzip file where pdmux reads text (traces alone are read through gzip).
GZIPPED = "gzip-compressed, and pdmux reads this file as text: gunzip it first"


def _refusal(path: str | Path, what: str, problem: str, hint: str) -> InputError:
    return InputError(f"{what} {path}: {problem}" + (f"; {hint}" if hint else ""))


def _size_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that divides it exactly (``10 MiB``, ``1,500 bytes``)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} byte" if n == 1 else f"{n:,} bytes"


def unreadable(path: str | Path, what: str, exc: OSError | UnicodeDecodeError, hint: str = "") -> InputError:
    """The :class:`InputError` for a failed read of ``path``: ``cannot read it (<strerror>)`` for an
    :class:`OSError`, ``not UTF-8 text`` for a :class:`UnicodeDecodeError`. Returned, not raised, so a
    loader that streams its file (``simulate/traces.py``) reports read errors the same way."""
    if isinstance(exc, UnicodeDecodeError):
        return _refusal(path, what, "not UTF-8 text", hint)
    return _refusal(path, what, f"cannot read it ({exc.strerror or exc})", hint)


def check_input_file(path: str | Path, what: str, hint: str = "") -> Path:
    """``path`` as a :class:`~pathlib.Path`, once it is known to be an existing regular file.

    Only ``stat`` is called (symlinks followed): nothing is opened. Raises :class:`InputError`, one
    line ``"{what} {path}: ..."`` (plus ``"; {hint}"`` when given), when ``path`` does not exist
    (``no such file``), is a directory (``is a directory``), is anything else that is not a regular
    file (``is not a regular file (a device, pipe or socket)``), or cannot be looked at
    (``cannot read it (<strerror>)``, e.g. a folder on the way without search permission).
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise _refusal(path, what, "no such file", hint) from None
    except OSError as exc:
        raise unreadable(path, what, exc, hint) from None
    if stat.S_ISDIR(mode):
        # '' reaches here as '.' (Path('') is the current folder): say what was probably typed
        problem = "is a directory (an empty path is the current folder): give a file" if str(path) in (
            "", ".") else "is a directory"
        raise _refusal(path, what, problem, hint)
    if not stat.S_ISREG(mode):
        raise _refusal(path, what, "is not a regular file (a device, pipe or socket)", hint)
    return p


def read_input_bytes(path: str | Path, what: str, max_bytes: int, hint: str = "") -> bytes:
    """The whole content of the regular file ``path``, at most ``max_bytes`` bytes.

    Reads at most ``max_bytes + 1`` bytes, so an oversized file is never loaded whole. Raises
    :class:`InputError` (one line naming ``path``) for everything :func:`check_input_file` refuses,
    a file longer than ``max_bytes`` (``larger than <size>, the most pdmux reads``) and a failed
    open or read (``cannot read it (<strerror>)``, e.g. ``Permission denied``).
    """
    p = check_input_file(path, what, hint)
    try:
        with p.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise unreadable(path, what, exc, hint) from None
    if len(data) > max_bytes:
        raise _refusal(path, what, f"larger than {_size_text(max_bytes)}, the most pdmux reads", hint)
    return data


def read_input_text(path: str | Path, what: str, max_bytes: int, hint: str = "") -> str:
    """The content of the regular file ``path`` decoded as UTF-8 (strict; a BOM is kept).

    ``max_bytes`` limits the encoded size, in bytes. Raises :class:`InputError` (one line naming
    ``path``) for everything :func:`read_input_bytes` refuses, and ``not UTF-8 text`` for bytes
    that are not valid UTF-8 (:data:`GZIPPED` for a gzip file).
    """
    data = read_input_bytes(path, what, max_bytes, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if data.startswith(GZIP_MAGIC):
            raise _refusal(path, what, GZIPPED, hint) from None
        raise unreadable(path, what, exc, hint) from None
