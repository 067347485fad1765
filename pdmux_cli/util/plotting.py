"""The one way pdmux draws a PNG: matplotlib's object API on the Agg canvas (no pyplot, no display),
imported only when a plot is asked for, library warnings kept off stderr, the file written whole or
not at all (:func:`pdmux_cli.util.atomic.atomic_output`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .atomic import atomic_output
from .errors import InputError, PdmuxError

#: What to install for ``--plot`` (pyproject.toml's ``plot`` extra).
PLOT_INSTALL = "pip install 'pdmux[plot]' (or pip install matplotlib)"


def agg_classes() -> tuple[Any, Any]:
    """matplotlib's ``FigureCanvasAgg`` and ``Figure``, imported on first use.

    ``MPLBACKEND`` is not consulted: pdmux draws on the Agg canvas and never uses a display backend,
    but matplotlib validates the variable when it is imported and raises ``ValueError`` for a name it
    does not know (``MPLBACKEND=frob``); the import runs without it, and without the warning matplotlib
    logs when ``MPLCONFIGDIR`` cannot be written (it uses a temporary folder then). Raises :class:`InputError`
    when matplotlib is not installed (naming the ``pdmux[plot]`` extra) and :class:`PdmuxError` (exit 1)
    when it is installed but fails to import.
    """
    import logging
    import os

    saved = os.environ.pop("MPLBACKEND", None)
    logger = logging.getLogger("matplotlib")
    level = logger.level
    # its import logs a warning when MPLCONFIGDIR is not writable: not ours to show
    logger.setLevel(logging.ERROR)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("{flag.plot} needs matplotlib: {install}", param="plot",
                         values={"install": PLOT_INSTALL}) from None
    except Exception as exc:  # noqa: BLE001 - a broken installation or matplotlibrc: one line, exit 1
        raise PdmuxError("{flag.plot}: matplotlib failed to start ({detail}); check its installation and "
                         "matplotlibrc", param="plot",
                         values={"detail": " ".join(str(exc).split())[:200]}) from None
    finally:
        logger.setLevel(level)
        if saved is not None:
            os.environ["MPLBACKEND"] = saved
    return FigureCanvasAgg, Figure


@contextmanager
def png_figure(path: str | Path, figsize: tuple[float, float], title: str = "") -> Iterator[Any]:
    """Yield a matplotlib ``Figure`` (``figsize`` in inches) to draw on; when the block ends without
    an error, lay it out and write it to ``path`` as a PNG (110 dpi). ``title``: wrapped to 100
    characters above the panels.

    Raises :class:`InputError` when matplotlib is not installed or ``path``'s folder does not exist
    (:func:`agg_classes`).
    """
    import textwrap

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    canvas_class, figure_class = agg_classes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a log axis with one point: matplotlib warns, the plot is fine
        fig = figure_class(figsize=figsize, dpi=110)
        canvas_class(fig)
        yield fig
        if title:
            fig.suptitle(textwrap.fill(title, 100), fontsize=8)
        fig.tight_layout()
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format="png")
