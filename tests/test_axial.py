"""Axial attention equals full attention under a row or column mask."""

import pytest
import torch

from vitbook import AxialAttention, AxialEncoderBlock, MultiHeadSelfAttention, axial_attention_mask

B, GH, GW, D, HEADS = 2, 3, 5, 12, 3
TOL = {"rtol": 1e-5, "atol": 1e-5}  # masked full attention sums extra exact zeros: rounding only


@pytest.mark.parametrize("axis", ["rows", "cols"])
@pytest.mark.parametrize("impl", ["explicit", "sdpa"])
def test_axial_equals_masked_full_attention(axis, impl):
    torch.manual_seed(0)
    axial = AxialAttention(D, HEADS, grid_size=(GH, GW), axis=axis, impl=impl)
    full = MultiHeadSelfAttention(D, HEADS)
    full.load_state_dict(axial.attn.state_dict())
    x = torch.randn(B, GH * GW, D)
    mask = axial_attention_mask((GH, GW), axis)
    torch.testing.assert_close(axial(x), full(x, mask), **TOL)


def test_axial_weights_live_on_rows():
    torch.manual_seed(0)
    axial = AxialAttention(D, HEADS, grid_size=(GH, GW), axis="rows")
    x = torch.randn(B, GH * GW, D)
    _, weights = axial.forward_with_weights(x)
    assert weights.shape == (B * GH, HEADS, GW, GW)
    full = MultiHeadSelfAttention(D, HEADS)
    full.load_state_dict(axial.attn.state_dict())
    _, full_weights = full.forward_with_weights(x, axial_attention_mask((GH, GW), "rows"))
    # Row r of image b is the block of the full weight matrix between patches r*Gw .. r*Gw+Gw-1.
    for b in range(B):
        for r in range(GH):
            block = full_weights[b, :, r * GW : (r + 1) * GW, r * GW : (r + 1) * GW]
            torch.testing.assert_close(weights[b * GH + r], block, **TOL)


def test_mask_shapes_and_counts():
    rows = axial_attention_mask((GH, GW), "rows")
    cols = axial_attention_mask((GH, GW), "cols")
    assert rows.shape == cols.shape == (GH * GW, GH * GW)
    assert (rows.sum(1) == GW).all() and (cols.sum(1) == GH).all()
    # One row hop then one column hop reaches every patch: (R C)[i, j] > 0 for all i, j.
    assert ((rows.float() @ cols.float()) > 0).all()
    assert (rows & cols).equal(torch.eye(GH * GW, dtype=torch.bool))


def test_axial_block_rows_then_columns():
    torch.manual_seed(0)
    block = AxialEncoderBlock(D, HEADS, grid_size=(GH, GW))
    x = torch.randn(B, GH * GW, D)
    h = x + block.row_attn(block.row_norm1(x))
    h = h + block.row_mlp(block.row_norm2(h))
    h = h + block.col_attn(block.col_norm1(h))
    h = h + block.col_mlp(block.col_norm2(h))
    torch.testing.assert_close(block(x), h)
    # A change to one patch reaches every patch after one axial block (row hop + column hop).
    y = x.clone()
    y[:, 0] += torch.randn(D)  # not a constant: LayerNorm would remove a constant shift
    changed = (block(y) - block(x)).abs().amax(dim=-1) > 0
    assert changed.all()


def test_one_axis_only_reaches_its_row():
    torch.manual_seed(0)
    axial = AxialAttention(D, HEADS, grid_size=(GH, GW), axis="rows")
    x = torch.randn(1, GH * GW, D)
    y = x.clone()
    y[:, 0] += torch.randn(D)  # patch (0, 0)
    changed = ((axial(y) - axial(x)).abs().amax(dim=-1) > 0)[0]
    assert changed.tolist() == [True] * GW + [False] * (GH - 1) * GW


AXIAL_VIT = {
    "img_size": (6, 10),
    "patch_size": 2,
    "in_chans": 3,
    "num_classes": 7,
    "embed_dim": 12,
    "num_heads": 3,
    "class_token": False,
    "pool": "mean",
}


@pytest.mark.parametrize("pos_embed", ["learned", "sincos2d", "none"])
def test_axial_vit_shapes_and_parameter_count(pos_embed):
    from dataclasses import replace

    from vitbook import ViTConfig
    from vitbook.axial import AxialVisionTransformer

    cfg = ViTConfig(depth=2, pos_embed=pos_embed, **AXIAL_VIT)
    model = AxialVisionTransformer(cfg)
    assert model(torch.randn(B, 3, 6, 10)).shape == (B, 7)
    assert all(block.row_attn.grid_size == (3, 5) for block in model.blocks)
    # One axial block has the weights of two ViT blocks (two attentions, two MLPs).
    count = sum(p.numel() for p in model.parameters())
    assert count == replace(cfg, depth=4).num_parameters()


def test_axial_vit_equals_its_equations():
    from vitbook import ViTConfig
    from vitbook.axial import AxialVisionTransformer

    torch.manual_seed(0)
    model = AxialVisionTransformer(ViTConfig(depth=2, pos_embed="learned", **AXIAL_VIT)).eval()
    images = torch.randn(B, 3, 6, 10)
    with torch.no_grad():
        x = model.patch_embed(images) + model.pos_embed  # (B, Gh*Gw, D)
        for block in model.blocks:
            x = block(x)
        expected = model.head(model.norm(x).mean(dim=1))
        torch.testing.assert_close(model(images), expected)


def test_axial_vit_refuses_class_token_and_dropout():
    from vitbook import ViTConfig
    from vitbook.axial import AxialVisionTransformer

    with pytest.raises(ValueError, match="no class token"):
        AxialVisionTransformer(ViTConfig(img_size=8, patch_size=2, embed_dim=12, num_heads=3))
    with pytest.raises(ValueError, match="no dropout"):
        AxialVisionTransformer(ViTConfig(depth=1, drop_rate=0.1, **AXIAL_VIT))
    with pytest.raises(TypeError, match="ViTConfig"):
        AxialVisionTransformer({"depth": 1})


def test_axial_vit_refuses_relative_bias():
    from vitbook import ViTConfig
    from vitbook.axial import AxialVisionTransformer

    with pytest.raises(ValueError, match="pos_embed='relative' adds a bias to full attention"):
        AxialVisionTransformer(ViTConfig(depth=1, pos_embed="relative", **AXIAL_VIT))
    with pytest.raises(ValueError, match="got stem='conv'; use stem='patch'"):
        AxialVisionTransformer(ViTConfig(depth=1, stem="conv", **AXIAL_VIT))
