"""Figures of position embeddings: the sine-cosine table and similarity maps.

See chapter: Positional encodings.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from vitbook import _checks
from vitbook.plotting._draw import HIGHLIGHT, grid_index, image_array, patch_box, show_pixels
from vitbook.plotting.style import book_figure, new_figure
from vitbook.positional import sincos_1d

__all__ = [
    "plot_position_similarity",
    "plot_shuffle_test",
    "plot_sincos",
]


@book_figure
def plot_sincos(
    position: int, dimension: int, *, base: float = 10000.0, num_positions: int = 64, dim: int = 64
) -> Figure:
    """The 1D sine-cosine table, one of its channels, and where a position reads it.

    Left, the (N, D) table of :func:`vitbook.sincos_1d` with ``position``'s row and
    ``dimension``'s column outlined; right, that channel against the position.

    Example:
        >>> fig = plot_sincos(position=5, dimension=2, num_positions=16, dim=8)
        >>> [ax.get_xlabel() for ax in fig.axes]
        ['channel', 'position']

    See chapter: Positional encodings.
    """
    table = sincos_1d(num_positions, dim, base=base).numpy()  # (N, D)
    if not 0 <= position < num_positions:
        raise ValueError(f"position={position} is outside 0 .. {num_positions - 1}.")
    if not 0 <= dimension < dim:
        raise ValueError(f"dimension={dimension} is outside 0 .. {dim - 1}.")
    k = dimension // 2
    wavelength = 2 * math.pi * base ** (2 * k / dim)
    fig = new_figure(6.8, 3.2)
    left, right = fig.subplots(
        1,
        2,
        gridspec_kw={
            "left": 0.08,
            "right": 0.98,
            "bottom": 0.15,
            "top": 0.8,
            "wspace": 0.22,
            "width_ratios": [1, 1.3],
        },
    )
    left.imshow(table, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    for edge, width in (("white", 4.0), ("black", 1.8)):  # visible on red and on blue
        left.add_patch(
            Rectangle((-0.5, position - 0.5), dim, 1, fill=False, edgecolor=edge, linewidth=width)
        )
        left.add_patch(
            Rectangle(
                (dimension - 0.5, -0.5),
                1,
                num_positions,
                fill=False,
                edgecolor=edge,
                linewidth=width,
            )
        )
    left.plot([dimension], [position], "o", color=HIGHLIGHT, markersize=9, markeredgecolor="white")
    left.set_xlabel("channel")
    left.set_ylabel("position")
    left.set_title(
        f"sincos_1d({num_positions}, {dim}, base={base:g})\nred +1, blue -1", fontsize=10
    )

    fine = np.linspace(0, num_positions - 1, 400)
    wave = "sin" if dimension % 2 == 0 else "cos"
    right.plot(fine, getattr(np, wave)(fine / base ** (2 * k / dim)), color="0.7", linewidth=1)
    right.plot(np.arange(num_positions), table[:, dimension], "o", color="black", markersize=3)
    right.plot([position], [table[position, dimension]], "o", color=HIGHLIGHT, markersize=10)
    right.set_ylim(-1.15, 1.15)
    right.set_xlim(-1, num_positions)
    right.set_xlabel("position")
    value = table[position, dimension]
    right.set_title(
        f"channel {dimension}: {wave}(pos / {base:g}^({2 * k}/{dim}))\n"
        f"wavelength {wavelength:.3g}; PE[{position}, {dimension}] = {value:+.3f}",
        fontsize=10,
    )
    right.grid(alpha=0.3)
    return fig


@book_figure
def plot_position_similarity(
    embedding: torch.Tensor,
    grid_size: int | tuple[int, int],
    query: int,
    *,
    title: str = "",
    vmin: float = -1.0,
    vmax: float = 1.0,
) -> Figure:
    """Cosine similarity between the position embedding of one patch and those of all patches.

    ``embedding`` (Gh * Gw, D), row-major, no class token; ``vmin``, ``vmax``: the colour
    scale, which compared frames should share.

    Raises:
        ValueError: the embedding does not have one row per patch, or ``query`` is off the grid.

    Example:
        >>> from vitbook import sincos_2d
        >>> fig = plot_position_similarity(sincos_2d((3, 4), 8), (3, 4), query=5, title="2D")
        >>> fig.axes[0].get_title()
        '2D: similarity to patch 5 (row 1, col 1)'

    See chapter: Positional encodings.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    embedding = _checks.tensor("embedding", embedding, 2, "(Gh * Gw, D)")
    if embedding.shape[0] != gh * gw:
        raise ValueError(
            f"embedding has {embedding.shape[0]} rows but grid_size=({gh}, {gw}) has {gh * gw} "
            "patches; drop the class token's row (embedding[1:]) or fix grid_size."
        )
    query = grid_index("query", query, gh, gw)
    unit = torch.nn.functional.normalize(embedding.detach().float(), dim=1)
    similarity = (unit @ unit[query]).reshape(gh, gw).cpu().numpy()  # (Gh, Gw)
    if not vmin < vmax:
        raise ValueError(f"vmin={vmin} must be below vmax={vmax}; e.g. vmin=-1, vmax=1.")
    fig = new_figure(5.0, 4.0)
    ax = fig.add_axes((0.1, 0.12, 0.66, 0.76))
    image = ax.imshow(similarity, cmap="viridis", vmin=vmin, vmax=vmax)
    patch_box(ax, query, gw)
    ax.set_xticks(range(gw))
    ax.set_yticks(range(gh))
    ax.set_xlabel("grid column")
    ax.set_ylabel("grid row")
    row, col = divmod(query, gw)
    ax.set_title(
        f"{title + ': ' if title else ''}similarity to patch {query} (row {row}, col {col})",
        fontsize=10,
    )
    fig.colorbar(
        image,
        cax=fig.add_axes((0.8, 0.12, 0.035, 0.76)),
        label=f"cosine similarity (scale {vmin:.2g} .. {vmax:.2g})",
    )
    return fig


