"""The one way pdmux draws a PNG: matplotlib's object API on the Agg canvas (no pyplot, no display),
imported only when a plot is asked for, library warnings kept off stderr, the file written whole or
not at all (:func:`pdmux_cli.atomic.atomic_output`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .atomic import atomic_output
from .errors import InputError


@contextmanager
def png_figure(path: str | Path, figsize: tuple[float, float], title: str = "") -> Iterator[Any]:
    """Yield a matplotlib ``Figure`` (``figsize`` in inches) to draw on; when the block ends without
    an error, lay it out and write it to ``path`` as a PNG (110 dpi). ``title``: wrapped to 100
    characters above the panels.

    Raises :class:`InputError` when matplotlib is not installed or ``path``'s folder does not exist.
    """
    import textwrap

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("--plot needs matplotlib (pip install matplotlib)") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a log axis with one point: matplotlib warns, the plot is fine
        fig = Figure(figsize=figsize, dpi=110)
        FigureCanvasAgg(fig)
        yield fig
        if title:
            fig.suptitle(textwrap.fill(title, 100), fontsize=8)
        fig.tight_layout()
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format="png")
