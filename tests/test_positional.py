"""Sine-cosine tables, learned embeddings, resampling and relative position bias."""

import math

import pytest
import torch

from vitbook import (
    LearnedPositionEmbedding,
    RelativePositionBias,
    resample_pos_embed,
    sincos_1d,
    sincos_2d,
)


def test_sincos_1d_matches_the_formula():
    n, d, base = 7, 10, 10000.0
    table = sincos_1d(n, d)
    for pos in range(n):
        for k in range(d // 2):
            angle = pos / base ** (2 * k / d)
            assert table[pos, 2 * k].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * k + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sincos_1d_base_changes_the_slow_channels_only():
    a, b = sincos_1d(5, 8, base=100.0), sincos_1d(5, 8, base=10000.0)
    torch.testing.assert_close(
        a[:, :2], b[:, :2], rtol=0, atol=0
    )  # k = 0: frequency 1 for any base
    assert not torch.allclose(a[:, 2:], b[:, 2:])


def test_sincos_1d_dot_product_depends_only_on_offset():
    table = sincos_1d(12, 16).double()
    gram = table @ table.T
    for offset in range(1, 6):
        diagonal = torch.diagonal(gram, offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), rtol=0, atol=1e-5)


def test_sincos_2d_layout_rows_then_columns():
    gh, gw, d = 3, 5, 12
    table = sincos_2d((gh, gw), d)
    assert table.shape == (gh * gw, d)
    rows = sincos_1d(gh, d // 2)
    cols = sincos_1d(gw, d // 2)
    for k in range(gh * gw):
        torch.testing.assert_close(table[k, : d // 2], rows[k // gw], rtol=0, atol=0)
        torch.testing.assert_close(table[k, d // 2 :], cols[k % gw], rtol=0, atol=0)


@pytest.mark.parametrize("dim", [4, 8, 64])
def test_sincos_2d_dot_product_depends_only_on_2d_offset(dim):
    gh, gw = 4, 6
    table = sincos_2d((gh, gw), dim).double()
    assert torch.isfinite(table).all()
    gram = table @ table.T
    by_offset: dict[tuple[int, int], list[float]] = {}
    for i in range(gh * gw):
        for j in range(gh * gw):
            offset = (i // gw - j // gw, i % gw - j % gw)
            by_offset.setdefault(offset, []).append(gram[i, j].item())
    assert len(by_offset) == (2 * gh - 1) * (2 * gw - 1)
    for offset, values in by_offset.items():
        # float32 table, products summed in float64: differences are rounding only.
        assert max(values) - min(values) < 1e-5, offset
    # And the offset matters: (0, 0) is the largest similarity, D / 2 exactly (sin^2 + cos^2).
    assert by_offset[(0, 0)][0] == pytest.approx(dim / 2, abs=1e-5)


def test_learned_position_embedding_adds_its_weight():
    torch.manual_seed(0)
    embed = LearnedPositionEmbedding(num_positions=5, dim=8)
    assert embed.weight.shape == (1, 5, 8)
    assert 0.01 < embed.weight.std().item() < 0.03  # truncated normal, std 0.02
    tokens = torch.randn(2, 5, 8)
    assert torch.equal(embed(tokens), tokens + embed.weight)


def test_resample_same_size_is_identity():
    pos = torch.randn(1, 1 + 7 * 7, 16)
    assert torch.equal(resample_pos_embed(pos, (7, 7)), pos)
    non_square = torch.randn(1, 1 + 3 * 5, 16)
    assert torch.equal(resample_pos_embed(non_square, (3, 5), old_grid_size=(3, 5)), non_square)


def test_resample_keeps_class_token_and_interpolates_patches():
    torch.manual_seed(0)
    pos = torch.randn(1, 1 + 4 * 4, 8)
    out = resample_pos_embed(pos, (8, 6))
    assert out.shape == (1, 1 + 8 * 6, 8)
    assert torch.equal(out[:, 0], pos[:, 0])
    # A constant grid stays constant under interpolation.
    constant = torch.cat([torch.zeros(1, 1, 8), torch.full((1, 16, 8), 0.5)], dim=1)
    torch.testing.assert_close(resample_pos_embed(constant, 8)[:, 1:], torch.full((1, 64, 8), 0.5))


def test_resample_nearest_doubling_repeats_each_cell():
    pos = torch.randn(1, 2 * 3, 4)
    out = resample_pos_embed(pos, (4, 6), old_grid_size=(2, 3), num_prefix_tokens=0, mode="nearest")
    grid = out.reshape(4, 6, 4)
    assert torch.equal(grid[0, 0], grid[1, 1])
    assert torch.equal(grid[0, 0], pos[0, 0])
    assert torch.equal(grid[3, 5], pos[0, 5])


def test_relative_position_bias_depends_only_on_offset():
    torch.manual_seed(0)
    gh, gw, heads = 3, 4, 2
    module = RelativePositionBias((gh, gw), heads, num_prefix_tokens=1)
    bias = module()
    assert bias.shape == (heads, 1 + gh * gw, 1 + gh * gw)
    assert torch.equal(bias[:, 0], torch.zeros(heads, 1 + gh * gw))
    assert torch.equal(bias[:, :, 0], torch.zeros(heads, 1 + gh * gw))
    patch = bias[:, 1:, 1:]
    table = module.relative_position_bias_table
    for i in range(gh * gw):
        for j in range(gh * gw):
            d_row, d_col = i // gw - j // gw, i % gw - j % gw
            index = (d_row + gh - 1) * (2 * gw - 1) + (d_col + gw - 1)
            assert torch.equal(patch[:, i, j], table[index])
    # The bias is trainable: gradients reach the table.
    bias.sum().backward()
    assert table.grad is not None and table.grad.abs().sum() > 0
