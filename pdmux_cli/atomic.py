"""Output files written whole or not at all: a temporary file in the target's folder, then a rename.

Used by every command that writes a file (YAML, JSON, CSV, PNG). The finished file gets the
permissions a plain ``open(path, "w")`` would give (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on any error
    (Ctrl-C included) it is removed and ``path`` is left as it was.

    Raises :class:`InputError` when the folder does not exist, is not writable, or ``path`` is a
    directory.
    """
    import tempfile  # lazily: only commands that write files pay for it

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a directory")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise InputError(f"cannot write {target}: {e.strerror}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all; returns the path."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
