"""Figures of the photo chapter: photos by class, augmentations, the recipe ladder, the CPU run's
time to accuracy, a confusion matrix of photos and the photos a model gets wrong.

Images are (C, H, W) or (B, C, H, W) floats in [0, 1], as :mod:`vitbook.data.cifar` returns them.

See chapter: Real photos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting.analysis import show_image
from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = ["plot_augmented", "plot_ladder", "plot_photo_confusion", "plot_photo_mistakes",
           "plot_photos_by_class", "plot_time_to_accuracy"]  # fmt: skip


@book_figure
def plot_photos_by_class(
    images: torch.Tensor, labels: torch.Tensor, classes: Sequence[str], *, per_class: int = 3
) -> Figure:
    """The first ``per_class`` photos of every class, one column per class.

    ``images`` (B, 3, H, W); ``labels`` (B,) with ``per_class`` photos of every class.

    Example:
        >>> labels = torch.arange(9) % 3
        >>> fig = plot_photos_by_class(torch.rand(9, 3, 8, 8), labels, ["a", "b", "c"])
        >>> [ax.get_title() for ax in fig.axes[:3]]
        ['a', 'b', 'c']

    See chapter: Real photos.
    """
    images = _checks.tensor("images", images, 4, "(B, C, H, W)")
    columns = len(classes)
    picked = []
    for c in range(columns):
        members = torch.nonzero(labels == c).flatten()[:per_class]
        if len(members) < per_class:
            raise ValueError(
                f"class {c} ({classes[c]}) has {len(members)} photos, fewer than "
                f"per_class={per_class}; pass more photos or a smaller per_class."
            )
        picked.append(members)
    side = min(COLUMN_WIDTH / columns, 1.2)
    fig = new_figure(side * columns, side * per_class + 0.3, layout="constrained")
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02, wspace=0.02, hspace=0.02)
    axes = fig.subplots(per_class, columns, squeeze=False)
    for c, members in enumerate(picked):
        axes[0, c].set_title(classes[c].replace("_", " "))
        for row, index in enumerate(members.tolist()):
            show_image(axes[row, c], images[index])
    return fig


@book_figure
def plot_augmented(rows: Mapping[str, torch.Tensor]) -> Figure:
    """The same photos under several augmentations: one row per augmentation.

    ``rows``: label -> (B, 3, H, W), one B (2 to 10) for every row.

    Example:
        >>> photos = torch.rand(4, 3, 8, 8)
        >>> fig = plot_augmented({"original": photos, "flipped": photos.flip(-1)})
        >>> fig.axes[4].get_ylabel()
        'flipped'

    See chapter: Real photos.
    """
    if not rows:
        raise ValueError("rows is empty; pass {label: photos (B, 3, H, W)} for each row.")
    counts = {len(_checks.tensor(f"rows[{k!r}]", v, 4, "(B, C, H, W)")) for k, v in rows.items()}
    if len(counts) != 1 or not 2 <= next(iter(counts)) <= 10:
        raise ValueError(f"rows hold {sorted(counts)} photos; give each row the same 2 to 10.")
    count = counts.pop()
    side = COLUMN_WIDTH / (count + 1.1)
    fig = new_figure(COLUMN_WIDTH, side * len(rows) + 0.1, layout="constrained")
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02, wspace=0.02, hspace=0.02)
    axes = fig.subplots(len(rows), count, squeeze=False)
    for r, (name, photos) in enumerate(rows.items()):
        for k in range(count):
            show_image(axes[r, k], photos[k])
        axes[r, 0].set_ylabel(name, rotation=0, ha="right", va="center")
    return fig


@book_figure
def plot_ladder(
    table: Mapping[str, Mapping[str, float]],
    *,
    labels: Mapping[str, str] | None = None,
    anchors: Mapping[str, float] | None = None,
) -> Figure:
    """Test accuracy of each row of a recipe ladder: mean and the range over seeds.

    ``table``: row -> ``{"test_mean", "test_min", "test_max", "n"}``
    (:func:`vitbook.studies.ladder.summarize`); ``anchors``: label -> an accuracy drawn dashed.
    No times: runs that shared a GPU do not time a run alone.

    Example:
        >>> row = {"test_mean": 0.8, "test_min": 0.79, "test_max": 0.81, "n": 3}
        >>> fig = plot_ladder({"a": row}, anchors={"paper": 0.9})
        >>> fig.axes[0].get_xlabel()
        'test accuracy (mean; bar = range over seeds)'
        >>> fig.axes[0].get_yticklabels()[0].get_text()
        'a\\n80.0%, 3 seeds'

    See chapter: Real photos.
    """
    if not table:
        raise ValueError("table is empty; pass vitbook.studies.ladder.summarize(results).")
    names = list(table)
    height = 0.55 * len(names) + 1.2
    fig = new_figure(COLUMN_WIDTH, height)
    fig.subplots_adjust(left=0.34, right=0.97, bottom=0.55 / height, top=1 - 0.15 / height)
    ax = fig.subplots()
    for y, name in enumerate(names):
        row = table[name]
        ax.errorbar(
            row["test_mean"], y,
            xerr=[[row["test_mean"] - row["test_min"]], [row["test_max"] - row["test_mean"]]],
            fmt="o", color="C0", capsize=3,
        )  # fmt: skip
    for k, (name, value) in enumerate((anchors or {}).items()):
        ax.axvline(value, color=f"C{k + 1}", ls="--", label=f"{name}: {value:.1%}")
    ticks = [
        f"{(labels or {}).get(n, n)}\n{table[n]['test_mean']:.1%}, {table[n]['n']} "
        f"{'seed' if table[n]['n'] == 1 else 'seeds'}"
        for n in names
    ]
    ax.set_yticks(range(len(names)), ticks)
    ax.invert_yaxis()
    ax.margins(y=0.3)
    values = [table[n][k] for n in names for k in ("test_min", "test_max")]
    values += list((anchors or {}).values())
    ax.set_xlim(min(values) - 0.02, max(values) + 0.02)
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.set_xlabel("test accuracy (mean; bar = range over seeds)")
    if anchors:
        ax.legend(loc="lower left")
    return fig


@book_figure
def plot_time_to_accuracy(
    curves: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    minutes_of: str,
    levels: Sequence[float] = (),
) -> Figure:
    """Validation accuracy against minutes (left, one run) and against epochs (right, every run).

    ``curves``: label -> ``{"val_accuracy", "epoch_seconds"}`` (seconds only for ``minutes_of``);
    ``levels`` are marked where that run first reached them.

    Example:
        >>> run = {"val_accuracy": [0.4, 0.6, 0.7], "epoch_seconds": [60.0, 60.0, 60.0]}
        >>> fig = plot_time_to_accuracy({"cpu": run, "gpu": {"val_accuracy": [0.5, 0.8]}},
        ...                             minutes_of="cpu", levels=(0.5,))
        >>> [ax.get_xlabel() for ax in fig.axes]
        ['minutes of training', 'epoch']

    See chapter: Real photos.
    """
    if minutes_of not in curves:
        raise ValueError(f"minutes_of={minutes_of!r} is not one of the curves {list(curves)}.")
    timed = curves[minutes_of]
    seconds, accuracy = list(timed["epoch_seconds"]), list(timed["val_accuracy"])
    if len(seconds) != len(accuracy) or not seconds:
        raise ValueError("the timed run needs one epoch_seconds entry per val_accuracy entry.")
    fig = new_figure(COLUMN_WIDTH, 3.0)
    left, right = fig.subplots(
        1, 2, gridspec_kw={"left": 0.09, "right": 0.98, "bottom": 0.17, "top": 0.86,
                           "wspace": 0.28})  # fmt: skip
    minutes = [sum(seconds[: k + 1]) / 60 for k in range(len(seconds))]
    left.plot(minutes, accuracy, color="C0")
    for level in levels:
        reached = next((m for m, a in zip(minutes, accuracy, strict=True) if a >= level), None)
        if reached is not None:
            left.plot([reached], [level], "o", color="C1", ms=4)
            left.annotate(f"{level:.0%}: {reached:.0f} min", (reached, level),
                          xytext=(6, -10), textcoords="offset points", fontsize=8)
    left.set(xlabel="minutes of training", ylabel="validation accuracy", ylim=(0, 1),
             title=minutes_of)  # fmt: skip
    for k, (label, run) in enumerate(curves.items()):
        values = list(run["val_accuracy"])
        right.plot(range(1, len(values) + 1), values, color=f"C{k}", label=label)
    right.set(xlabel="epoch", ylim=(0, 1), title="against epochs")
    right.legend(loc="lower right")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    return fig


@book_figure
def plot_photo_confusion(confusion: torch.Tensor, classes: Sequence[str]) -> Figure:
    """A confusion matrix of photos: row = true class, column = predicted, counts in the cells.

    Colour on a square-root scale.

    Example:
        >>> fig = plot_photo_confusion(torch.tensor([[9, 1], [2, 8]]), ["cat", "dog"])
        >>> fig.axes[0].get_ylabel(), fig.axes[0].get_title()
        ('true class', 'confusion matrix, 20 photos')

    See chapter: Real photos.
    """
    from matplotlib.colors import PowerNorm

    if not isinstance(confusion, torch.Tensor) or confusion.is_floating_point():
        raise TypeError("confusion must be a tensor of integer counts (n_cls, n_cls).")
    k = len(classes)
    if confusion.shape != (k, k):
        raise ValueError(f"confusion has shape {tuple(confusion.shape)}; with {k} classes it "
                         f"must be ({k}, {k}).")  # fmt: skip
    counts = confusion.detach().cpu().numpy()
    fig = new_figure(COLUMN_WIDTH * 0.75, COLUMN_WIDTH * 0.68)
    ax = fig.add_axes((0.22, 0.22, 0.76, 0.7))
    ax.imshow(counts, cmap="Blues", norm=PowerNorm(0.5, vmin=0, vmax=max(1, counts.max())))
    for i in range(k):
        for j in range(k):
            if counts[i, j]:
                colour = "white" if counts[i, j] > counts.max() / 2 else "black"
                ax.text(j, i, str(int(counts[i, j])), ha="center", va="center", color=colour,
                        fontsize=8)  # fmt: skip
    names = [name.replace("_", " ") for name in classes]
    ax.set_xticks(range(k), names, rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(k), names)
    ax.set(xlabel="predicted class", ylabel="true class",
           title=f"confusion matrix, {int(counts.sum())} photos")  # fmt: skip
    return fig


@book_figure
def plot_photo_mistakes(
    images: torch.Tensor,
    labels: torch.Tensor,
    predicted: torch.Tensor,
    classes: Sequence[str],
    *,
    count: int = 12,
    columns: int = 6,
) -> Figure:
    """The first ``count`` photos a model gets wrong, each titled "true / predicted".

    ``images`` (B, 3, H, W); ``labels``, ``predicted`` (B,) class indices.

    Example:
        >>> fig = plot_photo_mistakes(torch.rand(3, 3, 8, 8), torch.tensor([0, 1, 1]),
        ...                           torch.tensor([1, 1, 0]), ["cat", "dog"], count=2)
        >>> [ax.get_title() for ax in fig.axes[:2]]
        ['cat\\nread as dog', 'dog\\nread as cat']

    See chapter: Real photos.
    """
    images = _checks.tensor("images", images, 4, "(B, C, H, W)")
    wrong = (predicted != labels).nonzero().flatten()[:count].tolist()
    if not wrong:
        raise ValueError("the model gets every photo right: there is no mistake to show.")
    rows = -(-len(wrong) // columns)
    side = COLUMN_WIDTH / columns
    fig = new_figure(COLUMN_WIDTH, rows * (side + 0.35), layout="constrained")
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02, wspace=0.02, hspace=0.02)
    axes = fig.subplots(rows, columns, squeeze=False)
    for n, ax in enumerate(axes.flat):
        if n >= len(wrong):
            ax.axis("off")
            continue
        index = wrong[n]
        show_image(ax, images[index])
        ax.set_title(f"{classes[int(labels[index])]}\nread as {classes[int(predicted[index])]}",
                     fontsize=8)  # fmt: skip
    return fig
