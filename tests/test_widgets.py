"""The book's interactive figures: the values they offer and one picture per combination."""

import itertools

import pytest
import torch
from booktools import explorer_frames

from vitbook import VisionTransformer, ViTConfig
from vitbook.data import sample_image
from vitbook.widgets import (
    attention_explorer,
    axial_reach_explorer,
    patch_explorer,
    position_similarity_explorer,
    sincos_explorer,
)


def frame_count_and_distinct(explorer) -> tuple[int, int]:
    frames, _ = explorer_frames(explorer.to_html())
    return len(frames), len(set(frames.values()))


def test_patch_explorer_offers_patch_sizes_that_divide_the_image():
    image = sample_image(size=(32, 48))
    assert [v for _, v in patch_explorer(image).params[0].options] == [2, 4, 8, 16]
    assert frame_count_and_distinct(patch_explorer(image, patch_sizes=[8, 16])) == (2, 2)
    with pytest.raises(ValueError, match="image width=48 is not a multiple of patch_size=32"):
        patch_explorer(image, patch_sizes=[16, 32])


def test_sincos_explorer_has_a_frame_per_position_channel_and_base():
    explorer = sincos_explorer([0, 5], [0, 3], [100, 10000], num_positions=8, dim=8)
    assert [p.name for p in explorer.params] == ["position", "dimension", "base"]
    assert explorer.params[1].label == "channel"
    assert frame_count_and_distinct(explorer) == (8, 8)


def test_position_similarity_explorer_compares_three_embeddings():
    explorer = position_similarity_explorer((3, 4), 8, queries=[0, 5])
    kind, query = explorer.params
    assert kind.is_dropdown and [v for _, v in kind.options] == [
        "learned (random init)",
        "sin-cos 1D (patch index)",
        "sin-cos 2D (row, column)",
    ]
    assert kind.default == 2 and query.options[query.default][1] == 5  # 2D, nearest the centre
    assert frame_count_and_distinct(explorer) == (6, 6)
    given = position_similarity_explorer((3, 4), 8, learned=torch.randn(12, 8), queries=[0])
    assert given.params[0].options[0][1] == "learned"
    state = torch.random.get_rng_state()
    position_similarity_explorer((3, 4), 8)
    assert torch.equal(torch.random.get_rng_state(), state), "the seeded draw leaves the RNG alone"


def test_attention_explorer_shows_every_layer_head_and_query():
    torch.manual_seed(0)
    cfg = ViTConfig(img_size=(16, 24), patch_size=8, embed_dim=12, depth=2, num_heads=3)
    model = VisionTransformer(cfg).train()
    explorer = attention_explorer(model, torch.rand(3, 16, 24), queries=[0, 4])
    assert [(p.name, len(p.options)) for p in explorer.params] == [
        ("layer", 2),
        ("head", 3),
        ("query", 2),
    ]
    assert model.training, "the model's mode is restored"
    assert frame_count_and_distinct(explorer) == (12, 12)
    # layers and heads numbered from 0 on the controls and in the titles, as patches are
    layer, head, _ = explorer.params
    assert [label for label, _ in layer.options] == ["0", "1"]
    assert [label for label, _ in head.options] == ["0", "1", "2"]
    first = explorer.plot_fn(layer=0, head=0, query=4)
    assert any(ax.get_title().startswith("layer 0, head 0") for ax in first.axes)
    with pytest.raises(TypeError, match="model must be a vitbook.VisionTransformer"):
        attention_explorer(torch.nn.Linear(2, 2), torch.rand(3, 16, 24))


def test_axial_reach_explorer_offers_every_patch_of_a_small_grid():
    explorer = axial_reach_explorer((3, 5))
    (query,) = explorer.params
    assert [v for _, v in query.options] == list(range(15))
    assert query.options[query.default] == ("7 (row 1, col 2)", 7)  # the centre patch
    with pytest.raises(ValueError, match="query patch 15 is not on the 3x5 grid"):
        axial_reach_explorer((3, 5), queries=[15])


def test_default_queries_form_a_coarse_grid_with_the_corners():
    (query,) = axial_reach_explorer((16, 16)).params
    values = [v for _, v in query.options]
    assert len(values) == 64 and {0, 15, 240, 255} <= set(values)


def colour_scales(explorer) -> set[str]:
    """The colour-bar label of every frame (it states the scale)."""
    ranges = [range(len(p.options)) for p in explorer.params]
    return {
        explorer.plot_fn(**explorer.values(indices)).axes[-1].get_ylabel()
        for indices in itertools.product(*ranges)
    }


def test_attention_explorer_fixes_single_values_and_shares_one_colour_scale():
    torch.manual_seed(0)
    cfg = ViTConfig(img_size=(16, 24), patch_size=8, embed_dim=12, depth=1, num_heads=3)
    explorer = attention_explorer(VisionTransformer(cfg), torch.rand(3, 16, 24))
    assert [(p.name, len(p.options)) for p in explorer.params] == [("head", 3), ("query", 6)]
    (scale,) = colour_scales(explorer)  # one scale for all 18 frames
    assert scale.startswith("weight (square-root scale, 0 .. ")


def test_position_similarity_scale_is_fixed_per_embedding_and_shows_sincos_structure():
    explorer = position_similarity_explorer((3, 4), 16)
    kind, _ = explorer.params
    scales = colour_scales(explorer)
    assert len(scales) == len(kind.options) == 3, scales  # one per embedding, whatever the query
    sincos_2d_scale = explorer.plot_fn("sin-cos 2D (row, column)", 0).axes[-1].get_ylabel()
    low = float(sincos_2d_scale.split("scale ")[1].split(" ..")[0])
    assert low > -0.5, f"a 2D sine-cosine map on {sincos_2d_scale} would look uniform"
