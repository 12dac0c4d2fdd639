"""Figures of the chapter on patches: an image cut into patches and the sequence it becomes.

See chapter: Images as sequences of patches.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.patches import patchify
from vitbook.plotting._draw import image_array, patch_box, show_pixels
from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_patch_grid", "plot_patch_vector"]


@book_figure
def plot_patch_grid(image: torch.Tensor, patch_size: int, *, num_shown: int = 10) -> Figure:
    """The image cut into P x P patches, and the first patches of the token sequence it becomes.

    ``image`` (C, H, W) in [0, 1]; patch indices are drawn up to an 8 x 8 grid; ``num_shown``
    patches of the sequence are drawn before the last.

    Raises:
        ValueError / TypeError: as :func:`vitbook.patchify`.

    Example:
        >>> from vitbook.data import sample_image
        >>> fig = plot_patch_grid(sample_image(size=64), patch_size=16)
        >>> fig.axes[0].get_title()
        'P = 16: a 4 x 4 grid of Gh x Gw = 16 patches'

    See chapter: Images as sequences of patches.
    """
    pixels = image_array("image", image)
    _checks.positive_int("patch_size", patch_size)
    patches = patchify(image[None].float(), patch_size)[0]  # (N, C * P * P), (c ph pw) order
    c, h, w = image.shape
    gh, gw = h // patch_size, w // patch_size
    n = gh * gw
    shown = list(range(min(num_shown, n - 1))) + [n - 1]

    fig = new_figure(6.4, 5.2)
    ax = fig.add_axes((0.05, 0.27, 0.9, 0.66))
    show_pixels(ax, pixels)
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
        patch_box(ax, k, gw, size=patch_size, linewidth=1.5)
    ax.set_title(f"P = {patch_size}: a {gh} x {gw} grid of Gh x Gw = {n} patches")
    ax.set_axis_off()

    fig.text(  # two short lines, which a phone's column shows whole
        0.5,
        0.175,
        f"the sequence: {n} patch tokens,\neach C x P x P = {c} x {patch_size} x {patch_size} = "
        f"{c * patch_size**2} numbers",
        ha="center",
        va="bottom",
        linespacing=1.3,
    )
    slots = [*shown[:-1], None, shown[-1]]
    width = 0.92 / len(slots)
    for i, k in enumerate(slots):
        ax_k = fig.add_axes((0.04 + i * width, 0.02, width * 0.88, 0.11))
        ax_k.set_axis_off()
        if k is None:
            ax_k.text(0.5, 0.5, "...", ha="center", va="center", fontsize=14)
            continue
        show_pixels(ax_k, image_array("patch", patches[k].reshape(c, patch_size, patch_size)))
        ax_k.set_title(str(k), fontsize=9)
    return fig


@book_figure
def plot_patch_vector(vector: torch.Tensor, patch_size: int, *, title: str = "patch") -> Figure:
    """One flattened patch: its picture, and its C * P * P numbers in ``(c ph pw)`` order.

    ``vector`` (C * P * P,) in [0, 1], a row of :func:`vitbook.patchify`'s output.

    Raises:
        ValueError: the vector's length is not a multiple of P * P.

    Example:
        >>> fig = plot_patch_vector(torch.rand(3 * 4 * 4), patch_size=4, title="patch 0")
        >>> [line.get_label() for line in fig.axes[1].lines]
        ['channel 0 (red)', 'channel 1 (green)', 'channel 2 (blue)']

    See chapter: Images as sequences of patches.
    """
    vector = _checks.tensor("vector", vector, 1, "(C * P * P,)").detach().float().cpu()
    p = _checks.positive_int("patch_size", patch_size)
    if vector.numel() % (p * p):
        raise ValueError(
            f"vector has {vector.numel()} numbers, not a multiple of P * P = {p * p}; pass one "
            "row of patchify(images, patch_size) with the same patch_size."
        )
    c = vector.numel() // (p * p)
    names = ["red", "green", "blue"] if c == 3 else [None] * c
    fig = new_figure(6.8, 2.5, layout="constrained")
    tile_ax, vector_ax = fig.subplots(1, 2, width_ratios=[1, 4.5])
    show_pixels(tile_ax, image_array("vector", vector.reshape(c, p, p)))
    tile_ax.set_title(title)
    tile_ax.set_axis_off()
    for channel, name in enumerate(names):
        span = np.arange(channel * p * p, (channel + 1) * p * p)
        vector_ax.plot(
            span,
            vector[span].numpy(),
            color=f"tab:{name}" if name else None,
            linewidth=0.8,
            label=f"channel {channel}" + (f" ({name})" if name else ""),
        )
    vector_ax.set_xlim(0, c * p * p)
    vector_ax.set_ylim(0, 1)
    vector_ax.set_xlabel("index in the patch vector, (c ph pw) order")
    vector_ax.set_ylabel("pixel value")
    vector_ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=c, frameon=False)
    return fig
