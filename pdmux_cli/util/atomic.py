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


#: Folders under /dev/ that hold regular files (a tmpfs): writing there is writing a file.
_FILE_FOLDERS_IN_DEV = ("/dev/shm",)


def _device_path(path: str) -> bool:
    """Whether ``path`` (absolute, not resolved) names a device or stream: under /dev/ (but not a file
    folder such as /dev/shm) or /proc/. ``/dev/stdout`` resolves to whatever stdout is redirected to, so
    a rename there would replace that file: the name as given decides, and so does every link it goes
    through (a link to /dev/stdout)."""
    def special(text: str) -> bool:
        text = os.path.normpath(text)
        if any(text == f or text.startswith(f + "/") for f in _FILE_FOLDERS_IN_DEV):
            return False
        return text.startswith(("/dev/", "/proc/")) or text in ("/dev", "/proc")

    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's limit on links followed (ELOOP)
        if special(current) or special(os.path.join(os.path.realpath(os.path.dirname(current)),
                                                    os.path.basename(current))):
            return True
        try:
            link = os.readlink(current)
        except OSError:
            return False
        current = os.path.join(os.path.dirname(current), link)
    return False


def check_writable(path: str | Path | None) -> Path | None:
    """The file ``path`` names (through a symlink), when it can be written; ``None`` for ``None``.

    Raises :class:`InputError` when its folder is missing or not writable, it is a directory, device,
    pipe or socket (/dev/shm is a folder of files, not a device), or its name cannot be a file there
    (longer than the file system allows). A symlink whose target's folder is missing names that folder.
    Commands call it before a long run, so that the run is not wasted.
    """
    if path is None:
        return None
    shown = Path(path)
    if str(path).endswith(("/", os.sep)) and str(path).strip("/" + os.sep):
        raise InputError(f"cannot write {short_repr(str(path))}: the name ends with '/', a folder; give a "
                         f"file name (e.g. {short_repr(str(path).rstrip('/' + os.sep) + '/out')})")
    if _device_path(str(shown)):
        raise InputError(f"cannot write {shown}: it is a device or a stream, not a regular file; give a file "
                         "path")
    target = Path(os.path.realpath(shown))  # through a symlink to the file it names
    folder = target.parent
    if not _is_dir(folder, shown):
        if os.path.islink(shown):
            raise InputError(f"cannot write {shown}: it is a symlink to {os.readlink(shown)}, whose folder "
                             f"{folder} does not exist")
        raise InputError(f"cannot write {shown}: folder {shown.parent} does not exist")
    mode = _mode(target, shown)
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError(f"cannot write {shown}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError(f"cannot write {shown}: it is not a regular file (a device, pipe or socket)")
    if not os.access(folder, os.W_OK | os.X_OK):
        where = shown.parent if folder == Path(os.path.realpath(shown.parent)) else folder
        raise InputError(f"cannot write {shown}: folder {where} is not writable")
    return target


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):  # pragma: no cover - no pathconf
        return 255


def _temporary_prefix(name: str, folder: Path) -> str:
    """``.NAME.`` for the temporary file, ``NAME`` cut (at a UTF-8 character boundary) so that the
    temporary name (prefix, 8 random characters, ``.tmp``) fits the file system's limit on a name
    wherever the target's own name does: a 250-byte target is then still writable."""
    room = _name_max(folder) - len(".") - len(".") - 8 - len(".tmp")
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= room:
        return f".{name}."
    cut = raw[:max(room, 1)].decode("utf-8", "ignore") or "out"
    return f".{cut}."


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on any error
    (Ctrl-C, SIGTERM and SIGHUP included: :mod:`pdmux_cli.util.signals`) it is removed and ``path`` is left
    as it was.

    Raises :class:`InputError` as :func:`check_writable` does.
    """
    import tempfile  # lazily: only commands that write files pay for it

    from .signals import deferred

    shown = Path(path)
    target = check_writable(path)
    folder = target.parent
    tmp: Path | None = None
    try:
        with deferred():  # a stop signal waits until the temporary file's name is known, to remove it
            try:
                fd, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(target.name, folder), suffix=".tmp",
                                                dir=folder)
            except OSError as e:
                raise InputError(f"cannot write {shown}: {e.strerror}") from None
            tmp = Path(tmp_name)
            os.close(fd)
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise PdmuxError(f"cannot write {shown}: {e.strerror or e}") from None
    except BaseException:
        if tmp is not None:
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
