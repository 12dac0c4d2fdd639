"""plot_transfer: the recorded miniature, drawn as accuracy against labels per class."""

import statistics

import matplotlib.pyplot as plt
import numpy as np
import pytest

from vitbook.plotting import plot_transfer


@pytest.fixture(autouse=True)
def no_figures_left_open():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


def runs(values, images):
    return {"lr": 0.1, "runs": [{"test_accuracy": v, "train_images": images} for v in values]}


def fake_results():
    """Three seeds of every setting; 'all' holds 200 images of 5 classes (the 1-label runs hold
    5 images), so it sits at 40 per class."""
    settings = {}
    for offset, setting in enumerate(["scratch", "linear probe", "fine-tune",
                                      "fine-tune 12 px", "fine-tune 12 px, new positions"]):
        settings[setting] = {
            "1": runs([0.2 + offset / 20, 0.3 + offset / 20, 0.4 + offset / 20], 5),
            "5": runs([0.5, 0.6, 0.7 + offset / 100], 25),
            "all": runs([0.8, 0.9, 0.85], 200),
        }
    settings["scratch, 1000 steps"] = {"all": runs([0.9, 0.92, 0.94], 200)}
    settings["fine-tune, 1000 steps"] = {"all": runs([0.95, 0.96, 0.97], 200)}
    return {"settings": settings}


def test_each_line_goes_through_the_mean_over_seeds_at_the_labels_per_class():
    results = fake_results()
    fig = plot_transfer(results)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "from scratch (3 seeds)", "linear probe (3 seeds)", "fine-tune (3 seeds)",
        "from scratch, 1000 steps", "fine-tune, 1000 steps",
    ]  # fmt: skip
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "8 px (3 seeds)", "12 px, positions interpolated (3 seeds)",
        "12 px, new positions (3 seeds)",
    ]  # fmt: skip
    means = [line for line in left.lines if line.get_linestyle() == "-"]
    for line, setting in zip(means, ["scratch", "linear probe", "fine-tune"], strict=True):
        expected = [statistics.fmean(r["test_accuracy"] for r in results["settings"][setting][s]
                                     ["runs"]) for s in ("1", "5", "all")]  # fmt: skip
        np.testing.assert_allclose(line.get_ydata(), expected)
        np.testing.assert_allclose(line.get_xdata(), [1, 5, 40])  # 200 images / 5 classes
    hollow = [line for line in left.lines if line.get_mfc() == "none"]
    assert [line.get_marker() for line in hollow] == ["s", "o"]  # scratch's, fine-tuning's
    assert [line.get_ydata()[0] for line in hollow] == pytest.approx([0.92, 0.96])
    tuned_left = means[2].get_ydata()
    tuned_right = [line for line in right.lines if line.get_linestyle() == "-"][0].get_ydata()
    np.testing.assert_allclose(tuned_left, tuned_right)  # the 8 px line is fine-tuning's
    assert [t.get_text() for t in left.get_xticklabels()] == ["1", "5", "all\n(40)"]
    assert left.get_xscale() == "log" and left.get_ylabel() == "test accuracy"
    dots = [line for line in left.lines if line.get_marker() == "."]
    assert len(dots) == 9  # one column of seeds per setting and number of labels


def test_the_recorded_results_are_drawn():
    from vitbook.studies.transfer_digits import load_results, summary

    results = load_results()
    fig = plot_transfer(results)
    left = fig.axes[0]
    table = summary(results)
    tuned = [line for line in left.lines if line.get_linestyle() == "-"][2]
    np.testing.assert_allclose(
        tuned.get_ydata(), [table["fine-tune"][s]["mean"] for s in ("1", "5", "20", "all")]
    )


def test_results_without_methods_are_refused():
    with pytest.raises(ValueError, match="no scratch, linear probe or fine-tune runs"):
        plot_transfer({"settings": {"something else": {}}})
