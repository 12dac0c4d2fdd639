"""The figures of the full model: shapes, shares of the cost and resampled position tables."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitbook import ViTConfig, resample_pos_embed, sincos_2d
from vitbook.plotting import plot_cost_by_part, plot_pipeline, plot_resampled_positions


@pytest.fixture(autouse=True)
def no_figures_left_open():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


def test_pipeline_states_the_shapes_of_vit_b():
    fig = plot_pipeline(ViTConfig.from_name("ViT-B/16"), torch.rand(3, 224, 224))
    texts = [t.get_text() for t in fig.axes[0].texts]
    for shape in ("3 x 224 x 224", "196 x 768", "197 x 768", "768", "1000 logits"):
        assert shape in texts
    assert "12 encoder\nblocks" in texts
    assert "tokens +\npositions" in texts  # the position embeddings are added there
    assert fig.texts[0].get_text().startswith("from a photo")
    titled = plot_pipeline(
        ViTConfig(img_size=8, patch_size=2, in_chans=1, embed_dim=8, depth=1, num_heads=2),
        torch.rand(1, 8, 8), title="from a digit", grid_colour="tab:blue",
    )
    assert titled.texts[0].get_text() == "from a digit"
    assert {line.get_color() for line in titled.axes[0].lines} == {"tab:blue"}
    with pytest.raises(ValueError, match="image of 32x32 pixels is not the config's img_size"):
        plot_pipeline(ViTConfig.from_name("ViT-B/16"), torch.rand(3, 32, 32))


def by_part():
    return {
        (s, p): {"patch embedding": s * 10**6, "attention": s * s * 10**6 // p, "head": 10**6}
        for s in (64, 128, 256)
        for p in (8, 16)
    }


def test_cost_bars_are_shares_on_a_fixed_scale():
    parts = by_part()
    bars_ax, curve_ax = plot_cost_by_part(parts, 128, 8).axes
    shares = [bar.get_width() for bar in bars_ax.patches]  # bottom to top: last part first
    total = sum(parts[128, 8].values())
    expected = [100 * n / total for n in parts[128, 8].values()][::-1]
    np.testing.assert_allclose(shares, expected)
    assert bars_ax.get_xlim() == (0, 100)
    assert bars_ax.get_title() == f"128 px, P = 8:\n{total / 1e9:.3g} GMACs per image"
    limits = {key: plot_cost_by_part(parts, *key).axes[1].get_ylim() for key in parts}
    assert len(set(limits.values())) == 1  # one scale for every frame
    with pytest.raises(ValueError, match=r"\(img_size, patch_size\)=\(100, 8\) is not a key"):
        plot_cost_by_part(parts, 100, 8)


def test_resampled_positions_show_channels_and_similarity_on_shared_scales():
    table = torch.cat([torch.zeros(1, 32), sincos_2d((4, 4), 32)])[None]
    finer = resample_pos_embed(table, (6, 6))
    fig = plot_resampled_positions([table, finer], [(1, 2), (2, 3)], channels=(0, 16))
    images = [ax.images[0] for ax in fig.axes if ax.images]
    np.testing.assert_allclose(images[0].get_array(), table[0, 1:, 0].reshape(4, 4).numpy())
    unit = F.normalize(finer[0, 1:], dim=-1)
    np.testing.assert_allclose(
        images[5].get_array(), (unit @ unit[2 * 6 + 3]).reshape(6, 6).numpy(), atol=1e-6
    )
    for column in range(3):  # one colour scale per column, the same in both rows
        assert images[column].get_clim() == images[3 + column].get_clim()
    assert images[2].get_clim()[1] == 1.0
    with pytest.raises(ValueError, match="2 tables and 1 queries"):
        plot_resampled_positions([table, finer], [(0, 0)])
