"""Figures of training a classifier: the digits, the learning-rate schedule, learning curves,
predictions and a confusion matrix.

Digits are (B, 1, H, W) floats in [0, 1], drawn dark on white; labels are (B,) int64 classes.

See chapter: Training and classification.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting.style import book_figure, new_figure
from vitbook.train import History

__all__ = [
    "plot_confusion",
    "plot_digits_by_class",
    "plot_history",
    "plot_lr_schedule",
    "plot_predictions",
]

WRONG = "tab:red"


def _digit(ax, image: torch.Tensor) -> None:
    ax.imshow(image[0].detach().cpu().numpy(), cmap="gray_r", vmin=0, vmax=1)
    ax.set(xticks=[], yticks=[])


def _classes(name: str, value: object, ndim: int, shape_doc: str) -> torch.Tensor:
    """Check an integer tensor of classes or counts."""
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.ndim != ndim:
        raise TypeError(f"{name} must be an integer tensor of shape {shape_doc}, got {value!r}.")
    return value


def _digits(name: str, images: object, labels: object) -> tuple[torch.Tensor, torch.Tensor]:
    images = _checks.tensor(name, images, 4, "(B, 1, H, W)")
    labels = _classes("labels", labels, 1, "(B,)")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images and {len(labels)} labels; pass one label each.")
    return images, labels


@book_figure
def plot_digits_by_class(
    images: torch.Tensor, labels: torch.Tensor, *, per_class: int = 2, title: str = ""
) -> Figure:
    """The first ``per_class`` images of every class, one column per class.

    ``labels`` (B,) in 0 .. n_cls - 1, with ``per_class`` images of every class.

    Example:
        >>> labels = torch.arange(20) % 10
        >>> fig = plot_digits_by_class(torch.rand(20, 1, 8, 8), labels, title="digits")
        >>> [ax.get_title() for ax in fig.axes[:3]], fig.texts[0].get_text()
        (['0', '1', '2'], 'digits')

    See chapter: Training and classification.
    """
    images, labels = _digits("images", images, labels)
    classes = int(labels.max()) + 1
    height = 0.68 * per_class + (0.55 if title else 0.3)
    fig = new_figure(6.8, height)
    axes = fig.subplots(
        per_class,
        classes,
        squeeze=False,
        gridspec_kw={
            "left": 0.01,
            "right": 0.99,
            "bottom": 0.02,
            "top": 1 - (0.5 if title else 0.25) / height,
            "wspace": 0.1,
            "hspace": 0.08,
        },
    )
    for k in range(classes):
        examples = images[labels == k]
        if len(examples) < per_class:
            raise ValueError(f"class {k} has {len(examples)} images; per_class={per_class}.")
        for row in range(per_class):
            _digit(axes[row, k], examples[row])
        axes[0, k].set_title(str(k))
    if title:
        fig.text(0.5, 1 - 0.05 / height, title, ha="center", va="top", fontsize=10)
    return fig


@book_figure
def plot_lr_schedule(
    factors: Sequence[float], steps_per_epoch: int, warmup_epochs: float
) -> Figure:
    """A learning-rate schedule: the factor of the peak rate at every step, against the epoch.

    Example:
        >>> fig = plot_lr_schedule([0.5, 1.0, 0.5, 0.0], steps_per_epoch=2, warmup_epochs=1)
        >>> fig.axes[0].lines[0].get_xdata().tolist()
        [0.0, 0.5, 1.0, 1.5]

    See chapter: Training and classification.
    """
    fig = new_figure(6.8, 2.6)
    ax = fig.subplots(gridspec_kw={"left": 0.1, "right": 0.98, "bottom": 0.2, "top": 0.88})
    ax.plot(np.arange(len(factors)) / steps_per_epoch, factors)
    ax.axvline(warmup_epochs, color="grey", ls=":")
    ax.text(warmup_epochs + 0.5, 0.05, "end of warm-up")
    ax.set(
        xlabel="epoch",
        ylabel="learning rate / peak",
        ylim=(0, 1.05),
        title="linear warm-up, cosine decay",
    )
    return fig


@book_figure
def plot_history(
    history: History, *, title: str = "learning curves", eval_label: str = "test"
) -> Figure:
    """Training loss (left) and accuracies (right) against the epoch.

    ``history``: a :class:`vitbook.train.History`; without training accuracies only
    ``eval_accuracy`` is drawn, named ``eval_label`` in the legend.

    Example:
        >>> from vitbook.train import History
        >>> history = History(train_loss=[2.0, 1.0], train_accuracy=[0.3, 0.7],
        ...                   eval_accuracy=[0.4, 0.8], seconds=[0.1, 0.1])
        >>> fig = plot_history(history)
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['cross-entropy', 'accuracy']

    See chapter: Training and classification.
    """
    if not isinstance(history, History) or history.epochs == 0:
        raise ValueError("history must be a History with at least one epoch, as fit returns.")
    epochs = range(1, history.epochs + 1)
    fig = new_figure(6.8, 3.0)
    loss_ax, acc_ax = fig.subplots(
        1, 2, gridspec_kw={"left": 0.1, "right": 0.98, "bottom": 0.16, "top": 0.8, "wspace": 0.3}
    )
    loss_ax.plot(epochs, history.train_loss, color="C0")
    loss_ax.set(xlabel="epoch", ylabel="cross-entropy", title="training loss", yscale="log")
    if history.train_accuracy:
        acc_ax.plot(epochs, history.train_accuracy, color="C0", label="training batches")
    if history.eval_accuracy:
        acc_ax.plot(epochs, history.eval_accuracy, color="C1", label=eval_label)
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.01))
    acc_ax.grid(alpha=0.3)
    acc_ax.legend(loc="lower right")
    fig.suptitle(title)
    return fig


@book_figure
def plot_predictions(
    images: torch.Tensor,
    labels: torch.Tensor,
    probabilities: torch.Tensor,
    *,
    count: int = 16,
    columns: int = 8,
) -> Figure:
    """The first ``count`` images, each titled with its predicted class and that probability.

    ``probabilities`` (B, n_cls); wrong predictions are titled in red.

    Example:
        >>> probabilities = torch.tensor([[0.9, 0.1], [0.3, 0.7]])
        >>> fig = plot_predictions(torch.rand(2, 1, 8, 8), torch.tensor([0, 0]), probabilities,
        ...                        count=2, columns=2)
        >>> [ax.get_title() for ax in fig.axes]
        ['0 (0.90)', '1 (0.70)']

    See chapter: Training and classification.
    """
    images, labels = _digits("images", images, labels)
    probabilities = _checks.tensor("probabilities", probabilities, 2, "(B, n_cls)")
    count = min(count, len(images))
    rows = -(-count // columns)
    height = 0.95 * rows + 0.1
    fig = new_figure(6.8, height)
    axes = fig.subplots(
        rows,
        columns,
        squeeze=False,
        gridspec_kw={
            "left": 0.01,
            "right": 0.99,
            "bottom": 0.02,
            "top": 1 - 0.3 / height,
            "wspace": 0.15,
            "hspace": 0.45,
        },
    )
    top, guess = probabilities.max(dim=1)
    for k, ax in enumerate(axes.flat):
        if k >= count:
            ax.axis("off")
            continue
        _digit(ax, images[k])
        colour = "black" if guess[k] == labels[k] else WRONG
        ax.set_title(f"{guess[k].item()} ({top[k]:.2f})", color=colour, fontsize=9)
    return fig


@book_figure
def plot_confusion(
    confusion: torch.Tensor,
    images: torch.Tensor,
    labels: torch.Tensor,
    predicted: torch.Tensor,
    *,
    columns: int = 3,
) -> Figure:
    """A confusion matrix (left) and the misclassified images (right), true -> predicted.

    ``confusion`` (n_cls, n_cls), row = true, column = predicted, colour on a square-root scale;
    ``labels``, ``predicted`` (B,) for the (B, 1, H, W) ``images``.

    Example:
        >>> confusion = torch.tensor([[3, 1], [0, 2]])
        >>> labels, predicted = torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 0, 0, 1, 1, 1])
        >>> fig = plot_confusion(confusion, torch.rand(6, 1, 8, 8), labels, predicted)
        >>> [ax.get_title() for ax in fig.axes]
        ['confusion matrix, 6 images', '1 misclassified: true -> predicted', '0 -> 1']

    See chapter: Training and classification.
    """
    from matplotlib.colors import PowerNorm

    confusion = _classes("confusion", confusion, 2, "(n_cls, n_cls)")
    images, labels = _digits("images", images, labels)
    wrong = (predicted != labels).nonzero().squeeze(1).tolist()
    fig = new_figure(6.8, 3.7)
    ax = fig.add_axes((0.07, 0.12, 0.5, 0.78))
    counts = confusion.numpy()
    ax.imshow(counts, cmap="Blues", norm=PowerNorm(0.5, vmin=0, vmax=counts.max()))
    for i, j in zip(*np.nonzero(counts), strict=True):
        colour = "white" if counts[i, j] > counts.max() / 2 else "black"
        ax.text(j, i, str(counts[i, j]), ha="center", va="center", color=colour, fontsize=8)
    k = len(counts)
    ax.set(
        xticks=range(k),
        yticks=range(k),
        xlabel="predicted",
        ylabel="true",
        title=f"confusion matrix, {int(counts.sum())} images",
    )
    rows = max(1, -(-len(wrong) // columns))
    side = min(0.72 / (rows * 1.45), 0.3 / columns * 3)  # figure heights, below the title
    panel = fig.add_axes((0.62, 0.12, 0.37, 0.78))
    panel.axis("off")
    panel.set_title(f"{len(wrong)} misclassified: true -> predicted")
    for n, index in enumerate(wrong):
        row, col = divmod(n, columns)
        inset = fig.add_axes(
            (
                0.64 + col * 0.37 / columns,
                0.83 - side - row * side * 1.45,
                side * 3.7 / 6.8 * 0.95,
                side,
            )
        )
        _digit(inset, images[index])
        inset.set_title(f"{labels[index].item()} -> {predicted[index].item()}", fontsize=9)
    return fig
