"""What every function of the Python API shares: errors worded for a Python caller, and the progress
callback checked."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pdmux_cli.util.errors import InputError, PdmuxError, short_repr

_F = TypeVar("_F", bound=Callable[..., Any])


def api_function(function: _F) -> _F:
    """``function`` raising its :class:`~pdmux_cli.util.errors.PdmuxError` (an ``InputError``: exit 2 for the
    CLI) with the message naming parameters by their keywords (``tp``), not the CLI's flags (``--tp``)."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except PdmuxError as exc:
            exc.for_api()
            raise

    return call  # type: ignore[return-value]


def check_progress(progress: Any) -> Any:
    """``progress`` (a :data:`pdmux_cli.workflows.progress.ProgressFactory`: a callable, or ``None``);
    :class:`InputError` naming ``progress`` for anything else."""
    if progress is not None and not callable(progress):
        raise InputError("{param_flag} takes a callable (a ProgressFactory) or None, got {value}",
                         param="progress", values={"value": short_repr(progress)})
    return progress
