"""The figures of training: digits by class, predictions and the confusion matrix."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from vitbook.plotting import (
    plot_confusion,
    plot_digits_by_class,
    plot_lr_schedule,
    plot_predictions,
)


@pytest.fixture(autouse=True)
def no_figures_left_open():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


def test_digits_by_class_shows_the_first_images_of_each_class():
    images, labels = torch.rand(30, 1, 8, 8), torch.arange(30) % 10
    fig = plot_digits_by_class(images, labels, per_class=2, title="digits")
    axes = np.array(fig.axes).reshape(2, 10)
    np.testing.assert_allclose(axes[1, 3].images[0].get_array(), images[13, 0].numpy())
    assert [ax.get_title() for ax in axes[0]] == [str(k) for k in range(10)]
    with pytest.raises(ValueError, match="class 0 has 3 images; per_class=4"):
        plot_digits_by_class(images, labels, per_class=4)
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        plot_digits_by_class(images, labels.float())


def test_lr_schedule_draws_the_factors_against_the_epoch():
    ax = plot_lr_schedule([0.5, 1.0, 0.5, 0.0], steps_per_epoch=2, warmup_epochs=1).axes[0]
    assert list(ax.lines[0].get_ydata()) == [0.5, 1.0, 0.5, 0.0]
    assert list(ax.lines[1].get_xdata()) == [1, 1]  # the end of the warm-up


def test_predictions_are_titled_with_class_and_probability():
    probabilities = torch.tensor([[0.8, 0.2], [0.35, 0.65], [0.6, 0.4]])
    fig = plot_predictions(torch.rand(3, 1, 8, 8), torch.tensor([0, 0, 0]), probabilities)
    shown = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in shown] == ["0 (0.80)", "1 (0.65)", "0 (0.60)"]
    assert shown[1].title.get_color() == "tab:red" and shown[0].title.get_color() == "black"


def test_confusion_shows_the_counts_and_every_mistake():
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    predicted = torch.tensor([0, 1, 1, 1, 2, 0, 2])
    confusion = torch.zeros(3, 3, dtype=torch.long)
    confusion.index_put_((labels, predicted), torch.ones_like(labels), accumulate=True)
    fig = plot_confusion(confusion, torch.rand(7, 1, 8, 8), labels, predicted)
    matrix, panel, *insets = fig.axes
    np.testing.assert_array_equal(matrix.images[0].get_array(), confusion.numpy())
    assert sorted(t.get_text() for t in matrix.texts) == ["1", "1", "1", "2", "2"]
    assert [ax.get_title() for ax in insets] == ["0 -> 1", "2 -> 0"]
    assert panel.get_title() == "2 misclassified: true -> predicted"