@book_figure
def plot_shuffle_test(
    image: torch.Tensor,
    shuffled: torch.Tensor,
    logits: torch.Tensor,
    logits_shuffled: torch.Tensor,
) -> Figure:
    """A photo, the same photo with its patches shuffled, and a model's logits for both.

    ``image``, ``shuffled`` (C, H, W); ``logits``, ``logits_shuffled`` (num_classes,).

    Example:
        >>> fig = plot_shuffle_test(
        ...     torch.rand(3, 8, 8), torch.rand(3, 8, 8), torch.randn(4), torch.randn(4)
        ... )
        >>> [ax.get_title() for ax in fig.axes]
        ['original', 'patches shuffled', 'logits of the two images']

    See chapter: Positional encodings.
    """
    pictures = [image_array("image", image), image_array("shuffled", shuffled)]
    logits = _checks.tensor("logits", logits, 1, "(num_classes,)").detach().float().cpu()
    logits_shuffled = _checks.tensor("logits_shuffled", logits_shuffled, 1, "(num_classes,)")
    if logits_shuffled.shape != logits.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and logits_shuffled "
            f"{tuple(logits_shuffled.shape)} must have the same shape: one model, two images."
        )
    fig = new_figure(6.8, 2.6, layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.7])
    for ax, pixels, name in zip(axes[:2], pictures, ("original", "patches shuffled"), strict=True):
        show_pixels(ax, pixels)
        ax.set_title(name)
        ax.set_axis_off()
    classes = np.arange(logits.numel())
    bars = axes[2]
    bars.bar(classes - 0.2, logits.numpy(), width=0.4, label="original")
    bars.bar(
        classes + 0.2, logits_shuffled.detach().float().cpu().numpy(), width=0.4, label="shuffled"
    )
    bars.axhline(0, color="0.3", linewidth=0.8)
    bars.set_xticks(classes)
    bars.set_xlabel("class")
    bars.set_ylabel("logit")
    bars.set_title("logits of the two images")
    bars.legend(loc="best")
    return fig
