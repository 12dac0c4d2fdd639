"""Figures of attention on colours: a table of weights, and what each head hands on.

See chapters: Attention; Multi-head attention.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_head_outputs", "plot_weight_table"]


def _colours(name: str, colours: object, n: int | None = None) -> torch.Tensor:
    colours = _checks.tensor(name, colours, 2, "(N, 3)").detach().float().cpu()
    if colours.shape[1] != 3 or (n is not None and colours.shape[0] != n):
        raise ValueError(
            f"{name} has shape {tuple(colours.shape)}; pass one RGB colour per token, "
            f"shape ({n if n is not None else 'N'}, 3)."
        )
    return colours.clamp(0, 1)


@book_figure
def plot_weight_table(
    colours: torch.Tensor, weights: torch.Tensor, outputs: torch.Tensor, names: Sequence[str]
) -> Figure:
    """A few tokens that are colours: the tokens, their attention weights, and the outputs.

    ``colours`` (N, 3) RGB in [0, 1]; ``weights`` (N, N), rows summing to 1; ``outputs`` (N, 3),
    ``weights @ colours``.

    Example:
        >>> weights = torch.full((2, 2), 0.5)
        >>> colours = torch.tensor([[1.0, 0, 0], [0, 0, 1.0]])
        >>> fig = plot_weight_table(colours, weights, weights @ colours, ["red", "blue"])
        >>> [ax.get_title() for ax in fig.axes]
        ['tokens', 'attention weights $A_{ij}$', 'outputs']

    See chapter: Attention.
    """
    n = len(names)
    colours, outputs = _colours("colours", colours, n), _colours("outputs", outputs, n)
    weights = _checks.tensor("weights", weights, 2, "(N, N)").detach().float().cpu()
    if tuple(weights.shape) != (n, n):
        raise ValueError(f"weights has shape {tuple(weights.shape)}; expected ({n}, {n}).")
    fig = new_figure(6.8, 3.7, layout="constrained")
    left, middle, right = fig.subplots(1, 3, width_ratios=[1, 5, 1])
    for ax, picture, title in ((left, colours, "tokens"), (right, outputs, "outputs")):
        ax.imshow(picture[:, None, :].numpy(), aspect="auto")
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks(range(n), names)
    middle.imshow(weights.numpy(), cmap="Greys", vmin=0, vmax=1)
    for i in range(n):
        for j in range(n):
            weight = float(weights[i, j])
            colour = "white" if weight > 0.5 else "black"
            middle.text(j, i, f"{weight:.2f}", ha="center", va="center", color=colour)
    middle.set_xticks(range(n), names, rotation=45, ha="right")
    middle.set_yticks(range(n), names)
    middle.set_xlabel("key token $j$")
    middle.set_ylabel("query token $i$")
    middle.set_title("attention weights $A_{ij}$")
    return fig


@book_figure
def plot_head_outputs(
    values: torch.Tensor,
    outputs: Mapping[str, torch.Tensor],
    weights: torch.Tensor,
    grid_size: int | tuple[int, int],
    *,
    weights_title: str = "all weights",
) -> Figure:
    """What attention heads hand on, as colours on the patch grid, and one head's weights.

    ``values`` (N, 3), one colour per patch, N = Gh * Gw; ``outputs``: title -> (N, 3), one or
    two heads; ``weights`` (N, N) of one head, on a linear scale from 0.

    Example:
        >>> values = torch.rand(6, 3)
        >>> fig = plot_head_outputs(values, {"head 0": values}, torch.eye(6), (2, 3))
        >>> [ax.get_title() for ax in fig.axes[:3]]
        ['the values: patch colours', 'head 0', 'all weights']

    See chapter: Multi-head attention.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    n = gh * gw
    if not 1 <= len(outputs) <= 2:
        raise ValueError(f"got {len(outputs)} heads' outputs; draw one or two per figure.")
    panels = {"the values: patch colours": _colours("values", values, n)}
    panels.update({title: _colours(title, out, n) for title, out in outputs.items()})
    weights = _checks.tensor("weights", weights, 2, "(N, N)").detach().float().cpu()
    if tuple(weights.shape) != (n, n):
        raise ValueError(f"weights has shape {tuple(weights.shape)}; expected ({n}, {n}).")
    rows = math.ceil((len(panels) + 1) / 2)
    fig = new_figure(6.0, 2.9 * rows, layout="constrained")
    axes = list(fig.subplots(rows, 2, squeeze=False).flat)
    for ax, (title, colours) in zip(axes[: len(panels)], panels.items(), strict=True):
        ax.imshow(colours.reshape(gh, gw, 3).numpy())
        ax.set(title=title, xticks=[], yticks=[])
    ax = axes[len(panels)]
    shown = ax.imshow(weights.numpy(), cmap="magma", vmin=0)
    ax.set(title=weights_title, xlabel="key patch $j$", ylabel="query patch $i$")
    fig.colorbar(shown, ax=ax, shrink=0.8, label="weight")
    for unused in axes[len(panels) + 1 :]:
        unused.set_axis_off()
    return fig
