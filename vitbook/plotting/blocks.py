"""Figures of the encoder block: where the LayerNorms sit, GELU against ReLU, and what residual
connections and the order of normalisation do to a deep stack.

See chapter: The encoder block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from vitbook.plotting.style import book_figure, new_figure

__all__ = [
    "plot_activations",
    "plot_gradient_through_depth",
    "plot_norm_order",
    "plot_norm_placement",
]

PART_COLOURS = {"LayerNorm": "#fde9b8", "attention": "#c8dcf0", "MLP": "#cfe8cf"}
INK = "0.35"
ORDER_COLOURS = {"pre-norm": "tab:blue", "post-norm": "tab:red"}


def _box(ax, x: float, y: float, name: str) -> None:
    label = "multi-head\nattention" if name == "attention" else name
    ax.text(
        x,
        y,
        label,
        ha="center",
        va="center",
        fontsize=9,
        zorder=3,
        bbox={"boxstyle": "round,pad=0.35", "fc": PART_COLOURS[name], "ec": INK},
    )


def _arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "-|>", "color": INK, "lw": 1.3})


def _draw_block(ax, parts: list[tuple], title: str, end: float) -> None:
    # parts, left to right: ("branch", x_out, [(x, part)], x_add) or ("norm", x).
    _arrow(ax, (0, 0), (end, 0))
    for part in parts:
        if part[0] == "norm":
            _box(ax, part[1], 0, "LayerNorm")
            continue
        _, x_out, boxes, x_add = part
        ax.plot([x_out, x_out, x_add], [0, 1, 1], color=INK, lw=1.3, zorder=1)
        _arrow(ax, (x_add, 1), (x_add, 0.17))
        for x, name in boxes:
            _box(ax, x, 1, name)
        ax.text(
            x_add,
            0,
            "+",
            ha="center",
            va="center",
            fontsize=11,
            zorder=3,
            bbox={"boxstyle": "circle,pad=0.1", "fc": "white", "ec": INK},
        )
    for x, ha in ((-0.15, "right"), (end + 0.15, "left")):
        ax.text(x, 0, "tokens\n$(B, N, D)$", ha=ha, va="center", fontsize=8)
    ax.set(xlim=(-1.9, end + 1.9), ylim=(-0.4, 1.45))
    ax.set_title(title, loc="left", fontsize=10)
    ax.axis("off")


@book_figure
def plot_norm_placement() -> Figure:
    """The pre-norm block of ViT (top) and the post-norm block of the original Transformer.

    Example:
        >>> fig = plot_norm_placement()
        >>> [ax.get_title(loc="left").split(":")[0] for ax in fig.axes]
        ['pre-norm (ViT)', 'post-norm (original Transformer)']

    See chapter: The encoder block.
    """
    fig = new_figure(6.8, 3.4)
    pre, post = fig.subplots(
        2, 1, gridspec_kw={"left": 0.0, "right": 1.0, "bottom": 0.02, "top": 0.92, "hspace": 0.35}
    )
    end = 12.5
    _draw_block(
        pre,
        [
            ("branch", 0.6, [(2.1, "LayerNorm"), (4.2, "attention")], 5.7),
            ("branch", 6.6, [(8.1, "LayerNorm"), (9.9, "MLP")], 11.3),
        ],
        "pre-norm (ViT): normalise what each branch reads",
        end,
    )
    _draw_block(
        post,
        [
            ("branch", 0.6, [(2.5, "attention")], 4.3),
            ("norm", 5.6),
            ("branch", 6.9, [(8.4, "MLP")], 9.8),
            ("norm", 11.0),
        ],
        "post-norm (original Transformer): normalise the stream after each addition",
        end,
    )
    return fig


@book_figure
def plot_activations(low: float = -4.0, high: float = 4.0) -> Figure:
    """GELU against ReLU, their derivatives, and the error of GELU's tanh approximation.

    ``low``, ``high``: the x range of the top panels; the error panel (in 1e-4) spans -6 .. 6.

    Example:
        >>> fig = plot_activations()
        >>> [ax.get_title() for ax in fig.axes][:2]
        ['activation', 'derivative']

    See chapter: The encoder block.
    """
    x = torch.linspace(low, high, 801, requires_grad=True)
    curves = {"ReLU": F.relu(x), "GELU": F.gelu(x)}
    slopes = {name: torch.autograd.grad(y.sum(), x)[0] for name, y in curves.items()}
    xs = x.detach().numpy()
    wide = torch.linspace(-6, 6, 2401, dtype=torch.float64)
    error = F.gelu(wide) - F.gelu(wide, approximate="tanh")
    fig = new_figure(6.8, 4.6)
    grid = fig.add_gridspec(
        2, 2, left=0.08, right=0.98, bottom=0.1, top=0.94, hspace=0.55, wspace=0.25
    )
    act, slope, gap = (
        fig.add_subplot(grid[0, 0]),
        fig.add_subplot(grid[0, 1]),
        fig.add_subplot(grid[1, :]),
    )
    for name, colour in (("ReLU", "0.6"), ("GELU", "tab:blue")):
        act.plot(xs, curves[name].detach().numpy(), color=colour, label=name)
        slope.plot(xs, slopes[name].numpy(), color=colour, label=name)
    lowest = int(curves["GELU"].argmin())
    act.plot([xs[lowest]], [curves["GELU"][lowest].item()], "o", color="tab:blue", ms=4)
    act.set(xlabel="$x$", title="activation", ylim=(-0.5, high))
    slope.set(xlabel="$x$", title="derivative", ylim=(-0.2, 1.2))
    gap.plot(wide.numpy(), 1e4 * error.numpy(), color="tab:purple")
    gap.set(
        xlabel="$x$",
        xlim=(-6, 6),
        ylabel="$\\times 10^{-4}$",
        title="exact GELU $-$ tanh approximation",
    )
    for ax in (act, slope):
        ax.legend(loc="upper left")
    for ax in (act, slope, gap):
        ax.axhline(0, color="0.8", lw=0.8, zorder=0)
    return fig


@book_figure
def plot_gradient_through_depth(
    residual: Sequence[float], plain: Sequence[float], *, title: str = ""
) -> Figure:
    """The gradient norm at the input of every branch of a stack, with and without residuals.

    ``residual`` and ``plain``: norms at branches 0 .. L (L the output), with z + F(z) and
    z = F(z), on a log scale; exact zeros are marked along the bottom.

    Example:
        >>> fig = plot_gradient_through_depth([2.0, 1.5, 1.0], [0.0, 0.1, 1.0])
        >>> [line.get_label() for line in fig.axes[0].lines]
        ['with residuals: $z + F(z)$', 'without: $F(z)$', 'without: exactly 0 in float32']

    See chapter: The encoder block.
    """
    if len(residual) != len(plain):
        raise ValueError(
            f"residual has {len(residual)} values and plain {len(plain)}; pass one "
            "gradient norm per branch input for both stacks."
        )
    fig = new_figure(6.8, 3.3)
    ax = fig.subplots(gridspec_kw={"left": 0.11, "right": 0.98, "bottom": 0.15, "top": 0.9})
    ax.semilogy(range(len(residual)), residual, "o-", ms=3, label="with residuals: $z + F(z)$")
    nonzero = [k for k, g in enumerate(plain) if g > 0]
    zero = [k for k, g in enumerate(plain) if g == 0]
    floor = min([plain[k] for k in nonzero] + [1e-3]) / 30
    ax.semilogy(
        nonzero, [plain[k] for k in nonzero], "o-", ms=3, color="tab:red", label="without: $F(z)$"
    )
    ax.plot(zero, [floor] * len(zero), "x", color="tab:red", label="without: exactly 0 in float32")
    ax.set(
        xlabel=f"branch $k$ (0 = input of the stack, {len(residual) - 1} = output)",
        ylabel="gradient norm at its input",
        ylim=(floor / 3, 100),
        title=title,
    )
    ax.legend(loc="lower right")
    return fig


@book_figure
def plot_norm_order(
    stats: Mapping[int, Mapping[str, Mapping[str, Sequence[float]]]], depth: int
) -> Figure:
    """Pre-norm against post-norm stacks of one depth: the stream's scale and the gradients.

    ``stats``: depth L -> ``"pre-norm"`` / ``"post-norm"`` -> ``{"std", "grad"}``, L values
    each; ``depth`` is the key shown. The axes are the same for every depth.

    Example:
        >>> run = {"std": [1.0, 1.2], "grad": [0.3, 0.2]}
        >>> fig = plot_norm_order({2: {"pre-norm": run, "post-norm": run}}, depth=2)
        >>> [ax.get_title() for ax in fig.axes][:3]
        ['the stream after each block', 'gradient of each block', 'gradient of the last block']

    See chapter: The encoder block.
    """
    if depth not in stats:
        raise ValueError(f"depth={depth} is not among the depths of stats: {sorted(stats)}.")
    depths = sorted(stats)
    runs = [run for by_order in stats.values() for run in by_order.values()]
    std_top = 1.1 * max(max(run["std"]) for run in runs)
    grad_top = 1.1 * max(max(run["grad"]) for run in runs)
    fig = new_figure(6.8, 5.0)
    grid = fig.add_gridspec(
        2, 2, left=0.1, right=0.98, bottom=0.09, top=0.95, hspace=0.5, wspace=0.3
    )
    stream, grads, last = (fig.add_subplot(grid[i, j]) for i, j in ((0, 0), (0, 1), (1, 0)))
    key = fig.add_subplot(grid[1, 1])
    blocks = range(depth)  # numbered from 0, as the blocks of the stack
    for order, colour in ORDER_COLOURS.items():
        run = stats[depth][order]
        stream.plot(blocks, run["std"], "o-", ms=3, color=colour, label=order)
        grads.plot(blocks, run["grad"], "o-", ms=3, color=colour)
        last.plot(depths, [stats[d][order]["grad"][-1] for d in depths], "o-", color=colour)
        last.plot([depth], [run["grad"][-1]], "o", ms=11, alpha=0.35, color=colour)
    stream.set(
        xlabel="block (0 = first)",
        ylabel="standard deviation",
        ylim=(0, std_top),
        title="the stream after each block",
    )
    grads.set(
        xlabel="block (0 = first)",
        ylabel="gradient norm",
        ylim=(0, grad_top),
        title="gradient of each block",
    )
    for ax in (stream, grads):
        ax.set_xlim(-1, max(depths))
    last.set(
        xlabel="depth $L$",
        ylabel="gradient norm",
        ylim=(0, grad_top),
        title="gradient of the last block",
    )
    last.set_xscale("log", base=2)
    last.minorticks_off()
    last.set_xticks(depths, [str(d) for d in depths])
    key.axis("off")
    handles, names = stream.get_legend_handles_labels()
    key.legend(
        handles,
        names,
        loc="upper left",
        frameon=False,
        fontsize=9,
        title=f"depth L = {depth}, same weights\nin both orders",
        alignment="left",
    )
    key.text(
        0.02,
        0.2,
        "axes fixed across depths;\ncircle: the depth shown",
        transform=key.transAxes,
        fontsize=8,
        color="0.3",
    )
    return fig
