"""The book's figure style: one call at the top of a chapter.

Figures of :mod:`calib.plots` are at most 7 in wide (the text column) and set their own
font sizes (never below 9 pt). :func:`book_style` makes matplotlib's defaults agree, for
anything a chapter adds to a figure, and asks IPython for SVG, a vector format that stays
sharp at any zoom and is displayed at its true size, so 9 pt reads as 9 pt.
"""
from __future__ import annotations

import matplotlib

__all__ = ["book_style", "MIN_FONT", "MAX_WIDTH"]

MIN_FONT = 9.0  #: smallest font size in a figure, in points
MAX_WIDTH = 7.0  #: widest figure, in inches (the book's text column)

_RC = {
    "font.size": 10.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": MIN_FONT,
    "xtick.labelsize": MIN_FONT,
    "ytick.labelsize": MIN_FONT,
    "legend.fontsize": MIN_FONT,
    "figure.titlesize": 11.0,
    "figure.figsize": (6.0, 3.8),
    "svg.fonttype": "path",
}


def book_style(svg: bool = True) -> None:
    """Apply the book's matplotlib defaults; with ``svg`` (and under IPython), show figures
    as SVG. Safe to call outside a notebook, where only the defaults change."""
    if not isinstance(svg, bool):
        raise TypeError(f"svg must be a bool, got {type(svg).__name__}")
    matplotlib.rcParams.update(_RC)
    if not svg:
        return
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with every notebook kernel
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("svg")
