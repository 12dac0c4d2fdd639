"""Figures of the measured experiments on the digits (``vitbook/assets/experiments.json``).

Each takes :func:`vitbook.studies.experiments.load_results`'s dict and draws every seed's
validation accuracy as a dot and the mean with a bar of one standard deviation.

See chapters: Images as sequences of patches; Positional encodings.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from matplotlib.figure import Figure

from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_patch_size_experiment", "plot_position_experiment"]

_READOUT_COLOURS = {"token": "tab:blue", "mean": "tab:orange"}
_READOUT_NAMES = {"token": "class token", "mean": "mean pooling"}
_POSITION_NAMES = {
    "none": "none",
    "learned": "learned 1D",
    "sincos2d": "2D sine-cosine",
    "relative": "relative bias",
}


def _accuracies(runs: list) -> list[float]:
    return [float(run["validation_accuracy"]) for run in runs]


def _mean_and_std(values: list[float]) -> tuple[float, float]:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), spread


@book_figure
def plot_patch_size_experiment(results: Mapping[str, object]) -> Figure:
    """The patch-size experiment: validation accuracy and time per training step against P.

    Right: the fastest training step of 64 digits per patch size, in milliseconds.

    Example:
        >>> from vitbook.studies.experiments import load_results
        >>> fig = plot_patch_size_experiment(load_results())
        >>> [ax.get_xlabel() for ax in fig.axes]
        ['patch size P (tokens N)', 'patch size P (tokens N)']

    See chapter: Images as sequences of patches.
    """
    experiment = results["experiments"]["patch_size"]
    labels = list(experiment["runs"])
    fig = new_figure(6.6, 2.8)
    accuracy_ax, time_ax = fig.subplots(
        1, 2, gridspec_kw={"left": 0.1, "right": 0.98, "bottom": 0.2, "top": 0.88, "wspace": 0.35}
    )
    ticks = []
    for x, label in enumerate(labels):
        runs = experiment["runs"][label]
        values = _accuracies(runs)
        mean, std = _mean_and_std(values)
        accuracy_ax.plot([x] * len(values), values, "o", ms=3, color="0.6")
        accuracy_ax.errorbar(x + 0.15, mean, yerr=std, fmt="s", color="tab:blue", capsize=3)
        ticks.append(f"{label.split('=')[1]} ({runs[0]['tokens']})")
        time_ax.bar(x, 1000 * float(experiment["step_seconds"][label]), color="tab:green")
    for ax in (accuracy_ax, time_ax):
        ax.set_xticks(range(len(labels)), ticks)
        ax.set_xlabel("patch size P (tokens N)")
    accuracy_ax.set_ylabel("validation accuracy")
    accuracy_ax.set_title("seeds (dots), mean and std")
    time_ax.set_ylabel("milliseconds")
    time_ax.set_title("one training step, 64 digits")
    return fig


@book_figure
def plot_position_experiment(results: Mapping[str, object]) -> Figure:
    """The positions experiment: validation accuracy per position encoding and readout.

    One row per position encoding, one marker per readout (class token, mean pooling).

    Example:
        >>> from vitbook.studies.experiments import load_results
        >>> fig = plot_position_experiment(load_results())
        >>> fig.axes[0].get_xlabel()
        'validation accuracy on the digits'

    See chapter: Positional encodings.
    """
    runs = results["experiments"]["positions"]["runs"]
    positions = list(dict.fromkeys(label.split(", ")[0] for label in runs))
    fig = new_figure(6.6, 3.0)
    ax = fig.subplots(gridspec_kw={"left": 0.2, "right": 0.97, "bottom": 0.16, "top": 0.9})
    for y, position in enumerate(positions):
        for offset, readout in ((-0.15, "token"), (0.15, "mean")):
            values = _accuracies(runs[f"{position}, {readout}"])
            mean, std = _mean_and_std(values)
            colour = _READOUT_COLOURS[readout]
            ax.plot(values, [y + offset] * len(values), "o", ms=3, color=colour, alpha=0.4)
            ax.errorbar(
                mean,
                y + offset,
                xerr=std,
                fmt="s",
                color=colour,
                capsize=3,
                label=_READOUT_NAMES[readout] if y == 0 else None,
            )
    ax.set_yticks(range(len(positions)), [_POSITION_NAMES.get(p, p) for p in positions])
    ax.invert_yaxis()
    ax.set_xlabel("validation accuracy on the digits")
    ax.set_title("position information x readout: seeds, mean and std")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper center")
    return fig
