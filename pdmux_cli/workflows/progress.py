"""How a workflow reports progress without printing: an optional callback the caller supplies.

A :data:`ProgressFactory` is called once a run knows its size, ``factory(total, label)``, and returns a
:class:`ProgressTask` (the CLI's is a rich bar on stderr) or ``None`` (nothing shown). The workflow
enters the task around the run and calls :meth:`ProgressTask.advance` as work finishes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol


class ProgressTask(Protocol):
    """One bar: a context manager (shown while entered)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def advance(self, done: int, total: int | None = None) -> None:
        """``done`` units of work finished (of ``total``, when the estimate changed)."""
        ...

    def describe(self, label: str) -> None:
        """Replace the bar's label (e.g. the decode steps taken of the budget)."""
        ...


#: ``factory(total, label) -> ProgressTask | None``: ``total`` units of work (a guess where the run
#: corrects it through :meth:`ProgressTask.advance`), ``label`` what is being done.
ProgressFactory = Callable[[int, str], "ProgressTask | None"]


def start(factory: ProgressFactory | None, total: int, label: str) -> ProgressTask | None:
    """``factory(total, label)``, or ``None`` without a factory."""
    return factory(total, label) if factory is not None else None


def entered(task: ProgressTask | None) -> Any:
    """A context manager for ``task`` (a no-op for ``None``)."""
    return task if task is not None else contextlib.nullcontext()
