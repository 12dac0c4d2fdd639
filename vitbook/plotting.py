"""Figures for the book: plain matplotlib, one function per picture, no widgets.

Every ``plot_*`` function takes tensors and numbers and returns a :class:`matplotlib.figure.Figure`.
The figure is built with pyplot and closed before it is returned, so that Jupyter shows it exactly
once when it is the last value of a cell (and not at all otherwise), and so that figures made in a
loop, for instance the frames of :mod:`vitbook.widgets`, never pile up in pyplot's memory.

Conventions: images are (C, H, W) floats in [0, 1]; patches are numbered in row-major grid order,
patch k sitting at grid row ``k // Gw`` and column ``k % Gw`` (see :mod:`vitbook.patches`).

See chapter: Images as sequences of patches.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from vitbook import _checks
from vitbook.axial import axial_attention_mask
from vitbook.patches import patchify
from vitbook.positional import sincos_1d

__all__ = [
    "plot_attention_map",
    "plot_axial_reach",
    "plot_patch_grid",
    "plot_position_similarity",
    "plot_sincos",
]

HIGHLIGHT = "#e4572e"  # the query patch, the chosen position: one colour for "you are here"


def _figure(width: float, height: float) -> Figure:
    """A new figure, already released by pyplot (see the module docstring).

    Layouts are fixed by hand rather than computed per figure, so that the frames of an
    interactive figure line up exactly: a longer title never moves the axes.
    """
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height))
    plt.close(fig)
    return fig


def _image(name: str, image: object) -> np.ndarray:
    """Check a (C, H, W) float image and return it as an (H, W, C) or (H, W) array to show."""
    image = _checks.tensor(name, image, 3, "(C, H, W)")
    pixels = image.detach().cpu().clamp(0, 1).permute(1, 2, 0).numpy()
    return pixels[..., 0] if pixels.shape[-1] == 1 else pixels


def _show(ax, pixels: np.ndarray) -> None:
    ax.imshow(pixels, cmap="gray" if pixels.ndim == 2 else None, interpolation="nearest")


def _patch_box(ax, k: int, gw: int, size: int = 1, **style) -> None:
    """Outline patch k of a grid drawn with ``size`` pixels per cell (1 for a (Gh, Gw) map)."""
    row, col = divmod(k, gw)
    style = {"edgecolor": HIGHLIGHT, "linewidth": 2.5, **style}
    ax.add_patch(Rectangle((col * size - 0.5, row * size - 0.5), size, size, fill=False, **style))


def _grid_index(name: str, k: int, gh: int, gw: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < gh * gw:
        raise ValueError(
            f"{name}={k!r} is not a patch index of the {gh}x{gw} grid; use 0 .. {gh * gw - 1} "
            "(row-major: k = row * Gw + column)."
        )
    return int(k)


def plot_patch_grid(image: torch.Tensor, patch_size: int, *, num_shown: int = 10) -> Figure:
    """The image cut into P x P patches, and the first patches of the token sequence it becomes.

    Top: the image with the patch grid and the index of each patch (row-major; numbers are drawn
    up to an 8 x 8 grid). Bottom: the sequence that the transformer reads, patch 0 first, with its
    length N and the length C * P * P of each flattened patch vector.

    Args:
        image: (C, H, W) float in [0, 1]; H and W must be multiples of ``patch_size``.
        patch_size: P.
        num_shown: how many patches of the sequence to draw before the last one.

    Raises:
        ValueError / TypeError: as :func:`vitbook.patchify`.

    Example:
        >>> from vitbook.data import sample_image
        >>> fig = plot_patch_grid(sample_image(size=64), patch_size=16)
        >>> fig.axes[0].get_title()
        'P = 16: a 4 x 4 grid of Gh x Gw = 16 patches'

    See chapter: Images as sequences of patches.
    """
    pixels = _image("image", image)
    _checks.positive_int("patch_size", patch_size)
    patches = patchify(image[None].float(), patch_size)[0]  # (N, C * P * P), (c ph pw) order
    c, h, w = image.shape
    gh, gw = h // patch_size, w // patch_size
    n = gh * gw
    shown = list(range(min(num_shown, n - 1))) + [n - 1]

    fig = _figure(6.4, 5.2)
    ax = fig.add_axes((0.05, 0.27, 0.9, 0.66))
    _show(ax, pixels)
    for x in range(0, w + 1, patch_size):
        ax.axvline(x - 0.5, color="white", linewidth=0.8)
    for y in range(0, h + 1, patch_size):
        ax.axhline(y - 0.5, color="white", linewidth=0.8)
    if n <= 64:  # numbers stay readable up to an 8 x 8 grid
        for k in range(n):
            row, col = divmod(k, gw)
            ax.text(
                (col + 0.5) * patch_size,
                (row + 0.5) * patch_size,
                str(k),
                ha="center",
                va="center",
                fontsize=9,
                color="white",
                bbox={
                    "boxstyle": "round,pad=0.15",
                    "facecolor": "black",
                    "alpha": 0.45,
                    "linewidth": 0,
                },
            )
    for k in shown:
        _patch_box(ax, k, gw, size=patch_size, linewidth=1.5)
    ax.set_title(f"P = {patch_size}: a {gh} x {gw} grid of Gh x Gw = {n} patches")
    ax.set_axis_off()

    fig.text(
        0.5,
        0.19,
        f"the sequence: {n} patch tokens, each C x P x P = {c} x {patch_size} x {patch_size} = "
        f"{c * patch_size**2} numbers",
        ha="center",
    )
    slots = [*shown[:-1], None, shown[-1]]
    width = 0.92 / len(slots)
    for i, k in enumerate(slots):
        ax_k = fig.add_axes((0.04 + i * width, 0.02, width * 0.88, 0.11))
        ax_k.set_axis_off()
        if k is None:
            ax_k.text(0.5, 0.5, "...", ha="center", va="center", fontsize=14)
            continue
        _show(ax_k, _image("patch", patches[k].reshape(c, patch_size, patch_size)))
        ax_k.set_title(str(k), fontsize=9)
    return fig


def plot_sincos(
    position: int, dimension: int, *, base: float = 10000.0, num_positions: int = 64, dim: int = 64
) -> Figure:
    """The 1D sine-cosine table, one of its channels, and where a position reads it.

    Left: the (N, D) table of :func:`vitbook.sincos_1d`, positions down, channels across (red +1,
    blue -1), the chosen position's row and channel's column outlined. Right: the chosen channel
    as a function of the position: a sine (even channels) or a cosine (odd) of wavelength
    ``2 pi base**(2k / D)`` for the pair k = channel // 2.

    Args:
        position: the position marked, 0 .. num_positions - 1.
        dimension: the channel drawn, 0 .. dim - 1.
        base, num_positions, dim: as for :func:`vitbook.sincos_1d`.

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
    fig = _figure(7.2, 3.2)
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


