"""Output files written whole or not at all: a temporary file in the target's folder, then a rename.

Used by every command that writes a file (YAML, JSON, CSV, PNG). The finished file gets the
permissions a plain ``open(path, "w")`` would give (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError, PdmuxError, short_repr


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode(path: Path, shown: Path) -> int | None:
    """``path``'s ``st_mode``, ``None`` when it does not exist; :class:`InputError` naming ``shown`` when
    it cannot be looked at (a name longer than the file system allows, ENAMETOOLONG; a loop of links)."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise InputError(f"cannot write {short_repr(str(shown))}: {e.strerror or e}") from None


def _is_dir(path: Path, shown: Path) -> bool:
    mode = _mode(path, shown)
    return mode is not None and stat.S_ISDIR(mode)


def check_writable(path: str | Path | None) -> Path | None:
    """The file ``path`` names (through a symlink), when it can be written; ``None`` for ``None``.

    Raises :class:`InputError` when its folder is missing or not writable, it is a directory, device,
    pipe or socket, or its name cannot be a file there (longer than the file system allows). Commands call it before a long run, so that the run is not wasted.
    """
    if path is None:
        return None
    shown = Path(path)
    if os.path.abspath(shown).startswith(("/dev/", "/proc/")):
        # /dev/stdout resolves to whatever stdout is redirected to: a rename would replace that file
        raise InputError(f"cannot write {shown}: it is a device or a stream, not a regular file; give a file path")
    target = Path(os.path.realpath(shown))  # through a symlink to the file it names
    folder = target.parent
    if not _is_dir(folder, shown):
        raise InputError(f"cannot write {shown}: folder {shown.parent} does not exist")
    mode = _mode(target, shown)
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError(f"cannot write {shown}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError(f"cannot write {shown}: it is not a regular file (a device, pipe or socket)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {shown}: folder {shown.parent} is not writable")
    return target


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on any error
    (Ctrl-C included) it is removed and ``path`` is left as it was.

    Raises :class:`InputError` as :func:`check_writable` does.
    """
    import tempfile  # lazily: only commands that write files pay for it

    shown = Path(path)
    target = check_writable(shown)
    folder = target.parent
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise InputError(f"cannot write {shown}: {e.strerror}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise PdmuxError(f"cannot write {shown}: {e.strerror or e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def refuse_overwriting_inputs(output: str | Path | None, *inputs: str | Path | None) -> None:
    """Raise :class:`InputError` when ``output`` is the same file as one of ``inputs``
    (writing a result over the trace or config it was computed from)."""
    if output is None:
        return
    out = Path(os.path.realpath(output))
    for item in inputs:
        if item is not None and Path(os.path.realpath(item)) == out:
            raise InputError(f"output {output} is the input file {item}: choose another output path")


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all; returns the path."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
