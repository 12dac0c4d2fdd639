"""Figures that read out a trained ViT: attention by layer, rollout, and Figure 7's panels.

Images are (C, H, W) floats in [0, 1]; a one-channel image is drawn as ink on paper.

See chapter: Inside a trained ViT.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting._draw import grid_index, patch_box
from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = [
    "plot_attention_distance",
    "plot_filter_components",
    "plot_layer_attention",
    "plot_rollout_maps",
    "plot_similarity_tiles",
]

OUTLINE = "#3ec1d3"  # the query patch on a magma map: a colour the map never uses


def show_image(ax, image: torch.Tensor) -> None:
    """A (C, H, W) image in [0, 1], without ticks; one channel is drawn as ink on paper."""
    pixels = image.detach().float().cpu().clamp(0, 1)
    if pixels.shape[0] == 1:
        ax.imshow(pixels[0].numpy(), cmap="gray_r", vmin=0, vmax=1)
    else:
        ax.imshow(pixels.permute(1, 2, 0).numpy())
    ax.set(xticks=[], yticks=[])


@book_figure
def plot_layer_attention(
    image: torch.Tensor,
    maps: torch.Tensor,
    query: int,
    *,
    titles: Sequence[str] | None = None,
) -> Figure:
    """Where one query patch looks in every layer: the image, then one map per layer.

    ``maps`` (L, Gh, Gw): the query's weights over the patch keys per layer; ``query`` is
    outlined. All maps share one colour scale from 0, rows of at most 5 panels.

    Example:
        >>> maps = torch.softmax(torch.randn(3, 16), -1).reshape(3, 4, 4)
        >>> fig = plot_layer_attention(torch.rand(1, 8, 8), maps, query=9)
        >>> [ax.get_title() for ax in fig.axes[1:4]]
        ['layer 0', 'layer 1', 'layer 2']

    See chapter: Inside a trained ViT.
    """
    maps = _checks.tensor("maps", maps, 3, "(L, Gh, Gw)").detach().float().cpu()
    num_layers, gh, gw = maps.shape
    query = grid_index("query", query, gh, gw)
    titles = [f"layer {layer}" for layer in range(num_layers)] if titles is None else titles
    if len(titles) != num_layers:
        raise ValueError(f"{len(titles)} titles for {num_layers} maps; give one per map.")
    columns = min(num_layers + 1, 5)
    rows = math.ceil((num_layers + 1) / columns)
    fig = new_figure(COLUMN_WIDTH, 1.9 * rows + 0.2, layout="constrained")
    fig.get_layout_engine().set(w_pad=0.06, wspace=0.08)
    axes = fig.subplots(rows, columns, squeeze=False).flat
    show_image(axes[0], image)
    patch_box(axes[0], query, gw, size=image.shape[-1] // gw, edgecolor=OUTLINE)
    axes[0].set_title(f"query patch {query}")
    top = float(maps.max())
    for ax, weights, title in zip(axes[1:], maps, titles, strict=False):
        shown = ax.imshow(weights.numpy(), cmap="magma", vmin=0, vmax=top)
        patch_box(ax, query, gw, edgecolor=OUTLINE)
        ax.set(xticks=[], yticks=[])
        ax.set_title(title, fontsize=9)  # two short lines over a narrow panel
    for ax in axes[num_layers + 1 :]:
        ax.set_axis_off()
    bar = fig.colorbar(shown, ax=list(axes), shrink=0.9, aspect=15)
    bar.set_label(f"weight (0 .. {top:.2f})")
    return fig


@book_figure
def plot_rollout_maps(
    images: torch.Tensor,
    pooled: torch.Tensor,
    query_maps: torch.Tensor,
    query: int,
    *,
    titles: Sequence[str] | None = None,
    class_shares: Sequence[float] | None = None,
) -> Figure:
    """Rollout of a few images: each image over its pooled map and one query patch's map.

    ``images`` (B, C, H, W), B of 2 to 5; ``pooled`` and ``query_maps`` (B, Gh, Gw); each row of
    maps has one colour scale from 0.

    Example:
        >>> maps = torch.softmax(torch.randn(2, 16), -1).reshape(2, 4, 4)
        >>> fig = plot_rollout_maps(torch.rand(2, 1, 8, 8), maps, maps, query=5)
        >>> fig.axes[2].get_title()
        'pooled rollout'

    See chapter: Inside a trained ViT.
    """
    images = _checks.tensor("images", images, 4, "(B, C, H, W)")
    pooled = _checks.tensor("pooled", pooled, 3, "(B, Gh, Gw)").detach().float().cpu()
    query_maps = _checks.tensor("query_maps", query_maps, 3, "(B, Gh, Gw)").detach().cpu()
    count, gh, gw = pooled.shape
    if not 2 <= count <= 5 or len(images) != count or query_maps.shape != pooled.shape:
        raise ValueError(
            f"{len(images)} images, pooled {tuple(pooled.shape)} and query_maps "
            f"{tuple(query_maps.shape)} do not match; pass 2 to 5 of each, on one grid."
        )
    query = grid_index("query", query, gh, gw)
    fig = new_figure(COLUMN_WIDTH, 5.4, layout="constrained")
    axes = fig.subplots(3, count, squeeze=False)
    for k in range(count):
        show_image(axes[0, k], images[k])
        axes[0, k].set_title(titles[k] if titles else "")
        share = "" if class_shares is None else f"\nclass token {class_shares[k]:.2f}"
        axes[1, k].set_title(f"pooled rollout{share}")
        axes[2, k].set_title(f"query patch {query}")
    for row, maps in ((1, pooled), (2, query_maps.float())):
        top = float(maps.max())
        for k in range(count):
            shown = axes[row, k].imshow(maps[k].numpy(), cmap="magma", vmin=0, vmax=top)
            axes[row, k].set(xticks=[], yticks=[])
            if row == 2:
                patch_box(axes[row, k], query, gw, edgecolor=OUTLINE)
        bar = fig.colorbar(shown, ax=list(axes[row]), shrink=0.9, aspect=12)
        bar.set_label(f"share (0 .. {top:.2f})")
    return fig


@book_figure
def plot_filter_components(
    components: torch.Tensor,
    ratios: torch.Tensor,
    *,
    columns: int = 7,
    title: str = "",
) -> Figure:
    """The principal components of the patch-embedding filters, each titled with its share.

    ``components`` (r, C, P, P) and ``ratios`` (r,) of
    :func:`vitbook.analysis.patch_embedding_components`.

    Example:
        >>> fig = plot_filter_components(torch.randn(4, 1, 2, 2), torch.tensor([.4, .3, .2, .1]))
        >>> [ax.get_title() for ax in fig.axes]
        ['1: 0.40', '2: 0.30', '3: 0.20', '4: 0.10']

    See chapter: Inside a trained ViT.
    """
    components = _checks.tensor("components", components, 4, "(r, C, P, P)")
    components = components.detach().float().cpu()
    count = len(components)
    columns = min(count, columns)
    rows = math.ceil(count / columns)
    side = min(1.1, COLUMN_WIDTH / columns)
    fig = new_figure(COLUMN_WIDTH, side * rows + 0.3 * bool(title) + 0.1, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).flat
    for k, ax in enumerate(axes):
        if k >= count:
            ax.set_axis_off()
            continue
        picture = components[k]
        if picture.shape[0] == 1:
            limit = float(picture.abs().max())
            ax.imshow(picture[0].numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
        else:
            low, high = picture.min(), picture.max()
            show_image(ax, (picture - low) / (high - low))
        ax.set(xticks=[], yticks=[], title=f"{k + 1}: {float(ratios[k]):.2f}")
    if title:
        fig.suptitle(title)
    return fig


@book_figure
def plot_similarity_tiles(
    similarities: Mapping[str, torch.Tensor],
    *,
    scales: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """Position-embedding similarity in the layout of the ViT paper, one panel per table.

    ``similarities``: title -> (Gh, Gw, Gh, Gw) of
    :func:`vitbook.analysis.position_embedding_similarity`, 1 to 3 panels; ``scales``: title ->
    (vmin, vmax), by default the lowest value rounded down to 0.1, to 1.

    Example:
        >>> from vitbook.analysis import position_embedding_similarity
        >>> from vitbook import sincos_2d
        >>> similarity = position_embedding_similarity(sincos_2d((3, 4), 16), (3, 4))
        >>> fig = plot_similarity_tiles({"2D sine-cosine": similarity})
        >>> fig.axes[0].images[0].get_array().shape  # (Gh * Gh, Gw * Gw)
        (9, 16)

    See chapter: Inside a trained ViT.
    """
    if not 1 <= len(similarities) <= 3:
        raise ValueError(f"{len(similarities)} tables; pass 1 to 3 (panels side by side).")
    count = len(similarities)
    width = COLUMN_WIDTH if count > 1 else 4.6
    fig = new_figure(width, width / count + 1.0, layout="constrained")
    axes = fig.subplots(1, count, squeeze=False)[0]
    for ax, (name, similarity) in zip(axes, similarities.items(), strict=True):
        similarity = _checks.tensor(name, similarity, 4, "(Gh, Gw, Gh, Gw)").detach().cpu()
        gh, gw = similarity.shape[:2]
        mosaic = similarity.permute(0, 2, 1, 3).reshape(gh * gh, gw * gw).float().numpy()
        if scales is not None and name in scales:
            vmin, vmax = scales[name]
        else:
            vmin, vmax = math.floor(float(mosaic.min()) * 10) / 10, 1.0
        shown = ax.imshow(mosaic, cmap="viridis", vmin=vmin, vmax=vmax)
        ax.hlines(np.arange(1, gh) * gh - 0.5, -0.5, gw * gw - 0.5, color="white", lw=1.2)
        ax.vlines(np.arange(1, gw) * gw - 0.5, -0.5, gh * gh - 0.5, color="white", lw=1.2)
        # about 13 characters of 10-point text per inch of panel
        ax.set(xticks=[], yticks=[], title=textwrap.fill(name, int(width / count * 12)))
        bar = fig.colorbar(shown, ax=ax, orientation="horizontal", shrink=0.8, pad=0.03)
        bar.set_ticks([vmin, (vmin + vmax) / 2, vmax])
        bar.set_label(f"cosine similarity ({vmin:g} .. {vmax:g})")
    return fig


@book_figure
def plot_attention_distance(
    distances: torch.Tensor,
    *,
    even_spread: float | None = None,
    farthest: float | None = None,
    title: str = "",
) -> Figure:
    """Mean attention distance of every head against depth, as in the ViT paper's Figure 7.

    ``distances`` (L, Nh) in pixels (:func:`vitbook.analysis.mean_attention_distance`);
    ``even_spread`` is drawn dashed; ``farthest`` tops the y axis.

    Example:
        >>> fig = plot_attention_distance(torch.rand(3, 2) * 4, even_spread=2.0, farthest=8.0)
        >>> [float(y) for y in fig.axes[0].get_ylim()]
        [0.0, 8.0]

    See chapter: Inside a trained ViT.
    """
    distances = _checks.tensor("distances", distances, 2, "(L, Nh)").detach().float().cpu()
    num_layers, num_heads = distances.shape
    fig = new_figure(COLUMN_WIDTH, 3.2, layout="constrained")
    ax = fig.subplots()
    few = num_heads <= 6
    for head in range(num_heads):
        style = {"label": f"head {head}", "ms": 7, "alpha": 0.8} if few else {"color": "C0"}
        ax.plot(range(num_layers), distances[:, head].numpy(), "o", **{"alpha": 0.6, **style})
    if even_spread is not None:
        ax.axhline(even_spread, color="grey", ls="--", label="even spread")
    ax.set(
        xticks=range(num_layers),
        xlabel="layer (network depth; 0 = first)",
        ylabel="mean attention distance (px)",
        title=title,
    )
    ax.set_ylim(0, farthest)
    if few or even_spread is not None:
        ax.legend(ncol=3, loc="lower right")
    return fig