def plot_position_similarity(
    embedding: torch.Tensor, grid_size: int | tuple[int, int], query: int, *, title: str = ""
) -> Figure:
    """Cosine similarity between the position embedding of one patch and those of all patches.

    Args:
        embedding: (Gh * Gw, D) position embeddings of the patches, row-major (no class token).
        grid_size: (Gh, Gw), or G.
        query: the patch index compared with every patch, outlined.
        title: a name for the embedding, shown above the map.

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
    query = _grid_index("query", query, gh, gw)
    unit = torch.nn.functional.normalize(embedding.detach().float(), dim=1)
    similarity = (unit @ unit[query]).reshape(gh, gw).cpu().numpy()  # (Gh, Gw)
    fig = _figure(5.0, 4.0)
    ax = fig.add_axes((0.1, 0.12, 0.66, 0.76))
    image = ax.imshow(similarity, cmap="viridis", vmin=-1, vmax=1)
    _patch_box(ax, query, gw)
    ax.set_xticks(range(gw))
    ax.set_yticks(range(gh))
    ax.set_xlabel("grid column")
    ax.set_ylabel("grid row")
    row, col = divmod(query, gw)
    ax.set_title(
        f"{title + ': ' if title else ''}similarity to patch {query} (row {row}, col {col})",
        fontsize=10,
    )
    fig.colorbar(image, cax=fig.add_axes((0.8, 0.12, 0.035, 0.76)), label="cosine similarity")
    return fig


def plot_attention_map(
    image: torch.Tensor, weights: torch.Tensor, query: int, *, title: str = ""
) -> Figure:
    """Where one query patch looks: its attention weights over the patches, beside the image.

    Args:
        image: (C, H, W) float in [0, 1], the image the model saw.
        weights: (Gh, Gw) attention weights of the query over the patch keys (one row of a
            (N, N) attention matrix, class-token column dropped, reshaped to the grid).
        query: the query's patch index, outlined on both panels.
        title: what the weights are, e.g. ``"layer 1, head 0"``.

    Example:
        >>> weights = torch.full((2, 3), 1 / 6)
        >>> fig = plot_attention_map(torch.rand(3, 32, 48), weights, query=4, title="uniform")
        >>> len(fig.axes)  # image, map, colour bar
        3

    See chapter: Attention.
    """
    pixels = _image("image", image)
    weights = _checks.tensor("weights", weights, 2, "(Gh, Gw)").detach().float().cpu()
    gh, gw = weights.shape
    h, w = pixels.shape[:2]
    if h % gh or w % gw or h // gh != w // gw:
        raise ValueError(
            f"weights of a {gh}x{gw} grid do not tile an image of {h}x{w} pixels with square "
            "patches; pass the attention reshaped to the model's (Gh, Gw) grid."
        )
    query = _grid_index("query", query, gh, gw)
    fig = _figure(6.6, 3.3)
    left = fig.add_axes((0.01, 0.04, 0.40, 0.82))
    right = fig.add_axes((0.44, 0.04, 0.40, 0.82))
    _show(left, pixels)
    _patch_box(left, query, gw, size=h // gh)
    left.set_title(f"query: patch {query} (row {query // gw}, col {query % gw})", fontsize=10)
    shown = right.imshow(weights.numpy(), cmap="magma", vmin=0, interpolation="nearest")
    _patch_box(right, query, gw, edgecolor="#3ec1d3")
    right.set_title(f"{title + ': ' if title else ''}attention weights", fontsize=10)
    fig.colorbar(shown, cax=fig.add_axes((0.86, 0.08, 0.02, 0.74)))
    for ax in (left, right):
        ax.set_xticks([])
        ax.set_yticks([])
    return fig


def plot_axial_reach(grid_size: int | tuple[int, int], query: int) -> Figure:
    """Which patches can influence one patch's output: full versus axial attention.

    Three grids, the query patch filled and marked q. One layer of full attention: every patch.
    One axial layer along rows: the query's row, Gw patches. A row layer followed by a column
    layer: every patch, in two hops; the darker cells (the query's column) are the relays, each of
    which has read its own row in the first layer and is read by the query in the second. Counts
    are in the titles.

    Args:
        grid_size: (Gh, Gw), or G.
        query: the patch index, row-major.

    Example:
        >>> fig = plot_axial_reach((3, 5), query=7)
        >>> [ax.get_title().splitlines()[1] for ax in fig.axes]
        ['reaches 15 of 15', 'reaches 5 of 15', 'reaches 15 of 15']

    See chapter: The cost of attention and axial attention.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    query = _grid_index("query", query, gh, gw)
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
    fig = _figure(7.6, 3.0)
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
