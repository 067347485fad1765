"""The files a workflow reads and writes: which options name input files, and outputs checked up front.

An output is refused when it is one of the inputs (a result written over the trace it came from) or
cannot be written (:func:`pdmux_cli.util.atomic.check_writable`), before a long run, so that the run is not
wasted; outputs are then written whole or not at all (:mod:`pdmux_cli.util.atomic`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def model_file(model: str) -> Path | None:
    """``--model`` when it names an existing file or folder (an input not to overwrite), else ``None``."""
    from ..util.input_files import expand_user, is_dir, is_file

    path = expand_user(model)
    if is_dir(path):
        return path / "config.json"
    return path if is_file(path) else None


def gpu_file(gpu: str | None) -> Path | None:
    """``--gpu`` when it names an existing profile file (an input not to overwrite), else ``None``."""
    if gpu is None:
        return None
    from ..util.input_files import expand_user, is_file

    path = expand_user(gpu.strip())
    return path if is_file(path) else None


def check_outputs(outputs: Iterable[Path | None], inputs: Iterable[Path | None]) -> None:
    """Each of ``outputs`` (``None``: not asked for) is none of ``inputs`` and can be written.

    Raises :class:`~pdmux_cli.util.errors.InputError` naming the first that is not."""
    from ..util.atomic import check_writable, refuse_overwriting_inputs

    inputs = tuple(inputs)
    for path in outputs:
        refuse_overwriting_inputs(path, *inputs)
        check_writable(path)
