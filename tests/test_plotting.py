"""The plot_* functions: a figure that shows the right numbers, released by pyplot."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from vitbook import ViTConfig, axial_attention_mask, plotting, sincos_1d, sincos_2d
from vitbook.plotting import (
    plot_attention_map,
    plot_axial_reach,
    plot_patch_grid,
    plot_position_similarity,
    plot_sincos,
)
from vitbook.train import History

GH, GW = 3, 5  # all sizes differ, so a swapped axis cannot pass unnoticed


@pytest.fixture(autouse=True)
def no_figures_left_open():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before, "plot_* must return figures that pyplot has released"


def test_patch_grid_shows_the_image_the_grid_and_the_sequence():
    image = torch.rand(3, GH * 8, GW * 8)
    fig = plot_patch_grid(image, 8, num_shown=4)
    assert isinstance(fig, Figure)
    main, *strip = fig.axes
    assert main.get_title() == f"P = 8: a {GH} x {GW} grid of Gh x Gw = {GH * GW} patches"
    np.testing.assert_allclose(main.images[0].get_array(), image.permute(1, 2, 0).numpy())
    # 4 patches, "...", and the last patch; each thumbnail is its patch, numbered.
    assert [ax.get_title() for ax in strip] == ["0", "1", "2", "3", "", "14"]
    last = image[:, 2 * 8 : 3 * 8, 4 * 8 : 5 * 8].permute(1, 2, 0).numpy()  # row 2, column 4
    np.testing.assert_allclose(strip[-1].images[0].get_array(), last)
    labels = {t.get_text() for t in main.texts}
    assert labels == {str(k) for k in range(GH * GW)}
    assert any("C x P x P = 3 x 8 x 8 = 192 numbers" in t.get_text() for t in fig.texts)


def test_patch_grid_rejects_a_patch_size_that_does_not_divide_the_image():
    with pytest.raises(ValueError, match="image width=40 is not a multiple of patch_size=16"):
        plot_patch_grid(torch.rand(3, 32, 40), 16)


def test_sincos_marks_the_position_and_draws_the_channel():
    fig = plot_sincos(5, 3, base=100.0, num_positions=16, dim=8)
    table_ax, curve_ax = fig.axes
    table = sincos_1d(16, 8, base=100.0).numpy()
    np.testing.assert_allclose(table_ax.images[0].get_array(), table)
    marker = curve_ax.lines[-1]  # the highlighted point
    assert marker.get_xdata()[0] == 5 and marker.get_ydata()[0] == pytest.approx(table[5, 3])
    samples = curve_ax.lines[1]
    np.testing.assert_allclose(samples.get_ydata(), table[:, 3])
    assert "channel 3: cos(pos / 100^(2/8))" in curve_ax.get_title()
    assert f"PE[5, 3] = {table[5, 3]:+.3f}" in curve_ax.get_title()
    with pytest.raises(ValueError, match="position=16 is outside 0 .. 15"):
        plot_sincos(16, 0, num_positions=16, dim=8)


def test_position_similarity_is_the_cosine_similarity_on_the_grid():
    embedding = sincos_2d((GH, GW), 16)
    query = 7  # row 1, column 2
    fig = plot_position_similarity(embedding, (GH, GW), query, title="2D")
    shown = fig.axes[0].images[0].get_array()
    unit = embedding / embedding.norm(dim=1, keepdim=True)
    np.testing.assert_allclose(shown, (unit @ unit[query]).reshape(GH, GW).numpy(), atol=1e-6)
    assert shown.shape == (GH, GW) and shown[1, 2] == pytest.approx(1.0)
    assert fig.axes[0].get_title() == "2D: similarity to patch 7 (row 1, col 2)"


@pytest.mark.parametrize(
    ("embedding", "query", "message"),
    [
        (torch.randn(GH * GW + 1, 8), 0, r"embedding has 16 rows but grid_size=\(3, 5\) has 15"),
        (torch.randn(GH * GW, 8), 15, r"query=15 is not a patch index of the 3x5 grid"),
    ],
)
def test_position_similarity_errors(embedding, query, message):
    with pytest.raises(ValueError, match=message):
        plot_position_similarity(embedding, (GH, GW), query)


def test_attention_map_shows_the_weights_on_the_grid():
    weights = torch.softmax(torch.randn(GH, GW).flatten(), 0).reshape(GH, GW)
    fig = plot_attention_map(torch.rand(3, GH * 4, GW * 4), weights, 7, title="layer 0, head 1")
    image_ax, map_ax, _ = fig.axes
    np.testing.assert_allclose(map_ax.images[0].get_array(), weights.numpy())
    assert map_ax.get_title() == "layer 0, head 1: attention weights"
    assert image_ax.get_title() == "query: patch 7 (row 1, col 2)"
    with pytest.raises(ValueError, match="weights of a 3x5 grid do not tile an image of 12x16"):
        plot_attention_map(torch.rand(3, 12, 16), weights, 0)


def test_axial_reach_counts_full_row_and_two_hop_reach():
    query = 7
    fig = plot_axial_reach((GH, GW), query)
    full, row, two = (ax.images[0].get_array() for ax in fig.axes)
    assert (full > 0).all()
    rows = axial_attention_mask((GH, GW), "rows")[query].reshape(GH, GW).numpy()
    np.testing.assert_array_equal(row > 0, rows)  # one row layer: the query's row only
    assert (two > 0).all() and (two == 2).sum() == GH and (two[:, 2] == 2).all()  # relays
    assert [ax.get_title().splitlines()[1] for ax in fig.axes] == [
        "reaches 15 of 15",
        "reaches 5 of 15",
        "reaches 15 of 15",
    ]


# --- the house style --------------------------------------------------------------------------

# One call of every plot_* function in vitbook.plotting; a new function needs an entry here.
EXAMPLES = {
    "plot_patch_grid": lambda: plot_patch_grid(torch.rand(3, 64, 96), 16),
    "plot_sincos": lambda: plot_sincos(5, 2, num_positions=16, dim=8),
    "plot_position_similarity": lambda: plot_position_similarity(sincos_2d((3, 4), 8), (3, 4), 5),
    "plot_attention_map": lambda: plot_attention_map(
        torch.rand(3, 24, 40), torch.softmax(torch.randn(3, 5), -1), query=7
    ),
    "plot_axial_reach": lambda: plot_axial_reach((3, 5), query=7),
    # The encoder block, the full model, training.
    "plot_norm_placement": lambda: plotting.plot_norm_placement(),
    "plot_activations": lambda: plotting.plot_activations(),
    "plot_gradient_through_depth": lambda: plotting.plot_gradient_through_depth(
        [2.6, 1.5, 1.0], [0.0, 1e-9, 1.0], title="3 branches"
    ),
    "plot_norm_order": lambda: plotting.plot_norm_order(
        {
            L: {
                "pre-norm": {"std": [1 + k / 8 for k in range(L)], "grad": [0.2] * L},
                "post-norm": {"std": [1.0] * L, "grad": [0.1 + k / 100 for k in range(L)]},
            }
            for L in (2, 4, 8)
        },
        depth=4,
    ),
    "plot_pipeline": lambda: plotting.plot_pipeline(
        ViTConfig.from_name("ViT-B/16"), torch.rand(3, 224, 224)
    ),
    "plot_cost_by_part": lambda: plotting.plot_cost_by_part(
        {(s, p): {"patch embedding": s, "MLP": s * s // p} for s in (64, 96) for p in (8, 16)},
        96,
        8,
    ),
    "plot_resampled_positions": lambda: plotting.plot_resampled_positions(
        [torch.randn(1, 17, 32), torch.randn(1, 37, 32)], [(1, 2), (2, 3)], channels=(3, 20)
    ),
    "plot_digits_by_class": lambda: plotting.plot_digits_by_class(
        torch.rand(30, 1, 8, 8), torch.arange(30) % 10, title="digits"
    ),
    "plot_lr_schedule": lambda: plotting.plot_lr_schedule(
        [min(1, (s + 1) / 10) for s in range(100)], steps_per_epoch=10, warmup_epochs=1
    ),
    "plot_history": lambda: plotting.plot_history(
        History([2.0, 1.0, 0.5], [0.2, 0.6, 0.9], [0.3, 0.7, 0.8], [0.1] * 3), title="curves"
    ),
    "plot_predictions": lambda: plotting.plot_predictions(
        torch.rand(16, 1, 8, 8), torch.arange(16) % 10, torch.softmax(torch.randn(16, 10), 1)
    ),
    "plot_confusion": lambda: plotting.plot_confusion(
        torch.eye(10, dtype=torch.long) * 40 + 1,
        torch.rand(20, 1, 8, 8),
        torch.arange(20) % 10,
        (torch.arange(20) + torch.arange(20) // 10) % 10,
    ),
}


def texts_of(fig: Figure) -> list:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_plot_function_has_a_house_style_example():
    functions = {name for name in plotting.__all__ if name.startswith("plot_")}
    assert functions == set(EXAMPLES), f"add examples for {functions - set(EXAMPLES)}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_figures_fit_the_column_with_legible_text(name):
    fig = EXAMPLES[name]()
    width, _ = fig.get_size_inches()
    assert width <= plotting.COLUMN_WIDTH, f"{name}: {width} in is wider than the column"
    assert fig.dpi == plotting.CSS_PX_PER_INCH
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    tight = fig.get_tightbbox(renderer)  # what the inline backend's bbox_inches="tight" keeps
    assert tight.width <= plotting.COLUMN_WIDTH + 0.05, f"{name}: drawn {tight.width:.2f} in wide"
    sizes = {t.get_text()[:30]: t.get_fontsize() for t in texts_of(fig)}
    assert sizes, f"{name}: a figure without any text"
    small = {text: size for text, size in sizes.items() if size < plotting.MIN_FONT_SIZE}
    assert not small, f"{name}: text under {plotting.MIN_FONT_SIZE} pt: {small}"


def test_house_style_holds_without_use_book_style():
    import matplotlib

    with matplotlib.rc_context({"font.size": 4, "xtick.labelsize": 3, "figure.dpi": 50}):
        fig = plot_sincos(5, 2, num_positions=16, dim=8)
    assert fig.dpi == plotting.CSS_PX_PER_INCH
    assert min(t.get_fontsize() for t in texts_of(fig)) >= plotting.MIN_FONT_SIZE


def test_new_figure_refuses_a_figure_wider_than_the_column():
    with pytest.raises(ValueError, match=r"does not fit the column; use a width of at most"):
        plotting.new_figure(plotting.COLUMN_WIDTH + 1, 3)
