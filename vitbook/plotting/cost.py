"""Figures of what attention costs: which pairs it scores, its time and memory, axial attention.

See chapter: The cost of attention and axial attention.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = ["plot_attention_cost", "plot_attention_masks", "plot_axial_crossover"]

COLOURS = ("tab:red", "tab:blue", "tab:green")


@book_figure
def plot_attention_masks(masks: Mapping[str, torch.Tensor]) -> Figure:
    """The (query, key) pairs that attention scores: one (N, N) table per kind of layer.

    ``masks``: title -> (N, N) bool (True: query i may attend to key j), 1 to 3 tables.

    Example:
        >>> from vitbook import axial_attention_mask
        >>> fig = plot_attention_masks({"rows": axial_attention_mask((2, 3), "rows")})
        >>> fig.axes[0].get_title()
        'rows\\n18 pairs'

    See chapter: The cost of attention and axial attention.
    """
    if not 1 <= len(masks) <= 3:
        raise ValueError(f"{len(masks)} masks; pass 1 to 3 (panels side by side).")
    fig = new_figure(COLUMN_WIDTH, 2.9, layout="constrained")
    axes = fig.subplots(1, len(masks), squeeze=False)[0]
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        n = mask.shape[-1]
        ax.imshow(mask.cpu().numpy(), cmap="Blues", vmin=0, vmax=1.3)
        ax.set(title=f"{title}\n{int(mask.sum())} pairs", xlabel="key patch $j$")
        ticks = range(0, n, max(1, n // 4))
        ax.set(xticks=ticks, yticks=ticks)
    axes[0].set_ylabel("query patch $i$")
    return fig


@book_figure
def plot_attention_cost(
    token_counts: Sequence[int],
    costs: Mapping[str, Mapping[str, Sequence[float]]],
    exponents: Mapping[str, Mapping[str, float]],
) -> Figure:
    """Time and peak memory of attention against the number of tokens, on log-log axes.

    ``costs``: implementation -> ``{"seconds", "bytes"}``, one value per N; ``exponents``:
    implementation -> ``{"time", "memory"}`` slopes for the legends.

    Example:
        >>> costs = {"fused": {"seconds": [1e-3, 4e-3], "bytes": [1e5, 2e5]}}
        >>> fig = plot_attention_cost([256, 512], costs, {"fused": {"time": 2, "memory": 1}})
        >>> [ax.get_title() for ax in fig.axes]
        ['time of one head', 'peak memory of one head']

    See chapter: The cost of attention and axial attention.
    """
    counts = np.asarray(token_counts, dtype=float)
    fig = new_figure(COLUMN_WIDTH, 3.3, layout="constrained")
    time_ax, memory_ax = fig.subplots(1, 2)
    for (name, cost), colour in zip(costs.items(), COLOURS, strict=False):
        slopes = exponents[name]
        time_ax.loglog(
            counts,
            np.asarray(cost["seconds"]) * 1e3,
            "o-",
            color=colour,
            label=f"{name} (slope {slopes['time']:.2f})",
        )
        memory_ax.loglog(
            counts,
            np.asarray(cost["bytes"]) / 1e6,
            "o-",
            color=colour,
            label=f"{name} (slope {slopes['memory']:.2f})",
        )
    memory_ax.loglog(counts, 4 * counts**2 / 1e6, "k:", label="$N \\times N$ table")
    time_ax.set(xlabel="tokens $N$", ylabel="milliseconds", title="time of one head")
    memory_ax.set(xlabel="tokens $N$", ylabel="MB", title="peak memory of one head")
    for ax in (time_ax, memory_ax):
        ax.set_xticks(counts, [str(n) for n in token_counts])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.legend()
        ax.grid(alpha=0.3, which="both")
    return fig


@book_figure
def plot_axial_crossover(
    grid_sides: Sequence[int],
    seconds: Mapping[str, Sequence[float]],
    macs: Mapping[str, Sequence[float]],
    crossover: int | None = None,
) -> Figure:
    """Measured time of full and axial attention against the grid side, beside their MACs.

    ``seconds`` and ``macs``: name -> one value per grid side G; MACs are drawn dotted, scaled to
    the first name's last time; ``crossover`` is marked dashed.

    Example:
        >>> sides = [2, 4, 8]
        >>> fig = plot_axial_crossover(
        ...     sides, {"full": [1e-4, 1e-3, 1e-2], "axial": [2e-4, 1e-3, 4e-3]},
        ...     {"full": [32, 512, 8192], "axial": [32, 256, 2048]}, crossover=4
        ... )
        >>> fig.axes[0].get_xlabel()
        'grid side $G$ ($N = G^2$ tokens)'

    See chapter: The cost of attention and axial attention.
    """
    sides = np.asarray(grid_sides, dtype=float)
    first = next(iter(seconds))
    scale = seconds[first][-1] * 1e3 / macs[first][-1]
    fig = new_figure(COLUMN_WIDTH, 3.4, layout="constrained")
    ax = fig.subplots()
    for (name, measured), colour in zip(seconds.items(), COLOURS[::2], strict=False):
        ax.loglog(sides, np.asarray(measured) * 1e3, "o-", color=colour, label=f"{name}, measured")
        ax.loglog(
            sides,
            np.asarray(macs[name], dtype=float) * scale,
            ":",
            color=colour,
            label=f"{name}, MACs (scaled)",
        )
    if crossover is not None:
        ax.axvline(crossover, color="grey", lw=0.8, ls="--")
        ax.annotate(
            f"crossover\n{crossover} x {crossover}",
            (crossover, 0),
            color="grey",
            xytext=(4, 6),
            textcoords="offset points",
            xycoords=("data", "axes fraction"),
            fontsize=8,
        )
    ax.set(
        xlabel="grid side $G$ ($N = G^2$ tokens)",
        ylabel="milliseconds",
        title="full versus axial attention, one head",
    )
    ax.set_xticks(sides, [str(g) for g in grid_sides])
    ax.tick_params(axis="x", which="minor", labelbottom=False)
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return fig
