"""Figures of the photo chapter: photos by class, augmentations, the recipe ladder.

Images are (C, H, W) or (B, C, H, W) floats in [0, 1], as :mod:`vitbook.data.cifar` returns them.

See chapter: Real photos on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure

from vitbook import _checks
from vitbook.plotting.analysis import show_image
from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = ["plot_augmented", "plot_ladder", "plot_photos_by_class"]


@book_figure
def plot_photos_by_class(
    images: torch.Tensor, labels: torch.Tensor, classes: Sequence[str], *, per_class: int = 3
) -> Figure:
    """The first ``per_class`` photos of every class, one column per class.

    Args:
        images: (B, 3, H, W) in [0, 1].
        labels: (B,) class indices; every class needs ``per_class`` photos.
        classes: the class names, one per column.
        per_class: the rows.

    Example:
        >>> labels = torch.arange(9) % 3
        >>> fig = plot_photos_by_class(torch.rand(9, 3, 8, 8), labels, ["a", "b", "c"])
        >>> [ax.get_title() for ax in fig.axes[:3]]
        ['a', 'b', 'c']

    See chapter: Real photos on a GPU.
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

    Args:
        rows: row label -> (B, 3, H, W) photos in [0, 1]; every row the same B (2 to 10).

    Example:
        >>> photos = torch.rand(4, 3, 8, 8)
        >>> fig = plot_augmented({"original": photos, "flipped": photos.flip(-1)})
        >>> fig.axes[4].get_ylabel()
        'flipped'

    See chapter: Real photos on a GPU.
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

    Times are left out on purpose: recorded wall-clock minutes of runs that shared a GPU are not
    the time of a run alone.

    Args:
        table: row -> ``{"test_mean", "test_min", "test_max", "n"}`` (what
            :func:`vitbook.studies.ladder.summarize` returns).
        labels: row -> the label to print; default the row's name.
        anchors: label -> an accuracy from elsewhere, drawn as a dashed line.

    Example:
        >>> row = {"test_mean": 0.8, "test_min": 0.79, "test_max": 0.81, "n": 3}
        >>> fig = plot_ladder({"a": row}, anchors={"paper": 0.9})
        >>> fig.axes[0].get_xlabel()
        'test accuracy (mean; bar = range over seeds)'
        >>> fig.axes[0].get_yticklabels()[0].get_text()
        'a\\n80.0%, 3 seeds'

    See chapter: Real photos on a GPU.
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
