"""Figures of the whole model: the pipeline from pixels to logits, where the multiply-accumulates
of one image go, and a position table resampled to a finer grid.

See chapter: The full model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from vitbook.plotting._draw import HIGHLIGHT, image_array
from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_cost_by_part", "plot_pipeline", "plot_resampled_positions"]

STAGE_COLOURS = ["#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc", "#e8e8e8"]
# Pretty names for the parts counted in the full-model chapter; other names are shown as given.
PART_LABELS = {"q, k, v, W_o": "$W_q, W_k, W_v, W_o$", "QK^T and AV": "$QK^\\top$ and $AV$"}
PART_COLOURS = ["tab:grey", "tab:blue", "tab:red", "tab:green", "tab:purple"]


@book_figure
def plot_pipeline(
    config,
    image: torch.Tensor,
    *,
    title: str = "from a photo to class scores (shapes for one image)",
    grid_colour: str = "white",
) -> Figure:
    """A ViT as a pipeline: the image cut into patches, then each stage and its shape.

    ``config`` needs a class token and a head; ``image`` is (C, H, W) of its size;
    ``grid_colour`` colours the patch grid.

    Example:
        >>> from vitbook import ViTConfig
        >>> cfg = ViTConfig(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3)
        >>> fig = plot_pipeline(cfg, torch.rand(3, 32, 32))
        >>> [t.get_text() for t in fig.axes[0].texts if "x" in t.get_text()][:3]
        ['3 x 32 x 32', '16 x 192', '17 x 48']

    See chapter: The full model.
    """
    pixels = image_array("image", image)
    if pixels.shape[:2] != tuple(config.img_size):
        raise ValueError(
            f"image of {pixels.shape[0]}x{pixels.shape[1]} pixels is not the "
            f"config's img_size={config.img_size}; resize it first."
        )
    gh, gw = config.grid_size
    tokens = f"{config.num_tokens} x {config.embed_dim}"
    stages = [
        ("image", f"{config.in_chans} x {config.img_size[0]} x {config.img_size[1]}"),
        ("patches", f"{config.num_patches} x {config.in_chans * config.patch_size**2}"),
        ("tokens +\npositions", tokens),
        (f"{config.depth} encoder\nblocks", tokens),
        ("LayerNorm,\nclass token", f"{config.embed_dim}"),
        ("head", f"{config.num_classes} logits"),
    ]
    fig = new_figure(6.8, 1.9)
    ax = fig.add_axes((0, 0, 1, 0.86))
    ax.set(xlim=(-0.05, 11.6), ylim=(-0.75, 1.95))
    ax.axis("off")
    ax.imshow(pixels, extent=(0, 1.9, 0, 1.9), cmap="gray" if pixels.ndim == 2 else None)
    for k in range(1, gh):  # the patch grid
        ax.plot([0, 1.9], [k * 1.9 / gh] * 2, color=grid_colour, lw=0.4)
    for k in range(1, gw):
        ax.plot([k * 1.9 / gw] * 2, [0, 1.9], color=grid_colour, lw=0.4)
    # the image's edge, which a digit's white paper would not show
    ax.add_patch(Rectangle((0, 0), 1.9, 1.9, fill=False, ec=grid_colour, lw=0.4))
    for i, (name, shape) in enumerate(stages):
        x = 0.95 if i == 0 else 2.85 + 1.95 * (i - 1)
        if i > 0:
            ax.add_patch(
                FancyBboxPatch(
                    (x - 0.75, 0.3),
                    1.5,
                    1.3,
                    boxstyle="round,pad=0.05",
                    fc=STAGE_COLOURS[i - 1],
                    ec="grey",
                )
            )
            ax.text(x, 0.95, name, ha="center", va="center", fontsize=9)
            start = x - 1.15 if i > 1 else 1.97
            ax.annotate(
                "",
                xy=(x - 0.82, 0.95),
                xytext=(start, 0.95),
                arrowprops={"arrowstyle": "->", "color": "grey"},
            )
        ax.text(x, -0.42, shape, ha="center", va="center", fontsize=8, family="monospace")
    fig.suptitle(title, fontsize=10)
    return fig


def _label(part: str) -> str:
    return PART_LABELS.get(part, part)


@book_figure
def plot_cost_by_part(
    by_part: Mapping[tuple[int, int], Mapping[str, int]], img_size: int, patch_size: int
) -> Figure:
    """Where the multiply-accumulates (MACs) of one image go, for one image and patch size.

    ``by_part``: (image side, patch size) -> part -> MACs, the same parts for every size. Left,
    each part's share; right, total GMACs against image side per patch size (log scale).

    Example:
        >>> sizes = [(s, p) for s in (8, 16) for p in (2, 4)]
        >>> parts = {(s, p): {"MLP": s * 10**6 // p, "head": 10**6} for s, p in sizes}
        >>> fig = plot_cost_by_part(parts, 16, 4)
        >>> fig.axes[0].get_title()
        '16 px, P = 4:\\n0.005 GMACs per image'

    See chapter: The full model.
    """
    if (img_size, patch_size) not in by_part:
        raise ValueError(
            f"(img_size, patch_size)={(img_size, patch_size)} is not a key of "
            "by_part; pass sizes that were counted."
        )
    sides = sorted({s for s, _ in by_part})
    patches = sorted({p for _, p in by_part})
    parts = by_part[img_size, patch_size]
    total = sum(parts.values())
    fig = new_figure(6.8, 3.0)
    bars, curve = fig.subplots(
        1, 2, gridspec_kw={"left": 0.2, "right": 0.985, "bottom": 0.16, "top": 0.86, "wspace": 0.55}
    )
    names = list(parts)[::-1]  # the first part on top
    shares = [100 * parts[n] / total for n in names]
    colours = (PART_COLOURS * len(names))[: len(names)][::-1]
    bars.barh([_label(n) for n in names], shares, color=colours)
    for y, name in enumerate(names):
        share = 100 * parts[name] / total
        label = f"{parts[name] / 1e9:.3g} GMACs"
        if share > 55:  # a long bar: the label inside its end, so that it stays in the panel
            bars.text(share - 1, y, label, va="center", ha="right", fontsize=8, color="white")
        else:
            bars.text(share + 1, y, label, va="center", fontsize=8)
    bars.set(
        xlim=(0, 100),
        xlabel="share of the MACs (%)",
        title=f"{img_size} px, P = {patch_size}:\n{total / 1e9:.3g} GMACs per image",
    )
    totals = {
        p: [sum(by_part[s, p].values()) / 1e9 for s in sides if (s, p) in by_part] for p in patches
    }
    every = [t for line in totals.values() for t in line]
    for p, marker in zip(patches, "os^Dv" * len(patches), strict=False):
        shown = [s for s in sides if (s, p) in by_part]
        curve.plot(shown, totals[p], marker + "-", ms=4, label=f"P = {p}")
    curve.plot([img_size], [total / 1e9], "o", ms=12, color="black", alpha=0.3)
    curve.set(
        yscale="log",
        xlabel="image side (pixels)",
        ylabel="GMACs per image",
        ylim=(min(every) / 1.5, max(every) * 1.5),
        xlim=(min(sides) - 16, max(sides) + 16),
        title="total for every size\n(circle: the size on the left)",
    )
    curve.legend(loc="upper left")
    return fig


def _similarity(table: torch.Tensor, k: int) -> torch.Tensor:
    unit = F.normalize(table, dim=-1)  # (Gh*Gw, D)
    return unit @ unit[k]  # (Gh*Gw,)


@book_figure
def plot_resampled_positions(
    tables: Sequence[torch.Tensor],
    queries: Sequence[tuple[int, int]],
    *,
    channels: tuple[int, int] = (20, 404),
    notes: tuple[str, str] = ("", ""),
    patch_size: int = 16,
) -> Figure:
    """A position table on two grids: two of its channels and one patch's similarity map.

    ``tables``: (1, 1 + G * G, D) with the class token's row first (as ``pos_embed``);
    ``queries``: (row, column) per table; ``notes``: a word per channel for its title. Each
    column shares one colour scale.

    Example:
        >>> from vitbook import sincos_2d
        >>> table = torch.cat([torch.zeros(1, 32), sincos_2d((4, 4), 32)])[None]
        >>> fig = plot_resampled_positions([table], [(1, 2)], channels=(0, 16))
        >>> round(float(fig.axes[2].images[0].get_array()[1, 2]), 4)  # the query itself
        1.0

    See chapter: The full model.
    """
    if len(tables) != len(queries):
        raise ValueError(f"{len(tables)} tables and {len(queries)} queries; give one per table.")
    grids, pictures = [], []
    for table, (row, col) in zip(tables, queries, strict=True):
        patch_rows = table[0, 1:].detach().float()  # (G*G, D)
        grid = round(len(patch_rows) ** 0.5)
        if grid * grid != len(patch_rows):
            raise ValueError(f"a table of {len(patch_rows)} patch rows is not a square grid.")
        grids.append(grid)
        maps = [patch_rows[:, c] for c in channels] + [_similarity(patch_rows, row * grid + col)]
        pictures.append([m.reshape(grid, grid).numpy() for m in maps])
    reach = max(np.abs(p[i]).max() for p in pictures for i in (0, 1))
    low = min(p[2].min() for p in pictures)
    scales = [
        (-reach, reach, "RdBu_r", "value"),
        (-reach, reach, "RdBu_r", "value"),
        (low, 1.0, "viridis", "cosine similarity"),
    ]
    n = len(tables)
    fig = new_figure(6.8, 2.1 * n + 0.8)
    grid_spec = fig.add_gridspec(
        n + 1,
        3,
        height_ratios=[1] * n + [0.06],
        left=0.1,
        right=0.98,
        top=1 - 0.3 / (2.1 * n + 0.8),
        bottom=0.5 / (2.1 * n + 0.8),
        wspace=0.16,
        hspace=0.12,
    )
    axes = [[fig.add_subplot(grid_spec[r, c]) for c in range(3)] for r in range(n)]
    titles = [
        f"channel {c}" + (f" ({note})" if note else "")
        for c, note in zip(channels, notes, strict=True)
    ]
    titles.append("similarity to patch +")
    for r, (row_axes, maps, grid) in enumerate(zip(axes, pictures, grids, strict=True)):
        for c, (ax, picture, (vmin, vmax, cmap, what)) in enumerate(
            zip(row_axes, maps, scales, strict=True)
        ):
            shown = ax.imshow(picture, cmap=cmap, vmin=vmin, vmax=vmax)
            ax.set(xticks=[], yticks=[], title=titles[c] if r == 0 else "")
            if r == n - 1:
                bar = fig.colorbar(
                    shown, cax=fig.add_subplot(grid_spec[n, c]), orientation="horizontal"
                )
                bar.set_ticks([vmin, (vmin + vmax) / 2, vmax])  # ends apart from the next bar's
                bar.ax.xaxis.set_major_formatter("{x:.2g}")
                # the end labels inside their own bar, so that "0.61" and "-0.61" of two
                # neighbouring bars do not run into each other
                for tick, align in zip(bar.ax.xaxis.get_major_ticks(), ("left", "center", "right"),
                                       strict=True):  # fmt: skip
                    tick.label1.set_horizontalalignment(align)
                bar.set_label(f"{what}, {vmin:.2g} .. {vmax:.2g}")
        row, col = queries[r]
        row_axes[2].plot(col, row, "+", color=HIGHLIGHT, ms=12, mew=2)
        row_axes[0].set_ylabel(f"{grid} x {grid} grid\n({grid * patch_size} px)")
    return fig
