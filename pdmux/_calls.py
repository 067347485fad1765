"""What every function of the Python API shares: errors worded for a Python caller, and the progress
callback checked."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from pdmux_cli.util.errors import InputError, PdmuxError, short_repr

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # typer's dependency; re-exported to the API's modules (PEP 692 keywords)
    from typing_extensions import Unpack  # noqa: F401

_F = TypeVar("_F", bound=Callable[..., Any])


def api_function(function: _F) -> _F:
    """``function`` raising its :class:`~pdmux_cli.util.errors.PdmuxError` (an ``InputError``: exit 2 for the
    CLI) with the message naming parameters by their keywords (``tp``), not the CLI's flags (``--tp``).

    A function ending in ``**name: Unpack[Keywords]`` (PEP 692: ``Keywords`` a ``TypedDict`` of a shared
    option group, declared beside its request fields) shows each key as a keyword of its signature (default
    ``None``), as editors do; a keyword that is none of them is a ``TypeError``, as Python raises it."""
    signature = _expanded(function)
    known = set(signature.parameters)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        unknown = [name for name in kwargs if name not in known]
        if unknown:
            raise TypeError(f"{function.__name__}() got an unexpected keyword argument {unknown[0]!r}")
        try:
            return function(*args, **kwargs)
        except PdmuxError as exc:
            exc.for_api()
            raise

    call.__signature__ = signature  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def _expanded(function: Callable[..., Any]) -> inspect.Signature:
    """``function``'s signature, a ``**name: Unpack[Keywords]`` parameter replaced by ``Keywords``' keys as
    keyword-only parameters (default ``None``, annotated with their types)."""
    signature = inspect.signature(function)
    params = list(signature.parameters.values())
    last = params[-1] if params else None
    if last is None or last.kind is not inspect.Parameter.VAR_KEYWORD or not isinstance(last.annotation, str):
        return signature
    unpacked = eval(last.annotation, function.__globals__)  # noqa: S307 (the module's own annotation)
    (keywords,) = typing.get_args(unpacked)
    hints = typing.get_type_hints(keywords)
    return signature.replace(parameters=[*params[:-1], *(
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
        for name, hint in hints.items())])


def check_progress(progress: Any) -> Any:
    """``progress`` (a :data:`pdmux_cli.workflows.progress.ProgressFactory`: a callable, or ``None``);
    :class:`InputError` naming ``progress`` for anything else."""
    if progress is not None and not callable(progress):
        raise InputError("{param_flag} takes a callable (a ProgressFactory) or None, got {value}",
                         param="progress", values={"value": short_repr(progress)})
    return progress


def request(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` (a workflow request) from keyword ``values`` (a function's ``locals()``); names that are not
    fields (``progress``) are left out. The request checks and normalises every value
    (:mod:`pdmux_cli.workflows.fields`: paths as :class:`Path`, list options as the CLI's text)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})
