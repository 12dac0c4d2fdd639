"""Figures of the distillation miniature: accuracy per setting, and attention distance per head.

Both take :func:`vitbook.studies.distill_digits.load_results`'s dict (``runs[label]``: one run
per seed).

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from matplotlib.figure import Figure

from vitbook.plotting.style import COLUMN_WIDTH, book_figure, new_figure

__all__ = ["plot_distillation", "plot_distance_by_setting"]


def _runs(results: dict, labels: Sequence[str] | None) -> dict[str, list[dict]]:
    runs = results.get("runs", {})
    labels = list(runs) if labels is None else list(labels)
    missing = [label for label in labels if label not in runs]
    if missing:
        raise ValueError(
            f"no runs for {missing} in the results (found {sorted(runs)}); pass "
            "vitbook.studies.distill_digits.load_results() and labels it holds."
        )
    return {label: runs[label] for label in labels}


@book_figure
def plot_distillation(
    results: dict,
    labels: Sequence[str] | None = None,
    *,
    metric: str = "validation_accuracy",
    reference: str | None = "CNN teacher",
    title: str = "validation accuracy, every seed",
) -> Figure:
    """One row per setting: every seed's accuracy as a dot, the mean as a bar.

    ``labels`` default to all settings; ``metric`` is the run field drawn; ``reference``'s
    mean is drawn dashed across.

    Raises:
        ValueError: a label the results do not hold.

    Example:
        >>> runs = {"teacher": [{"validation_accuracy": 0.97}, {"validation_accuracy": 0.98}],
        ...         "student": [{"validation_accuracy": 0.9}, {"validation_accuracy": 0.8}]}
        >>> fig = plot_distillation({"runs": runs}, reference="teacher")
        >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
        ['teacher', 'student']

    See chapter: Can a ViT beat the CNN that taught it?
    """
    runs = _runs(results, labels)
    fig = new_figure(COLUMN_WIDTH, 0.42 * len(runs) + 1.0, layout="constrained")
    ax = fig.subplots()
    low = min(run[metric] for seeds in runs.values() for run in seeds)
    left = max(0.0, low - 0.12)  # room for the means' labels, left of every dot
    rows = range(len(runs))[::-1]  # the first setting on top
    for row, (label, seeds) in zip(rows, runs.items(), strict=True):
        values = [run[metric] for run in seeds]
        mean = statistics.fmean(values)
        ax.barh(row, mean - left, left=left, height=0.6, alpha=0.35,
                color="C0" if label != reference else "C1")  # fmt: skip
        ax.plot(values, [row] * len(values), "o", color="black", ms=4, alpha=0.7)
        ax.text(left + 0.005, row, f"mean {mean:.3f}", va="center", fontsize=8)
    if reference is not None and reference in runs:
        teacher = statistics.fmean(run[metric] for run in runs[reference])
        ax.axvline(teacher, color="C1", ls="--", lw=1)
    ax.set(yticks=list(rows), yticklabels=list(runs), xlim=(left, 1.0),
           xlabel=metric.replace("_", " ") + " (dots: seeds; bars: mean)", title=title)  # fmt: skip
    return fig


@book_figure
def plot_distance_by_setting(
    results: dict,
    labels: Sequence[str],
    *,
    farthest: float | None = None,
    even_spread: float | None = None,
    title: str = "mean attention distance of every head",
) -> Figure:
    """Mean attention distance of every head of every seed, one panel per layer.

    Each run of ``labels`` needs ``attention_distance`` ([layer][head] pixels); ``even_spread``
    is drawn dashed, ``farthest`` tops the y axis.

    Raises:
        ValueError: a label the results do not hold, or a run without attention distances.

    Example:
        >>> runs = {"a": [{"attention_distance": [[1.0, 2.0], [3.0, 4.0]]}],
        ...         "b": [{"attention_distance": [[2.0, 2.5], [3.5, 3.0]]}]}
        >>> fig = plot_distance_by_setting({"runs": runs}, ["a", "b"])
        >>> len(fig.axes), [t.get_text() for t in fig.axes[0].get_xticklabels()]
        (2, ['a', 'b'])

    See chapter: Can a ViT beat the CNN that taught it?
    """
    runs = _runs(results, labels)
    lacking = [label for label, seeds in runs.items()
               if any("attention_distance" not in run for run in seeds)]  # fmt: skip
    if lacking:
        raise ValueError(f"the runs of {lacking} have no attention_distance (not ViTs?).")
    depth = len(next(iter(runs.values()))[0]["attention_distance"])
    fig = new_figure(COLUMN_WIDTH, 3.0, layout="constrained")
    axes = fig.subplots(1, depth, sharey=True, squeeze=False)[0]
    for layer, ax in enumerate(axes):
        for column, seeds in enumerate(runs.values()):
            heads = [d for run in seeds for d in run["attention_distance"][layer]]
            offsets = [column + (i % 9 - 4) * 0.04 for i in range(len(heads))]
            ax.plot(offsets, heads, "o", color=f"C{column}", ms=3, alpha=0.5)
            mean = statistics.fmean(heads)
            ax.plot([column - 0.3, column + 0.3], [mean, mean], color="black", lw=1.5)
        if even_spread is not None:
            ax.axhline(even_spread, color="grey", ls="--", lw=1)
        ax.set_xticks(range(len(runs)), list(runs), rotation=30, ha="right")
        ax.set_title(f"layer {layer}")
    axes[0].set_ylabel("mean attention distance (px)")
    axes[0].set_ylim(0, farthest)
    fig.suptitle(title)
    return fig
