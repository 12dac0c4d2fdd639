"""The book's house style for figures: one size, one set of fonts, pictures stored at 2x.

Figures are drawn at :data:`CSS_PX_PER_INCH` = 100 CSS px per inch, at most
:data:`COLUMN_WIDTH` = 6.8 inches wide (the book's 688 px column), stored at :data:`PNG_SCALE`
= 2 times that resolution, with no text under :data:`MIN_FONT_SIZE` = 8 points (11 CSS px).
:func:`use_book_style` applies the style to a notebook's figures; the ``plot_*`` functions use
it regardless (:func:`book_figure`). Nothing changes on import.

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from matplotlib.figure import Figure

__all__ = [
    "COLUMN_WIDTH",
    "CSS_PX_PER_INCH",
    "MIN_FONT_SIZE",
    "PNG_SCALE",
    "STYLE",
    "book_figure",
    "new_figure",
    "use_book_style",
]

CSS_PX_PER_INCH = 100  # figure.dpi: one inch of figure is 100 CSS px on the page
PNG_SCALE = 2  # pictures are stored at twice that and shown at half their pixel size
COLUMN_WIDTH = 6.8  # inches: 680 CSS px, the book's text column (about 688 px)
MIN_FONT_SIZE = 8.0  # points: 11 CSS px as shown

STYLE = {
    "figure.dpi": CSS_PX_PER_INCH,
    "savefig.dpi": CSS_PX_PER_INCH * PNG_SCALE,
    "figure.figsize": (COLUMN_WIDTH, 3.4),
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
    "image.interpolation": "nearest",
}

F = TypeVar("F", bound=Callable[..., Figure])


def use_book_style() -> None:
    """Draw every later figure of this session in the house style, inline and at 2x.

    Sets rcParams to :data:`STYLE`; in a Jupyter kernel also the inline backend, whatever
    ``MPLBACKEND`` says, with 2x PNGs.

    Example:
        >>> use_book_style()
        >>> import matplotlib
        >>> matplotlib.rcParams["figure.dpi"], matplotlib.rcParams["savefig.dpi"]
        (100.0, 200.0)

    See chapter: How the interactive figures work.
    """
    import matplotlib

    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: no inline backend to select
        shell = None
    else:
        shell = get_ipython()
    if getattr(shell, "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")
    matplotlib.rcParams.update(STYLE)


def new_figure(width: float = COLUMN_WIDTH, height: float = 3.4, **kwargs: object) -> Figure:
    """A new figure in the house style, already released by pyplot.

    Raises:
        ValueError: ``width`` is wider than the column.

    Example:
        >>> new_figure(4, 2).get_size_inches().tolist()
        [4.0, 2.0]

    See chapter: How the interactive figures work.
    """
    import matplotlib.pyplot as plt

    if not 0 < width <= COLUMN_WIDTH or not height > 0:
        raise ValueError(
            f"a figure of {width} x {height} inches does not fit the column; use a width of at "
            f"most COLUMN_WIDTH={COLUMN_WIDTH} inches and lay panels out in rows."
        )
    fig = plt.figure(figsize=(width, height), dpi=CSS_PX_PER_INCH, **kwargs)
    plt.close(fig)
    return fig


def book_figure(plot_fn: F) -> F:
    """Decorate a ``plot_*`` function so that it draws in the house style.

    The function runs inside ``matplotlib.rc_context(STYLE)``.

    See chapter: How the interactive figures work.
    """

    @functools.wraps(plot_fn)
    def draw(*args: object, **kwargs: object) -> Figure:
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return plot_fn(*args, **kwargs)

    return draw  # type: ignore[return-value]
