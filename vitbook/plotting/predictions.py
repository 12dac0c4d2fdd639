"""Figures of a classifier's answers: the most likely classes, and where the answer comes from.

See chapter: A pretrained ViT.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting.analysis import show_image
from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = ["plot_rollout_overlay", "plot_top_classes"]


@book_figure
def plot_top_classes(
    pictures: torch.Tensor,
    captions: Sequence[str],
    probabilities: torch.Tensor,
    names: Sequence[Sequence[str]],
) -> Figure:
    """Each picture beside a bar chart of its most likely classes, the likeliest on top.

    ``pictures`` (B, C, H, W); ``probabilities`` (B, k), sorted, with ``names`` in that order.

    Example:
        >>> top = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2]])
        >>> fig = plot_top_classes(
        ...     torch.rand(2, 3, 8, 8), ["a", "b"], top, [["x", "y", "z"]] * 2
        ... )
        >>> [t.get_text() for t in fig.axes[1].get_yticklabels()]
        ['x', 'y', 'z']

    See chapter: A pretrained ViT.
    """
    pictures = _checks.tensor("pictures", pictures, 4, "(B, C, H, W)")
    probabilities = _checks.tensor("probabilities", probabilities, 2, "(B, k)").detach().cpu()
    count, k = probabilities.shape
    if not len(pictures) == len(captions) == len(names) == count:
        raise ValueError(
            f"{len(pictures)} pictures, {len(captions)} captions, {len(names)} lists of names "
            f"and {count} rows of probabilities; pass one of each per picture."
        )
    fig = new_figure(COLUMN_WIDTH, 1.9 * count, layout="constrained")
    axes = fig.subplots(count, 2, squeeze=False, gridspec_kw={"width_ratios": [1, 2.2]})
    for row in range(count):
        show_image(axes[row, 0], pictures[row])
        axes[row, 0].set_title(captions[row])
        bars = axes[row, 1]
        bars.barh(range(k), probabilities[row].float().numpy(), color="#3f7fbf")
        bars.set(yticks=range(k), yticklabels=list(names[row]), xlim=(0, 1))
        bars.invert_yaxis()  # the most likely class on top
        if row == count - 1:
            bars.set_xlabel("probability")
    return fig


@book_figure
def plot_rollout_overlay(
    pictures: torch.Tensor,
    overlays: torch.Tensor,
    *,
    captions: Sequence[str],
    titles: Sequence[str],
) -> Figure:
    """Each picture, and under it the picture with its rollout map laid over it.

    ``pictures`` (B, C, H, W), B of 1 to 4; ``overlays`` (B, H, W) in [0, 1].

    Example:
        >>> fig = plot_rollout_overlay(
        ...     torch.rand(2, 3, 16, 16), torch.rand(2, 16, 16), captions=["a", "b"],
        ...     titles=["rollout", "rollout"]
        ... )
        >>> len(fig.axes)
        4

    See chapter: A pretrained ViT.
    """
    pictures = _checks.tensor("pictures", pictures, 4, "(B, C, H, W)")
    overlays = _checks.tensor("overlays", overlays, 3, "(B, H, W)").detach().float().cpu()
    count = len(pictures)
    if not 1 <= count <= 4 or overlays.shape != (count, *pictures.shape[-2:]):
        raise ValueError(
            f"{count} pictures of {tuple(pictures.shape[-2:])} pixels and overlays of shape "
            f"{tuple(overlays.shape)}; pass 1 to 4 pictures and one map of their size each."
        )
    side = COLUMN_WIDTH / max(count, 2)
    fig = new_figure(side * count, 2 * side + 0.5, layout="constrained")
    axes = fig.subplots(2, count, squeeze=False)
    for k in range(count):
        show_image(axes[0, k], pictures[k])
        axes[0, k].set_title(captions[k])
        show_image(axes[1, k], pictures[k])
        axes[1, k].imshow(overlays[k].numpy(), cmap="inferno", alpha=0.6, vmin=0, vmax=1)
        axes[1, k].set_title(titles[k])
    return fig
