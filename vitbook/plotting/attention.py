"""Figures of attention: where one query looks, and which patches reach it.

See chapters: Multi-head attention; Positional encodings; The cost of attention and axial attention.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from vitbook import _checks
from vitbook.axial import axial_attention_mask
from vitbook.plotting._draw import HIGHLIGHT, grid_index, image_array, patch_box, show_pixels
from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_attention_map", "plot_axial_reach", "plot_query_weights"]


@book_figure
def plot_attention_map(
    image: torch.Tensor,
    weights: torch.Tensor,
    query: int,
    *,
    title: str = "",
    vmax: float | None = None,
) -> Figure:
    """Where one query patch looks: its attention weights over the patches, beside the image.

    ``image`` (C, H, W) in [0, 1]; ``weights`` (Gh, Gw), the query's row over the patch keys;
    ``query`` is outlined. ``vmax`` tops the square-root colour scale (default: the largest
    weight); frames that are compared should share it.

    Example:
        >>> weights = torch.full((2, 3), 1 / 6)
        >>> fig = plot_attention_map(torch.rand(3, 32, 48), weights, query=4, title="uniform")
        >>> len(fig.axes)  # image, map, colour bar
        3

    See chapter: Multi-head attention.
    """
    pixels = image_array("image", image)
    weights = _checks.tensor("weights", weights, 2, "(Gh, Gw)").detach().float().cpu()
    gh, gw = weights.shape
    h, w = pixels.shape[:2]
    if h % gh or w % gw or h // gh != w // gw:
        raise ValueError(
            f"weights of a {gh}x{gw} grid do not tile an image of {h}x{w} pixels with square "
            "patches; pass the attention reshaped to the model's (Gh, Gw) grid."
        )
    query = grid_index("query", query, gh, gw)
    fig = new_figure(6.8, 3.3)
    left = fig.add_axes((0.01, 0.04, 0.40, 0.82))
    right = fig.add_axes((0.44, 0.04, 0.40, 0.82))
    show_pixels(left, pixels)
    patch_box(left, query, gw, size=h // gh)
    left.set_title(f"query: patch {query} (row {query // gw}, col {query % gw})", fontsize=10)
    top = float(weights.max()) if vmax is None else float(vmax)
    if not top > 0:
        raise ValueError(f"vmax={vmax} must be positive: attention weights lie in 0 .. 1.")
    norm = PowerNorm(0.5, vmin=0, vmax=top)
    shown = right.imshow(weights.numpy(), cmap="magma", norm=norm, interpolation="nearest")
    patch_box(right, query, gw, edgecolor="#3ec1d3")
    right.set_title(f"{title + ': ' if title else ''}attention weights", fontsize=10)
    bar = fig.colorbar(shown, cax=fig.add_axes((0.86, 0.08, 0.02, 0.74)))
    bar.set_label(f"weight (square-root scale, 0 .. {top:.2g})")
    for ax in (left, right):
        ax.set_xticks([])
        ax.set_yticks([])
    return fig


@book_figure
def plot_axial_reach(grid_size: int | tuple[int, int], query: int) -> Figure:
    """Which patches can influence one patch's output: full versus axial attention.

    Three grids: one full layer, one row layer, a row then a column layer (the relays darker);
    counts in the titles. ``query`` is a row-major patch index.

    Example:
        >>> fig = plot_axial_reach((3, 5), query=7)
        >>> [ax.get_title().splitlines()[1] for ax in fig.axes]
        ['reaches 15 of 15', 'reaches 5 of 15', 'reaches 15 of 15']

    See chapter: The cost of attention and axial attention.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    query = grid_index("query", query, gh, gw)
    rows = axial_attention_mask((gh, gw), "rows").float()  # (N, N): i and j share a row
    cols = axial_attention_mask((gh, gw), "cols").float()
    row_layer = rows[query]  # inputs that reach the query through one row layer: its row
    # Row layer, then column layer: the query reads its column, each of which has read its row.
    two_layers = ((cols @ rows)[query] > 0).float()
    panels = [  # 1: reached; 2: a relay, reached and passing its row on to the query
        ("full attention, 1 layer", torch.ones(gh * gw)),
        ("axial, 1 layer (its row)", row_layer),
        ("axial, 2 layers (row, then column)", two_layers + cols[query]),
    ]
    fig = new_figure(6.8, 3.0)
    axes = fig.subplots(
        1, 3, gridspec_kw={"left": 0.01, "right": 0.99, "bottom": 0.03, "top": 0.8, "wspace": 0.08}
    )
    for ax, (name, reach) in zip(axes, panels, strict=True):
        ax.imshow(reach.reshape(gh, gw).numpy(), cmap="Blues", vmin=-0.4, vmax=2.6)
        ax.vlines(np.arange(1, gw) - 0.5, -0.5, gh - 0.5, color="white", linewidth=1)
        ax.hlines(np.arange(1, gh) - 0.5, -0.5, gw - 0.5, color="white", linewidth=1)
        ax.set_xticks([])
        ax.set_yticks([])
        row, col = divmod(query, gw)
        ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, color=HIGHLIGHT))
        ax.text(col, row, "q", ha="center", va="center", color="white", fontweight="bold")
        ax.set_title(f"{name}\nreaches {int((reach > 0).sum())} of {gh * gw}", fontsize=10)
    return fig


@book_figure
def plot_query_weights(
    weights: torch.Tensor,
    grid_size: int | tuple[int, int],
    queries: list[int],
    *,
    label: str = "attention weight",
) -> Figure:
    """The attention weights of a few query patches, each drawn on the patch grid, one scale.

    ``weights`` (N, N), N = Gh * Gw, no class token; ``queries``: one to four patches, outlined.
    One linear colour scale from 0.

    Example:
        >>> fig = plot_query_weights(torch.full((6, 6), 1 / 6), (2, 3), [0, 4])
        >>> [ax.get_title() for ax in fig.axes[:2]]
        ['query 0 (row 0, col 0)', 'query 4 (row 1, col 1)']

    See chapter: Positional encodings.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    weights = _checks.tensor("weights", weights, 2, "(N, N)").detach().float().cpu()
    if tuple(weights.shape) != (gh * gw, gh * gw):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not match the {gh}x{gw} grid; pass "
            f"the ({gh * gw}, {gh * gw}) weights between patches (no class token)."
        )
    if not 1 <= len(queries) <= 4:
        raise ValueError(f"queries={queries} must list one to four patches, one per panel.")
    queries = [grid_index("query", q, gh, gw) for q in queries]
    top = float(weights[queries].max())
    fig = new_figure(6.8, 2.9, layout="constrained")
    axes = fig.subplots(1, len(queries), squeeze=False)[0]
    for ax, q in zip(axes, queries, strict=True):
        row, col = divmod(q, gw)
        shown = ax.imshow(weights[q].reshape(gh, gw).numpy(), cmap="magma", vmin=0, vmax=top)
        patch_box(ax, q, gw, edgecolor="#3ec1d3")
        ax.set_title(f"query {q} (row {row}, col {col})")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(shown, ax=list(axes), shrink=0.85, label=f"{label} (0 .. {top:.2g})")
    return fig
