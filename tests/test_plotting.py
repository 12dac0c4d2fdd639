"""The plot_* functions: a figure that shows the right numbers, released by pyplot."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from vitbook import ViTConfig, axial_attention_mask, plotting, sincos_1d, sincos_2d
from vitbook.analysis import position_embedding_similarity
from vitbook.data.cifar import CIFAR10_CLASSES
from vitbook.plotting import (
    plot_attention_cost,
    plot_attention_distance,
    plot_attention_map,
    plot_attention_masks,
    plot_axial_crossover,
    plot_axial_reach,
    plot_filter_components,
    plot_head_outputs,
    plot_layer_attention,
    plot_patch_grid,
    plot_patch_vector,
    plot_position_similarity,
    plot_query_weights,
    plot_rollout_maps,
    plot_rollout_overlay,
    plot_shuffle_test,
    plot_similarity_tiles,
    plot_sincos,
    plot_softmax_saturation,
    plot_top_classes,
    plot_weight_table,
)
from vitbook.studies.experiments import load_results
from vitbook.studies.transfer_digits import load_results as load_transfer_results
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


def test_one_channel_images_are_ink_on_paper_in_every_attention_figure():
    # A digit is drawn the same way beside a map of one head, of every layer and of the rollout:
    # 0 is white paper, 1 black ink (the explorer of one head once drew it white on black).
    digit = torch.zeros(1, GH * 2, GW * 2)
    digit[0, :2, :2] = 1.0  # ink in patch 0 only
    maps = torch.softmax(torch.randn(2, GH * GW), -1).reshape(2, GH, GW)
    figures = {
        "plot_attention_map": plot_attention_map(digit, maps[0], 7),
        "plot_layer_attention": plot_layer_attention(digit, maps, 7),
        "plot_rollout_maps": plot_rollout_maps(torch.stack([digit, digit]), maps, maps, 7),
    }
    for name, fig in figures.items():
        picture = fig.axes[0].images[0]
        rgb = picture.to_rgba(picture.get_array())[..., :3]
        np.testing.assert_allclose(rgb[0, 0], [0, 0, 0], err_msg=f"{name}: ink is not black")
        np.testing.assert_allclose(rgb[-1, -1], [1, 1, 1], err_msg=f"{name}: paper is not white")


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


def test_patch_vector_draws_each_channel_in_c_ph_pw_order():
    vector = torch.rand(3 * 4 * 4)
    fig = plot_patch_vector(vector, 4, title="patch 7")
    tile_ax, vector_ax = fig.axes
    assert tile_ax.get_title() == "patch 7"
    np.testing.assert_allclose(
        tile_ax.images[0].get_array(), vector.reshape(3, 4, 4).permute(1, 2, 0).numpy()
    )
    for c, line in enumerate(vector_ax.lines):
        np.testing.assert_array_equal(line.get_xdata(), np.arange(c * 16, (c + 1) * 16))
        np.testing.assert_allclose(line.get_ydata(), vector[c * 16 : (c + 1) * 16].numpy())
    with pytest.raises(ValueError, match="vector has 47 numbers, not a multiple of P"):
        plot_patch_vector(torch.rand(47), 4)


def test_shuffle_test_draws_both_images_and_both_logits():
    logits, shuffled_logits = torch.randn(5), torch.randn(5)
    fig = plot_shuffle_test(torch.rand(3, 8, 8), torch.rand(3, 8, 8), logits, shuffled_logits)
    bars = fig.axes[2]
    heights = [patch.get_height() for patch in bars.patches]
    np.testing.assert_allclose(heights, torch.cat([logits, shuffled_logits]).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="must have the same shape"):
        plot_shuffle_test(torch.rand(3, 8, 8), torch.rand(3, 8, 8), logits, torch.randn(4))


def test_query_weights_share_one_scale():
    weights = torch.softmax(torch.randn(GH * GW, GH * GW), -1)
    fig = plot_query_weights(weights, (GH, GW), [0, 7])
    maps = [ax for ax in fig.axes if ax.images]
    np.testing.assert_allclose(maps[1].images[0].get_array(), weights[7].reshape(GH, GW))
    top = float(weights[[0, 7]].max())
    assert all(ax.images[0].get_clim() == (0, pytest.approx(top)) for ax in maps)
    assert maps[1].get_title() == "query 7 (row 1, col 2)"


def test_weight_table_writes_every_weight():
    weights = torch.softmax(torch.randn(3, 3), -1)
    colours = torch.rand(3, 3)
    fig = plot_weight_table(colours, weights, weights @ colours, ["a", "b", "c"])
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert texts == [f"{w:.2f}" for w in weights.flatten().tolist()]


def test_head_outputs_show_values_outputs_and_weights():
    values = torch.rand(GH * GW, 3)
    weights = torch.softmax(torch.randn(GH * GW, GH * GW), -1)
    outputs = {"head 0": weights @ values, "head 1": values.flip(0)}
    fig = plot_head_outputs(values, outputs, weights, (GH, GW), weights_title="head 0 weights")
    titles = [ax.get_title() for ax in fig.axes[:4]]
    assert titles == ["the values: patch colours", "head 0", "head 1", "head 0 weights"]
    np.testing.assert_allclose(
        fig.axes[1].images[0].get_array(), (weights @ values).reshape(GH, GW, 3).numpy(), atol=1e-6
    )
    np.testing.assert_allclose(fig.axes[3].images[0].get_array(), weights.numpy())


def saturation_example():
    def stats(scale):
        return {
            "max weight": 0.5 * scale,
            "entropy": 2.0 / scale,
            "gradient": 0.1 * scale,
            "weights": torch.tensor([0.5, 0.3, 0.2]) * scale,
        }

    return {w: {"without scale": stats(1.0), "with scale": stats(0.5)} for w in (1, 8, 64)}


def test_softmax_saturation_marks_the_width_on_fixed_axes():
    saturation = saturation_example()
    fig = plot_softmax_saturation(saturation, Dh=8)
    first, largest, entropy, gradient = fig.axes
    assert first.get_title() == "one query, $D_h$ = 8"
    np.testing.assert_allclose(first.lines[1].get_ydata(), [0.25, 0.15, 0.1])
    assert entropy.get_ylim() == plot_softmax_saturation(saturation, Dh=64).axes[2].get_ylim()
    assert entropy.lines[1].get_xdata()[0] == 8  # the marked width
    with pytest.raises(ValueError, match="Dh=16 is not one of the head widths measured"):
        plot_softmax_saturation(saturation, Dh=16)
def test_layer_attention_puts_every_layer_on_one_scale():
    maps = torch.softmax(torch.randn(4, GH * GW), -1).reshape(4, GH, GW)
    fig = plot_layer_attention(torch.rand(1, GH * 2, GW * 2), maps, 7, titles=list("abcd"))
    image_ax, *map_axes, bar = fig.axes
    assert image_ax.get_title() == "query patch 7"
    assert [ax.get_title() for ax in map_axes] == list("abcd")
    for ax, weights in zip(map_axes, maps, strict=True):
        np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy())
        assert ax.images[0].get_clim() == (0, pytest.approx(float(maps.max())))
    assert bar.get_ylabel() == f"weight (0 .. {float(maps.max()):.2f})"
    untitled = plot_layer_attention(torch.rand(1, GH * 2, GW * 2), maps, 7)
    assert [ax.get_title() for ax in untitled.axes[1:5]] == [f"layer {i}" for i in range(4)]


def test_rollout_maps_share_one_scale_per_row():
    pooled = torch.rand(3, GH, GW)
    fig = plot_rollout_maps(
        torch.rand(3, 1, 6, 10), pooled, pooled / 2, 7, class_shares=[0.1, 0.2, 0.3]
    )
    titles = [ax.get_title() for ax in fig.axes]
    assert "pooled rollout\nclass token 0.20" in titles
    pooled_axes = [ax for ax in fig.axes if ax.get_title().startswith("pooled")]
    assert {ax.images[0].get_clim()[1] for ax in pooled_axes} == {float(pooled.max())}


def test_filter_components_and_similarity_tiles_show_their_scales():
    fig = plot_filter_components(torch.randn(5, 3, 4, 4), torch.full((5,), 0.2), columns=3)
    assert [ax.get_title() for ax in fig.axes if ax.axison] == [f"{k}: 0.20" for k in range(1, 6)]
    similarity = position_embedding_similarity(sincos_2d((GH, GW), 16), (GH, GW))
    fig = plot_similarity_tiles({"fixed": similarity, "wide": similarity}, scales={"wide": (-1, 1)})
    fixed, wide = fig.axes[:2]
    tile_row, tile_col = divmod(7, GW)  # patch 7: its own tile, its own place
    mosaic = fixed.images[0].get_array()
    assert mosaic[tile_row * GH + tile_row, tile_col * GW + tile_col] == pytest.approx(1.0)
    low = np.floor(float(similarity.min()) * 10) / 10
    assert fixed.images[0].get_clim() == (pytest.approx(low), 1.0)
    assert wide.images[0].get_clim() == (-1, 1)
    labels = [ax.get_xlabel() for ax in fig.axes[2:]]
    assert labels == [f"cosine similarity ({low:g} .. 1)", "cosine similarity (-1 .. 1)"]


def test_attention_distance_plots_each_head_against_depth():
    distances = torch.rand(4, 3) * 5
    fig = plot_attention_distance(distances, even_spread=2.5, farthest=8.0)
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), distances[:, 1].numpy())
    assert ax.lines[-1].get_ydata()[0] == 2.5 and ax.get_ylim() == (0, 8)
    # layers and heads numbered from 0, as attention[layer][:, head] indexes them
    assert list(ax.get_xticks()) == [0, 1, 2, 3] and "0 = first" in ax.get_xlabel()
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["head 0", "head 1", "head 2", "even spread"]


def test_cost_figures_show_the_measurements():
    masks = {
        "full": torch.ones(6, 6, dtype=torch.bool),
        "rows": axial_attention_mask((2, 3), "rows"),
    }
    fig = plot_attention_masks(masks)
    assert [ax.get_title() for ax in fig.axes] == ["full\n36 pairs", "rows\n18 pairs"]
    costs = {"explicit": {"seconds": [1e-3, 4e-3], "bytes": [2e6, 8e6]}}
    fig = plot_attention_cost([256, 512], costs, {"explicit": {"time": 2.0, "memory": 2.0}})
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [2, 8])
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "explicit (slope 2.00)"
    seconds = {"full": [1e-3, 1e-2], "axial": [2e-3, 5e-3]}
    fig = plot_axial_crossover([4, 8], seconds, {"full": [10, 100], "axial": [8, 40]}, 8)
    np.testing.assert_allclose(fig.axes[0].lines[2].get_ydata(), [2, 5])
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), [1, 10])  # scaled MACs


def test_prediction_figures_show_the_classes_and_the_maps():
    top = torch.tensor([[0.6, 0.3], [0.9, 0.05]])
    fig = plot_top_classes(torch.rand(2, 3, 8, 8), ["a", "b"], top, [["x", "y"], ["z", "w"]])
    bars = fig.axes[3]
    assert [t.get_text() for t in bars.get_yticklabels()] == ["z", "w"]
    assert [p.get_width() for p in bars.patches] == pytest.approx([0.9, 0.05])
    overlay = torch.rand(2, 8, 8)
    fig = plot_rollout_overlay(
        torch.rand(2, 1, 8, 8), overlay, captions=["a", "b"], titles=["r", "s"]
    )
    np.testing.assert_allclose(fig.axes[3].images[1].get_array(), overlay[1].numpy())


def test_learning_curves_name_the_data_evaluated_after_each_epoch():
    history = History([2.0, 1.0], [0.3, 0.7], [0.4, 0.8], [0.1, 0.1])
    for kwargs, name in (({}, "test"), ({"eval_label": "validation"}, "validation")):
        legend = plotting.plot_history(history, **kwargs).axes[1].get_legend()
        assert [text.get_text() for text in legend.get_texts()] == ["training batches", name]


def test_learning_curves_of_a_recorded_run_without_training_accuracies():
    history = History(train_loss=[2.0, 1.0, 0.8], eval_accuracy=[0.4, 0.7, 0.8])
    accuracy = plotting.plot_history(history, eval_label="validation").axes[1]
    assert [line.get_label() for line in accuracy.lines] == ["validation"]
    assert list(accuracy.lines[0].get_ydata()) == history.eval_accuracy


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
    "plot_patch_vector": lambda: plot_patch_vector(torch.rand(3 * 16 * 16), 16),
    "plot_shuffle_test": lambda: plot_shuffle_test(
        torch.rand(3, 64, 64), torch.rand(3, 64, 64), torch.randn(10), torch.randn(10)
    ),
    "plot_query_weights": lambda: plot_query_weights(
        torch.softmax(torch.randn(49, 49), -1), 7, [24, 0, 30]
    ),
    "plot_weight_table": lambda: plot_weight_table(
        torch.rand(6, 3),
        torch.softmax(torch.randn(6, 6), -1),
        torch.rand(6, 3),
        ["red", "orange", "green", "lime", "blue", "navy"],
    ),
    "plot_head_outputs": lambda: plot_head_outputs(
        torch.rand(64, 3),
        {"output of head 0 (position)": torch.rand(64, 3), "output of head 1": torch.rand(64, 3)},
        torch.softmax(torch.randn(64, 64), -1),
        8,
        weights_title="head 1: all 64 x 64 weights",
    ),
    "plot_softmax_saturation": lambda: plot_softmax_saturation(saturation_example(), Dh=8),
    "plot_layer_attention": lambda: plot_layer_attention(
        torch.rand(1, 8, 8), torch.softmax(torch.randn(4, 16), -1).reshape(4, 4, 4), 9
    ),
    "plot_rollout_maps": lambda: plot_rollout_maps(
        torch.rand(4, 1, 8, 8),
        torch.rand(4, 4, 4),
        torch.rand(4, 4, 4),
        9,
        titles=[f"digit {k}" for k in range(4)],
        class_shares=[0.15] * 4,
    ),
    "plot_filter_components": lambda: plot_filter_components(
        torch.randn(28, 3, 16, 16), torch.linspace(0.1, 0.01, 28), title="components"
    ),
    "plot_similarity_tiles": lambda: plot_similarity_tiles(
        {
            "learned, at initialisation": torch.rand(4, 4, 4, 4),
            "learned, after training": torch.rand(4, 4, 4, 4),
            "2D sine-cosine (shipped model)": torch.rand(4, 4, 4, 4),
        }
    ),
    "plot_attention_distance": lambda: plot_attention_distance(
        torch.rand(12, 12) * 100, even_spread=50.0, farthest=300.0, title="12 heads"
    ),
    "plot_attention_masks": lambda: plot_attention_masks(
        {
            "full attention": torch.ones(16, 16, dtype=torch.bool),
            "row layer": axial_attention_mask((4, 4), "rows"),
            "column layer": axial_attention_mask((4, 4), "cols"),
        }
    ),
    "plot_attention_cost": lambda: plot_attention_cost(
        [256, 512, 1024, 2048, 4096],
        {
            name: {
                "seconds": [1e-4 * 4**k for k in range(5)],
                "bytes": [1e6 * 4**k for k in range(5)],
            }
            for name in ("explicit", "fused")
        },
        {name: {"time": 1.95, "memory": 2.01} for name in ("explicit", "fused")},
    ),
    "plot_axial_crossover": lambda: plot_axial_crossover(
        [2, 4, 8, 16, 32, 48],
        {"full": [1e-5 * 16**k for k in range(6)], "axial": [2e-5 * 8**k for k in range(6)]},
        {
            "full": [2 * 32 * g**4 for g in (2, 4, 8, 16, 32, 48)],
            "axial": [4 * 32 * g**3 for g in (2, 4, 8, 16, 32, 48)],
        },
        crossover=8,
    ),
    "plot_top_classes": lambda: plot_top_classes(
        torch.rand(3, 3, 32, 32),
        ["grace_hopper", "china", "flower"],
        torch.tensor([[0.5, 0.2, 0.1, 0.05, 0.01]] * 3),
        [["military uniform", "bow tie", "suit", "mortarboard", "academic gown"]] * 3,
    ),
    "plot_rollout_overlay": lambda: plot_rollout_overlay(
        torch.rand(3, 3, 32, 32),
        torch.rand(3, 32, 32),
        captions=["a", "b", "c"],
        titles=["rollout; patches' share 0.60"] * 3,
    ),
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
    "plot_photos_by_class": lambda: plotting.plot_photos_by_class(
        torch.rand(30, 3, 32, 32), torch.arange(30) % 10, [f"class {c}" for c in range(10)]
    ),
    "plot_augmented": lambda: plotting.plot_augmented(
        {"original": torch.rand(8, 3, 32, 32), "crop and flip": torch.rand(8, 3, 32, 32)}
    ),
    "plot_time_to_accuracy": lambda: plotting.plot_time_to_accuracy(
        {"2 CPU cores": {"val_accuracy": [0.4 + 0.005 * k for k in range(70)],
                         "epoch_seconds": [100.0] * 70},
         "H100 (D = 256)": {"val_accuracy": [0.5 + 0.01 * k for k in range(30)]}},
        minutes_of="2 CPU cores", levels=(0.5, 0.6, 0.7, 0.75, 0.8),
    ),
    "plot_photo_confusion": lambda: plotting.plot_photo_confusion(
        torch.randint(0, 100, (10, 10)), list(CIFAR10_CLASSES)
    ),
    "plot_photo_mistakes": lambda: plotting.plot_photo_mistakes(
        torch.rand(20, 3, 32, 32), torch.arange(20) % 10, (torch.arange(20) + 1) % 10,
        list(CIFAR10_CLASSES), count=12,
    ),
    "plot_ladder": lambda: plotting.plot_ladder(
        {name: {"test_mean": m, "test_min": m - 0.01, "test_max": m + 0.01, "n": 3,
                "minutes": 4.0} for name, m in (("ViT, crop and flip", 0.79), ("ResNet-18", 0.9))},
        anchors={"ViT-Lite-7/4": 0.914},
    ),
    "plot_digits_by_class": lambda: plotting.plot_digits_by_class(
        torch.rand(30, 1, 8, 8), torch.arange(30) % 10, title="digits"
    ),
    "plot_lr_schedule": lambda: plotting.plot_lr_schedule(
        [min(1, (s + 1) / 10) for s in range(100)], steps_per_epoch=10, warmup_epochs=1
    ),
    "plot_data_hunger": lambda: plotting.plot_data_hunger(load_results()),
    "plot_distillation": lambda: plotting.plot_distillation(
        {"runs": {name: [{"validation_accuracy": a + s / 100} for s in range(5)]
                  for name, a in (("CNN teacher", 0.95), ("ViT, scratch", 0.85),
                                  ("hard, CNN teacher", 0.86), ("conv stem", 0.93))}}
    ),
    "plot_distance_by_setting": lambda: plotting.plot_distance_by_setting(
        {"runs": {name: [{"attention_distance": (torch.rand(2, 4) * 6).tolist()}] * 5
                  for name in ("ViT, scratch", "hard, CNN teacher", "conv stem")}},
        ["ViT, scratch", "hard, CNN teacher", "conv stem"], farthest=8.5, even_spread=3.6,
    ),
    "plot_history": lambda: plotting.plot_history(
        History([2.0, 1.0, 0.5], [0.2, 0.6, 0.9], [0.3, 0.7, 0.8], [0.1] * 3), title="curves"
    ),
    "plot_predictions": lambda: plotting.plot_predictions(
        torch.rand(16, 1, 8, 8), torch.arange(16) % 10, torch.softmax(torch.randn(16, 10), 1)
    ),
    "plot_patch_size_experiment": lambda: plotting.plot_patch_size_experiment(load_results()),
    "plot_position_experiment": lambda: plotting.plot_position_experiment(load_results()),
    "plot_transfer": lambda: plotting.plot_transfer(load_transfer_results()),
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


def test_similarity_tiles_put_patch_k_against_all_patches_in_tile_k():
    table = sincos_2d((GH, GW), 16)
    similarity = position_embedding_similarity(table, (GH, GW))  # (Gh, Gw, Gh, Gw)
    fig = plot_similarity_tiles({"2D": similarity})
    mosaic = fig.axes[0].images[0].get_array()
    unit = table / table.norm(dim=1, keepdim=True)
    k = 7  # row 1, column 2: the tile at block (1, 2)
    tile = mosaic[1 * GH : 2 * GH, 2 * GW : 3 * GW]
    np.testing.assert_allclose(tile, (unit @ unit[k]).reshape(GH, GW).numpy(), atol=1e-6)
