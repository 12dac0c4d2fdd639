"""Figures of the stored experiments on the digits: the ViT against a CNN as the data grows.

See chapter: Training and classification.
"""

from __future__ import annotations

import statistics

from matplotlib.figure import Figure

from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_data_hunger"]

_COLOURS = {"ViT": "tab:blue", "CNN": "tab:orange"}


@book_figure
def plot_data_hunger(
    results: dict, *, title: str = "validation accuracy as the data grows"
) -> Figure:
    """Validation accuracy of the ViT and the CNN against the share of the training part used.

    Lines through the mean over seeds, bands from the lowest to the highest, a dot per seed,
    training images on a log x. Reads ``results["experiments"]["data_size"]["runs"]`` of
    :func:`vitbook.studies.experiments.load_results` (labels ``"<model> <percent>%"``).

    Raises:
        ValueError: the results have no ``data_size`` experiment.

    Example:
        >>> runs = {
        ...     f"{m} {p}%": [{"train_images": p, "validation_accuracy": a + s / 100}
        ...                  for s in range(3)]
        ...     for m, a in (("ViT", 0.5), ("CNN", 0.8)) for p in (10, 100)
        ... }
        >>> fig = plot_data_hunger({"experiments": {"data_size": {"runs": runs}}})
        >>> fig.axes[0].get_legend_handles_labels()[1]
        ['ViT, mean of 3 seeds', 'CNN, mean of 3 seeds']

    See chapter: Training and classification.
    """
    experiments = results.get("experiments", {})
    if "data_size" not in experiments:
        raise ValueError(
            f"no 'data_size' experiment in the results (found {sorted(experiments)}); "
            "pass vitbook.studies.experiments.load_results()."
        )
    runs = experiments["data_size"]["runs"]
    fig = new_figure(6.8, 3.0)
    ax = fig.subplots(gridspec_kw={"left": 0.1, "right": 0.98, "bottom": 0.17, "top": 0.9})
    for model, colour in _COLOURS.items():
        labels = sorted(
            (label for label in runs if label.split()[0] == model),
            key=lambda label: runs[label][0]["train_images"],
        )
        sizes = [runs[label][0]["train_images"] for label in labels]
        accuracies = [[run["validation_accuracy"] for run in runs[label]] for label in labels]
        means = [statistics.fmean(values) for values in accuracies]
        seeds = len(accuracies[0])
        ax.fill_between(
            sizes,
            [min(values) for values in accuracies],
            [max(values) for values in accuracies],
            color=colour,
            alpha=0.2,
            lw=0,
        )
        ax.plot(sizes, means, "-o", color=colour, label=f"{model}, mean of {seeds} seeds")
        for size, values in zip(sizes, accuracies, strict=True):
            ax.plot([size] * len(values), values, ".", color=colour, ms=3)
        for size, label in zip(sizes, labels, strict=True):
            ax.annotate(
                label.split()[1],
                (size, 0.0),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
    ax.set_xscale("log")
    ax.set(
        xlabel="training images (log scale; share of the training part below)",
        ylabel="validation accuracy",
        ylim=(0.0, 1.02),
        title=title,
    )
    ax.legend(loc="center right")
    return fig
