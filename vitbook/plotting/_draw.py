"""Small drawing helpers shared by the plot_* modules: images, patch outlines, grid indices."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from vitbook import _checks

HIGHLIGHT = "#e4572e"  # the query patch, the chosen position: one colour for "you are here"

def image_array(name: str, image: object) -> np.ndarray:
    """Check a (C, H, W) float image and return it as an (H, W, C) or (H, W) array to show."""
    image = _checks.tensor(name, image, 3, "(C, H, W)")
    pixels = image.detach().cpu().clamp(0, 1).permute(1, 2, 0).numpy()
    return pixels[..., 0] if pixels.shape[-1] == 1 else pixels


def show_pixels(ax, pixels: np.ndarray) -> None:
    """Show an array from :func:`image_array`; one channel is ink on paper (0 white, 1 black)."""
    if pixels.ndim == 2:
        ax.imshow(pixels, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    else:
        ax.imshow(pixels, interpolation="nearest")


def patch_box(ax, k: int, gw: int, size: int = 1, **style) -> None:
    """Outline patch k of a grid drawn with ``size`` pixels per cell (1 for a (Gh, Gw) map)."""
    row, col = divmod(k, gw)
    style = {"edgecolor": HIGHLIGHT, "linewidth": 2.5, **style}
    ax.add_patch(Rectangle((col * size - 0.5, row * size - 0.5), size, size, fill=False, **style))


def grid_index(name: str, k: int, gh: int, gw: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < gh * gw:
        raise ValueError(
            f"{name}={k!r} is not a patch index of the {gh}x{gw} grid; use 0 .. {gh * gw - 1} "
            "(row-major: k = row * Gw + column)."
        )
    return int(k)

