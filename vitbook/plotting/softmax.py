"""Figures of the softmax: how the scale of the logits decides how sharp attention is.

See chapter: Attention.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_softmax_saturation"]

_MEASURES = [  # key, panel title
    ("max weight", "median largest weight"),
    ("entropy", "median entropy (nats)"),
    ("gradient", "median softmax Jacobian norm"),
]
_COLOURS = ["tab:red", "tab:blue", "tab:green", "tab:purple"]


@book_figure
def plot_softmax_saturation(saturation: Mapping[int, Mapping[str, Mapping]], Dh: int) -> Figure:
    """One head width of the scaling experiment: one query's weights, and where Dh sits.

    ``saturation``: head width -> setting -> ``{"max weight", "entropy", "gradient"}`` numbers and
    ``"weights"`` (one query's, sorted descending); ``Dh`` is the key marked. The axes are fixed
    by the whole experiment.

    Example:
        >>> import torch
        >>> stats = {"max weight": 0.5, "entropy": 1.0, "gradient": 0.1,
        ...          "weights": torch.tensor([0.5, 0.3, 0.2])}
        >>> fig = plot_softmax_saturation({1: {"raw": stats}, 4: {"raw": stats}}, Dh=4)
        >>> fig.axes[0].get_title()
        'one query, $D_h$ = 4'

    See chapter: Attention.
    """
    widths = sorted(saturation)
    if Dh not in saturation:
        raise ValueError(f"Dh={Dh} is not one of the head widths measured: {widths}.")
    settings = list(saturation[Dh])
    colours = dict(zip(settings, _COLOURS, strict=False))
    fig = new_figure(6.8, 5.0)  # a fixed layout: drawn once per frame, it must be quick
    grid = {"left": 0.09, "right": 0.98, "bottom": 0.1, "top": 0.94, "hspace": 0.5, "wspace": 0.25}
    first, *curves = fig.subplots(2, 2, gridspec_kw=grid).flat
    for setting in settings:
        top = np.asarray(saturation[Dh][setting]["weights"][:20], dtype=float)
        first.plot(range(1, len(top) + 1), top, "o-", color=colours[setting], ms=3, label=setting)
    first.set(
        ylim=(0, 1.02),
        xlabel="its 20 largest weights, sorted",
        ylabel="weight",
        title=f"one query, $D_h$ = {Dh}",
    )
    first.legend()
    for ax, (key, title) in zip(curves, _MEASURES, strict=True):
        highest = max(saturation[w][s][key] for w in widths for s in settings)
        for setting in settings:
            curve = [saturation[w][setting][key] for w in widths]
            here = saturation[Dh][setting][key]
            ax.plot(widths, curve, "o-", color=colours[setting], ms=3)
            ax.plot([Dh], [here], "o", color=colours[setting], ms=10, alpha=0.5)
        ax.axvline(Dh, color="grey", lw=0.8, ls="--")
        ax.set(xscale="log", ylim=(0, 1.08 * highest), xlabel="head width $D_h$", title=title)
        ticks = [w for w in widths if w in (1, 8, 64, 512)] or widths
        ax.set_xticks(ticks, [str(w) for w in ticks])
    return fig
