"""The convolutional stem: same token grid as the patch embedding, counted and checked."""

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from vitbook import PatchEmbedding, VisionTransformer, ViTConfig
from vitbook.stem import ConvPatchEmbedding, conv_stem_layers, embedding_cost

# All sizes differ: B=2, C=3, H=24, W=40, P=8 (Gh=3, Gw=5), D=20.
B, C, H, W, P, D = 2, 3, 24, 40, 8, 20


def test_layers_follow_xiao_et_al_and_timm():
    # Stride-2 3 x 3 convolutions, widths doubling up to D (ViT_C-1GF: 24, 48, 96, 192 at P=16).
    assert conv_stem_layers(16, 192) == [(24, 2), (48, 2), (96, 2), (192, 2)]
    assert conv_stem_layers(4, 256) == [(128, 2), (256, 2)]
    assert conv_stem_layers(2, 32) == [(32, 2)]
    # Extra depth comes first, at stride 1 and the first width.
    assert conv_stem_layers(8, D, depth=5) == [(5, 1), (5, 1), (5, 2), (10, 2), (20, 2)]


def test_the_stem_ends_on_the_patch_embeddings_grid():
    torch.manual_seed(0)
    stem = ConvPatchEmbedding((H, W), P, C, D)
    plain = PatchEmbedding((H, W), P, C, D)
    images = torch.randn(B, C, H, W)
    assert stem(images).shape == plain(images).shape == (B, 3 * 5, D)
    assert (stem.grid_size, stem.num_patches) == (plain.grid_size, plain.num_patches)


def test_forward_is_convolutions_layernorm_gelu_then_a_1x1_projection():
    torch.manual_seed(0)
    stem = ConvPatchEmbedding((H, W), P, C, D, depth=4)
    with torch.no_grad():  # norms away from their (1, 0) init, so that a skipped norm shows
        for layer in stem.stem:
            layer.norm.weight.uniform_(0.5, 1.5)
            layer.norm.bias.normal_()
    images = torch.randn(B, C, H, W)
    x = images
    for layer, (_, stride) in zip(stem.stem, conv_stem_layers(P, D, 4), strict=True):
        x = F.conv2d(x, layer.conv.weight, stride=stride, padding=1)
        x = F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), layer.norm.weight,
                         layer.norm.bias, eps=1e-6).permute(0, 3, 1, 2)  # fmt: skip
        x = F.gelu(x)
    x = F.conv2d(x, stem.proj.weight, stem.proj.bias)  # (B, D, Gh, Gw)
    expected = rearrange(x, "b d gh gw -> b (gh gw) d")
    torch.testing.assert_close(stem(images), expected)


def test_tokens_come_in_row_major_grid_order_and_see_their_neighbours():
    # A pixel changed in grid cell (1, 3) changes that token; with 3 x 3 kernels of stride 2
    # (padding 1) its bottom-right pixel also reaches the tokens below and to the right, which
    # a patch embedding never does.
    torch.manual_seed(0)
    stem = ConvPatchEmbedding((H, W), P, C, D).eval()
    images = torch.randn(1, C, H, W)
    moved = images.clone()
    moved[0, :, 2 * P - 1, 4 * P - 1] += 5.0  # the bottom-right pixel of cell (1, 3)
    changed = (stem(moved) - stem(images)).abs().sum(-1)[0] > 1e-5  # (Gh * Gw,)
    grid = changed.reshape(3, 5)
    assert grid[1:3, 3:5].all()  # its own token and its neighbours below and to the right
    assert grid.sum() == 4
    plain = PatchEmbedding((H, W), P, C, D)
    assert ((plain(moved) - plain(images)).abs().sum(-1)[0] > 1e-5).sum() == 1


def test_parameters_and_macs_against_the_patch_embedding():
    stem = ConvPatchEmbedding(8, 2, 1, 32, depth=2)
    # 3x3 1->32 (no bias) + LN, 3x3 32->32 + LN, 1x1 32->32 with bias.
    expected_parameters = 9 * 32 + 64 + 9 * 32 * 32 + 64 + 32 * 32 + 32
    # MACs: 64 positions x 9 x 1 x 32, 16 positions x 9 x 32 x 32, 16 x 32 x 32.
    expected_macs = 64 * 9 * 32 + 16 * 9 * 32 * 32 + 16 * 32 * 32
    cost = embedding_cost(stem, 8)
    assert cost == {"parameters": expected_parameters, "macs": expected_macs}
    plain = embedding_cost(PatchEmbedding(8, 2, 1, 32), 8)
    assert plain == {"parameters": 4 * 32 + 32, "macs": 16 * 4 * 32}
    with pytest.raises(TypeError, match="pass model.patch_embed"):
        embedding_cost(torch.nn.Conv2d(1, 2, 3), 8)


