"""The figures of the encoder block: they show the numbers they are given, on fixed axes."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitbook.plotting import (
    plot_activations,
    plot_gradient_through_depth,
    plot_norm_order,
    plot_norm_placement,
)


@pytest.fixture(autouse=True)
def no_figures_left_open():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


def test_norm_placement_draws_both_orders():
    fig = plot_norm_placement()
    pre, post = fig.axes
    boxes = [[t.get_text() for t in ax.texts if t.get_bbox_patch()] for ax in (pre, post)]
    assert boxes[0].count("LayerNorm") == 2 and boxes[1].count("LayerNorm") == 2
    assert pre.get_title(loc="left").startswith("pre-norm (ViT)")


def test_activations_are_gelu_relu_and_their_derivatives():
    fig = plot_activations(-4, 4)
    act, slope, gap = fig.axes
    relu, gelu, minimum = act.lines[:3]
    x = torch.tensor(gelu.get_xdata())
    np.testing.assert_allclose(gelu.get_ydata(), F.gelu(x).numpy(), atol=1e-6)
    np.testing.assert_allclose(relu.get_ydata(), F.relu(x).numpy())
    assert minimum.get_ydata()[0] == pytest.approx(-0.17, abs=0.005)
    np.testing.assert_array_equal(slope.lines[0].get_ydata(), (x > 0).float().numpy())
    assert np.abs(gap.lines[0].get_ydata()).max() == pytest.approx(4.7, abs=0.1)  # x 1e-4


def test_gradient_through_depth_marks_exact_zeros():
    residual, plain = [2.6, 1.8, 1.2, 1.0], [0.0, 0.0, 1e-6, 1.0]
    fig = plot_gradient_through_depth(residual, plain, title="2 blocks")
    ax = fig.axes[0]
    with_residuals, without, zeros = ax.lines
    assert list(with_residuals.get_ydata()) == residual
    assert list(without.get_xdata()) == [2, 3] and list(zeros.get_xdata()) == [0, 1]
    assert ax.get_ylim()[0] < min(zeros.get_ydata())  # the crosses are inside the axes
    with pytest.raises(ValueError, match="residual has 4 values and plain 3"):
        plot_gradient_through_depth(residual, plain[:3])


def test_norm_order_keeps_its_axes_across_depths():
    stats = {
        L: {
            "pre-norm": {
                "std": [1 + k / 4 for k in range(L)],
                "grad": [0.3 - k / 100 for k in range(L)],
            },
            "post-norm": {"std": [1.0] * L, "grad": [0.1 * L] * L},
        }
        for L in (2, 4, 8)
    }
    figures = {L: plot_norm_order(stats, L) for L in stats}
    limits = {L: [ax.get_ylim() for ax in fig.axes[:3]] for L, fig in figures.items()}
    assert limits[2] == limits[4] == limits[8]
    assert limits[8][0][1] == pytest.approx(1.1 * (1 + 7 / 4))  # the largest std of all
    stream, grads, last = figures[4].axes[:3]
    assert list(stream.lines[0].get_ydata()) == stats[4]["pre-norm"]["std"]
    # blocks numbered from 0, as layers and heads are in every figure
    assert list(stream.lines[0].get_xdata()) == list(grads.lines[0].get_xdata()) == [0, 1, 2, 3]
    assert stream.get_xlabel() == grads.get_xlabel() == "block (0 = first)"
    assert list(last.lines[0].get_ydata()) == [stats[L]["pre-norm"]["grad"][-1] for L in stats]
    with pytest.raises(ValueError, match="depth=3 is not among the depths"):
        plot_norm_order(stats, 3)
