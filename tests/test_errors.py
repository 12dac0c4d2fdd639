"""Bad input raises ValueError/TypeError whose message names the offending values and the fix."""

import pytest
import torch

from vitbook import (
    AxialAttention,
    MultiHeadSelfAttention,
    PatchEmbedding,
    VisionTransformer,
    ViTConfig,
    patchify,
    resample_pos_embed,
    sincos_1d,
    sincos_2d,
    unpatchify,
)


def small_model(**overrides):
    config = {
        "img_size": 32,
        "patch_size": 8,
        "embed_dim": 24,
        "depth": 1,
        "num_heads": 3,
        "num_classes": 4,
    }
    return VisionTransformer(ViTConfig(**{**config, **overrides}))


CASES = [
    (
        "image size not a multiple of the patch size (config)",
        lambda: ViTConfig(img_size=225, patch_size=16),
        ValueError,
        r"img_size height=225 is not a multiple of patch_size=16; use 224 or 240, "
        r"or change patch_size",
    ),
    (
        "image size not a multiple of the patch size (patchify)",
        lambda: patchify(torch.zeros(1, 3, 30, 32), 8),
        ValueError,
        r"image height=30 is not a multiple of patch_size=8; use 24 or 32",
    ),
    (
        "embed_dim not divisible by num_heads",
        lambda: MultiHeadSelfAttention(100, 12),
        ValueError,
        r"embed_dim=100 is not divisible by num_heads=12; choose embed_dim as a multiple of 12 "
        r"\(e\.g\. 96 or 108\)",
    ),
    (
        "sincos_2d with D not a multiple of 4",
        lambda: sincos_2d((14, 14), 766),
        ValueError,
        r"dim=766 is not a multiple of 4.*use dim=764 or 768",
    ),
    (
        "sincos_1d with odd D",
        lambda: sincos_1d(10, 7),
        ValueError,
        r"dim=7 must be even.*use 6 or 8",
    ),
    (
        "wrong channel count",
        lambda: small_model()(torch.zeros(1, 1, 32, 32)),
        ValueError,
        r"images have 1 channels but the model was built for in_chans=3; convert the images or "
        r"build the model with in_chans=1",
    ),
    (
        "wrong image size",
        lambda: small_model()(torch.zeros(1, 3, 64, 64)),
        ValueError,
        r"images are 64x64 pixels but the model was built for img_size=\(32, 32\)"
        r".*resample_pos_embed",
    ),
    (
        "3-D instead of 4-D input",
        lambda: small_model()(torch.zeros(3, 32, 32)),
        ValueError,
        r"images must have 4 dimensions \(B, C, H, W\), got shape \(3, 32, 32\); add a batch "
        r"dimension with \.unsqueeze\(0\)",
    ),
    (
        "integer images",
        lambda: small_model()(torch.zeros(1, 3, 32, 32, dtype=torch.uint8)),
        TypeError,
        r"images has dtype torch\.uint8, but a floating-point tensor is needed; convert it first, "
        r"e\.g\. images\.float\(\) / 255",
    ),
    (
        "not a tensor",
        lambda: patchify([[0.0]], 2),
        TypeError,
        r"images must be a torch\.Tensor of shape \(B, C, H, W\), got list",
    ),
    (
        "unknown preset name",
        lambda: ViTConfig.from_name("ViT-B/8"),
        ValueError,
        r"unknown preset name 'ViT-B/8'; choose one of ViT-Ti/16, ViT-S/16, ViT-B/16",
    ),
    (
        "unknown override field",
        lambda: ViTConfig.from_name("ViT-B/16", heads=4),
        ValueError,
        r"unknown ViTConfig field\(s\) \['heads'\]; valid fields are .*'num_heads'",
    ),
    (
        "unknown attention impl",
        lambda: MultiHeadSelfAttention(12, 3, impl="flash"),
        ValueError,
        r"impl='flash' is not supported; choose one of 'explicit', 'sdpa'",
    ),
    (
        "unknown attn_impl in config",
        lambda: ViTConfig(attn_impl="fast"),
        ValueError,
        r"attn_impl='fast' is not supported; choose one of 'explicit', 'sdpa'",
    ),
    (
        "unknown pos_embed",
        lambda: ViTConfig(pos_embed="rope"),
        ValueError,
        r"pos_embed='rope' is not supported; choose one of 'learned', 'sincos2d', 'none'",
    ),
    (
        "zero patch size",
        lambda: ViTConfig(patch_size=0),
        ValueError,
        r"patch_size=0 must be a positive integer; use a value >= 1",
    ),
    (
        "negative depth",
        lambda: ViTConfig(depth=-2),
        ValueError,
        r"depth=-2 must be a positive integer; use a value >= 1",
    ),
    (
        "float where an int is needed",
        lambda: ViTConfig(embed_dim=768.0),
        TypeError,
        r"embed_dim must be an int, got 768\.0 of type float",
    ),
    (
        "pool='cls' without a class token",
        lambda: ViTConfig(class_token=False),
        ValueError,
        r"pool='cls' needs class_token=True; set class_token=True or use pool='mean'",
    ),
    (
        "sincos2d model with embed_dim not a multiple of 4",
        lambda: ViTConfig(embed_dim=18, num_heads=3, pos_embed="sincos2d"),
        ValueError,
        r"pos_embed='sincos2d' needs embed_dim as a multiple of 4, got embed_dim=18",
    ),
    (
        "resample a non-square grid without old_grid_size",
        lambda: resample_pos_embed(torch.zeros(1, 1 + 3 * 5, 8), (6, 10)),
        ValueError,
        r"pos_embed has 15 patch rows \(after 1 prefix rows\), which is not a square grid; pass "
        r"old_grid_size=\(Gh, Gw\)",
    ),
    (
        "unpatchify with the wrong grid",
        lambda: unpatchify(torch.zeros(1, 6, 12), 2, (2, 2)),
        ValueError,
        r"patches has 6 patches but grid_size=\(2, 2\) needs 4",
    ),
    (
        "tokens of the wrong width",
        lambda: MultiHeadSelfAttention(12, 3)(torch.zeros(1, 5, 8)),
        ValueError,
        r"tokens have width 8 but the layer was built for embed_dim=12",
    ),
    (
        "class token given to axial attention",
        lambda: AxialAttention(12, 3, grid_size=(2, 3))(torch.zeros(1, 7, 12)),
        ValueError,
        r"axial attention got 7 tokens but grid_size=\(2, 3\) has 6 patches; "
        r"pass patch tokens only",
    ),
    (
        "unknown axis",
        lambda: AxialAttention(12, 3, grid_size=(2, 3), axis="diagonal"),
        ValueError,
        r"axis='diagonal' is not supported; choose one of 'rows', 'cols'",
    ),
    (
        "patch embedding built for an image size that the patches do not tile",
        lambda: PatchEmbedding(img_size=(32, 30), patch_size=8, in_chans=3, embed_dim=4),
        ValueError,
        r"img_size width=30 is not a multiple of patch_size=8; use 24 or 32",
    ),
    (
        "config passed as a dict",
        lambda: VisionTransformer({"embed_dim": 768}),
        TypeError,
        r"config must be a ViTConfig, got dict",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_a_helpful_error(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_there_are_at_least_twelve_distinct_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 12