@pytest.mark.parametrize("stem_depth", [None, 4])
def test_the_model_counts_its_stem_in_closed_form(stem_depth):
    config = ViTConfig(img_size=(H, W), patch_size=P, embed_dim=24, depth=2, num_heads=3,
                       num_classes=5, stem="conv", stem_depth=stem_depth)  # fmt: skip
    model = VisionTransformer(config)
    assert isinstance(model.patch_embed, ConvPatchEmbedding)
    assert sum(p.numel() for p in model.parameters()) == config.num_parameters()
    assert model(torch.randn(B, C, H, W)).shape == (B, 5)


def test_a_stem_model_has_the_same_encoder_and_head_as_the_plain_one():
    # Only patch_embed differs, so the comparison isolates the stem.
    plain = VisionTransformer(ViTConfig(img_size=(H, W), patch_size=P, embed_dim=24, depth=2,
                                        num_heads=3, num_classes=5))  # fmt: skip
    conv = VisionTransformer(ViTConfig(img_size=(H, W), patch_size=P, embed_dim=24, depth=2,
                                       num_heads=3, num_classes=5, stem="conv"))  # fmt: skip
    shapes = {k: v.shape for k, v in plain.state_dict().items() if not k.startswith("patch_")}
    assert shapes == {k: v.shape for k, v in conv.state_dict().items()
                      if not k.startswith("patch_")}  # fmt: skip
    assert [k for k in conv.state_dict() if k.startswith("patch_embed")] == [
        "patch_embed.stem.0.conv.weight", "patch_embed.stem.0.norm.weight",
        "patch_embed.stem.0.norm.bias", "patch_embed.stem.1.conv.weight",
        "patch_embed.stem.1.norm.weight", "patch_embed.stem.1.norm.bias",
        "patch_embed.stem.2.conv.weight", "patch_embed.stem.2.norm.weight",
        "patch_embed.stem.2.norm.bias", "patch_embed.proj.weight", "patch_embed.proj.bias",
    ]  # fmt: skip


def test_train_and_eval_mode_compute_the_same_stem():
    # LayerNorm keeps no running statistics: a batch of one and eval mode change nothing.
    torch.manual_seed(0)
    stem = ConvPatchEmbedding((H, W), P, C, D)
    images = torch.randn(3, C, H, W)
    train = stem.train()(images)
    torch.testing.assert_close(stem.eval()(images), train)
    torch.testing.assert_close(stem(images[1:2]), train[1:2])
    assert all(buffer.numel() == 0 for buffer in stem.buffers())


def test_bad_configurations_and_inputs_are_refused():
    with pytest.raises(ValueError, match=r"power of 2 \(2, 4, 8, 16, ...\), got 14.*stem='patch'"):
        ViTConfig.from_name("ViT-H/14", stem="conv")
    with pytest.raises(ValueError, match="stem_depth=1 must be an int >= 3"):
        ConvPatchEmbedding(32, 8, 3, 16, depth=1)
    with pytest.raises(ValueError, match="stem_depth=2 applies to stem='conv' only"):
        ViTConfig(img_size=8, patch_size=2, embed_dim=8, depth=1, num_heads=2, stem_depth=2)
    with pytest.raises(ValueError, match="stem='pixels' is not supported; choose one of"):
        ViTConfig(img_size=8, patch_size=2, embed_dim=8, depth=1, num_heads=2, stem="pixels")
    with pytest.raises(ValueError, match="embed_dim=4 is too narrow.*embed_dim >= 8"):
        conv_stem_layers(16, 4)
    with pytest.raises(ValueError, match=r"embed_dim=12 is not a multiple of 8, so the stem's "
                       r"widths cannot double 3 times up to it \(they would be \[1, 3, 6, 12\]\); "
                       r"use embed_dim=8 or 16"):  # fmt: skip
        conv_stem_layers(16, 12)
    with pytest.raises(ValueError, match=r"embed_dim=30 is not a multiple of 4.*use embed_dim=28 "
                       r"or 32, or a smaller patch_size"):  # fmt: skip
        ViTConfig(img_size=16, patch_size=8, embed_dim=30, depth=1, num_heads=2, stem="conv")
    assert [w for w, _ in conv_stem_layers(4, 30)] == [15, 30]  # one doubling: 30 is whole
    stem = ConvPatchEmbedding((H, W), P, C, D)
    with pytest.raises(ValueError, match="images have 1 channels but the model was built for"):
        stem(torch.randn(B, 1, H, W))
    with pytest.raises(ValueError, match=r"images are 24x24 pixels.*img_size=\(24, 40\)"):
        stem(torch.randn(B, C, H, H))
    with pytest.raises(TypeError, match="images has dtype torch.float64"):
        stem(torch.randn(B, C, H, W, dtype=torch.float64))
