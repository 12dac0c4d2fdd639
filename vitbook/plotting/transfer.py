"""Figure of the transfer miniature: test accuracy against the labels per class of the new task.

See chapter: Fine-tuning a pretrained ViT.
"""

from __future__ import annotations

import statistics

from matplotlib.figure import Figure

from vitbook.plotting.style import book_figure, new_figure

__all__ = ["plot_transfer"]

# (setting, colour, marker, label) of each panel.
_METHODS = (
    ("scratch", "tab:gray", "s", "from scratch"),
    ("linear probe", "tab:orange", "^", "linear probe"),
    ("fine-tune", "tab:blue", "o", "fine-tune"),
)
_RESOLUTION = (
    ("fine-tune", "tab:blue", "o", "8 px"),
    ("fine-tune 12 px", "tab:green", "D", "12 px, positions interpolated"),
    ("fine-tune 12 px, new positions", "tab:red", "v", "12 px, new positions"),
)


def _draw(ax, settings: dict, lines: tuple, shots_x: dict[str, float]) -> None:
    for setting, colour, marker, label in lines:
        if setting not in settings:
            continue
        by_shots = settings[setting]
        shots = [s for s in shots_x if s in by_shots]
        xs = [shots_x[s] for s in shots]
        values = [[run["test_accuracy"] for run in by_shots[s]["runs"]] for s in shots]
        means = [statistics.fmean(v) for v in values]
        ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values],
                        color=colour, alpha=0.15, lw=0)  # fmt: skip
        ax.plot(xs, means, "-", marker=marker, color=colour, ms=5,
                label=f"{label} ({len(values[0])} seeds)")  # fmt: skip
        for x, v in zip(xs, values, strict=True):
            ax.plot([x] * len(v), v, ".", color=colour, ms=2.5, alpha=0.7)


@book_figure
def plot_transfer(results: dict, *, title: str = "") -> Figure:
    """Test accuracy on the new task against the labelled examples per class, two panels.

    Left: scratch, linear probe and fine-tuning (longer budgets hollow beside "all"); right:
    fine-tuning at 8 px against 12 px. Lines through the mean, bands from the lowest to the
    highest seed, a dot per seed, log x. Reads ``results["settings"]`` of
    :func:`vitbook.studies.transfer_digits.load_results`.

    Raises:
        ValueError: the results have none of the three methods.

    Example:
        >>> runs = lambda a, n: {"lr": 0.1, "runs": [
        ...     {"test_accuracy": a + s / 100, "train_images": n} for s in range(3)]}
        >>> settings = {m: {"1": runs(0.3 + i / 10, 5), "all": runs(0.8, 500)}
        ...             for i, m in enumerate(["scratch", "linear probe", "fine-tune"])}
        >>> fig = plot_transfer({"settings": settings})
        >>> fig.axes[0].get_legend_handles_labels()[1]
        ['from scratch (3 seeds)', 'linear probe (3 seeds)', 'fine-tune (3 seeds)']

    See chapter: Fine-tuning a pretrained ViT.
    """
    settings = results.get("settings", {})
    if not any(setting in settings for setting, *_ in _METHODS):
        raise ValueError(
            f"no scratch, linear probe or fine-tune runs in the results (found "
            f"{sorted(settings)}); pass vitbook.studies.transfer_digits.load_results()."
        )
    reference = next(settings[s] for s, *_ in _METHODS if s in settings)
    classes = None
    shots_x: dict[str, float] = {}
    for shots, entry in reference.items():
        if shots == "all":
            images = statistics.fmean(run["train_images"] for run in entry["runs"])
            one = reference.get("1")
            classes = one["runs"][0]["train_images"] if one else None
            shots_x[shots] = images / classes if classes else images
        else:
            shots_x[shots] = float(shots)
    fig = new_figure(6.8, 3.5)
    left, right = fig.subplots(
        1, 2, sharey=True,
        gridspec_kw={"left": 0.09, "right": 0.99, "bottom": 0.2, "top": 0.83 if title else 0.91,
                     "wspace": 0.06},
    )  # fmt: skip
    _draw(left, settings, _METHODS, shots_x)
    # a longer budget: one hollow marker per method, side by side at "all" (their means may
    # coincide)
    offsets = {"scratch": 1 / 1.1, "linear probe": 1.0, "fine-tune": 1.1}
    for method, colour, marker, label in _METHODS:
        long = next((s for s in settings if s.startswith(f"{method}, ")), None)
        if long and "all" in settings[long] and "all" in shots_x:
            values = [run["test_accuracy"] for run in settings[long]["all"]["runs"]]
            left.plot([shots_x["all"] * offsets[method]], [statistics.fmean(values)], marker,
                      mfc="none", color=colour, ms=8, label=long.replace(method, label))
    _draw(right, settings, _RESOLUTION, shots_x)
    labels = [s if s != "all" else f"all\n({shots_x[s]:.0f})" for s in shots_x]
    for ax, heading in ((left, "three ways to use the pre-training"),
                        (right, "fine-tuning at a higher resolution")):  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlim(min(shots_x.values()) / 1.3, max(shots_x.values()) * 1.6)
        ax.set_xticks(list(shots_x.values()), labels)
        ax.minorticks_off()
        ax.set_xlabel("labelled examples per class")
        ax.set_title(heading)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    left.set(ylabel="test accuracy", ylim=(0.0, 1.02))
    if title:
        fig.suptitle(title)
    return fig
