"""The full model: presets, parameter counts, state-dict names, init, sizes, options."""

import pytest
import torch

from vitbook import PRESETS, VisionTransformer, ViTConfig, resample_pos_embed

# Exact counts for 1000 classes at 224 px with class token, qkv bias and learned position
# embeddings, as published and as timm builds them.
EXPECTED_PARAMETERS = {
    "ViT-Ti/16": 5_717_416,
    "ViT-S/16": 22_050_664,
    "ViT-B/16": 86_567_656,
    "ViT-B/32": 88_224_232,
    "ViT-L/16": 304_326_632,
    "ViT-H/14": 632_045_800,
}

TINY = {
    "img_size": (24, 40),
    "patch_size": 8,
    "embed_dim": 24,
    "depth": 2,
    "num_heads": 3,
    "num_classes": 5,
}


def tiny(**overrides) -> ViTConfig:
    return ViTConfig(**{**TINY, **overrides})


@pytest.mark.parametrize("name", list(EXPECTED_PARAMETERS))
def test_preset_parameter_counts_match_the_paper(name):
    config = ViTConfig.from_name(name)
    with torch.device("meta"):  # no memory, no init cost: ViT-H has 632M parameters
        model = VisionTransformer(config)
    assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMETERS[name]
    assert config.num_parameters() == EXPECTED_PARAMETERS[name]


def test_presets_follow_table_1():
    assert set(PRESETS) == set(EXPECTED_PARAMETERS)
    b16 = ViTConfig.from_name("ViT-B/16")
    assert (b16.embed_dim, b16.depth, b16.num_heads, b16.mlp_hidden_dim) == (768, 12, 12, 3072)
    assert b16.num_tokens == 197 and b16.embed_dim // b16.num_heads == 64
    h14 = ViTConfig.from_name("ViT-H/14", num_classes=10)
    assert (h14.embed_dim, h14.depth, h14.num_heads, h14.patch_size, h14.num_classes) == (
        1280,
        32,
        16,
        14,
        10,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"pos_embed": "sincos2d"},
        {"pos_embed": "none"},
        {"class_token": False, "pool": "mean"},
        {"qkv_bias": False},
        {"num_classes": 0},
        {"mlp_ratio": 2.5},
    ],
)
def test_closed_form_count_matches_real_count_for_options(overrides):
    config = tiny(**overrides)
    model = VisionTransformer(config)
    assert sum(p.numel() for p in model.parameters()) == config.num_parameters()


def test_state_dict_keys_follow_timm():
    model = VisionTransformer(tiny(depth=1))
    keys = list(model.state_dict())
    assert keys == [
        "cls_token",
        "pos_embed",
        "patch_embed.proj.weight",
        "patch_embed.proj.bias",
        "blocks.0.norm1.weight",
        "blocks.0.norm1.bias",
        "blocks.0.attn.qkv.weight",
        "blocks.0.attn.qkv.bias",
        "blocks.0.attn.proj.weight",
        "blocks.0.attn.proj.bias",
        "blocks.0.norm2.weight",
        "blocks.0.norm2.bias",
        "blocks.0.mlp.fc1.weight",
        "blocks.0.mlp.fc1.bias",
        "blocks.0.mlp.fc2.weight",
        "blocks.0.mlp.fc2.bias",
        "norm.weight",
        "norm.bias",
        "head.weight",
        "head.bias",
    ]
    assert model.pos_embed.shape == (1, 1 + 3 * 5, 24)
    assert model.cls_token.shape == (1, 1, 24)


def test_sincos_table_is_a_non_persistent_buffer():
    model = VisionTransformer(tiny(pos_embed="sincos2d"))
    assert "pos_embed" not in model.state_dict()
    assert not any(name == "pos_embed" for name, _ in model.named_parameters())
    assert torch.equal(model.pos_embed[0, 0], torch.zeros(24))  # the class token gets no position


def test_init_follows_timm():
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig.from_name("ViT-Ti/16", num_classes=100))
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = torch.cat([m.weight.flatten() for m in linears])
    assert weights.std().item() == pytest.approx(0.02, rel=0.02)
    # timm truncates at the absolute values +-2, i.e. 100 standard deviations: in effect a plain
    # normal, so about 4.55% of the weights lie beyond two standard deviations.
    beyond = (weights.abs() > 0.04).float().mean().item()
    assert beyond == pytest.approx(0.0455, abs=0.003)
    assert all((m.bias == 0).all() for m in linears)
    assert model.cls_token.abs().max().item() < 1e-5
    assert model.pos_embed.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.equal(model.norm.weight, torch.ones(192))


def test_forward_shapes_on_a_non_square_image():
    torch.manual_seed(0)
    config = tiny()
    model = VisionTransformer(config)
    images = torch.randn(2, 3, 24, 40)
    assert model(images).shape == (2, 5)
    assert model.forward_features(images).shape == (2, 1 + 15, 24)
    logits, weights = model.forward_with_attention(images)
    torch.testing.assert_close(logits, model(images))
    assert len(weights) == 2
    assert all(w.shape == (2, 3, 16, 16) for w in weights)
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(2, 3, 16))


def test_sdpa_and_explicit_models_agree():
    torch.manual_seed(0)
    explicit = VisionTransformer(tiny(attn_impl="explicit")).eval()
    fused = VisionTransformer(tiny(attn_impl="sdpa")).eval()
    fused.load_state_dict(explicit.state_dict())
    images = torch.randn(2, 3, 24, 40)
    torch.testing.assert_close(fused(images), explicit(images), rtol=1e-5, atol=1e-5)


def test_mean_pool_averages_patch_tokens():
    torch.manual_seed(0)
    model = VisionTransformer(tiny(class_token=False, pool="mean"))
    images = torch.randn(2, 3, 24, 40)
    features = model.forward_features(images)
    assert features.shape == (2, 15, 24)
    torch.testing.assert_close(model(images), model.head(features.mean(dim=1)))


def test_cls_pool_reads_the_first_token():
    torch.manual_seed(0)
    model = VisionTransformer(tiny())
    images = torch.randn(2, 3, 24, 40)
    torch.testing.assert_close(model(images), model.head(model.forward_features(images)[:, 0]))


def test_without_position_embeddings_the_model_ignores_patch_order():
    # No positions + mean pooling: shuffling the patches of the image cannot change the logits.
    torch.manual_seed(0)
    model = VisionTransformer(tiny(pos_embed="none", class_token=False, pool="mean")).eval()
    images = torch.randn(2, 3, 24, 40)
    blocks = images.unfold(2, 8, 8).unfold(3, 8, 8)  # (B, C, Gh, Gw, P, P)
    shuffled = blocks.flip(2).flip(3).permute(0, 1, 2, 4, 3, 5).reshape(2, 3, 24, 40)
    torch.testing.assert_close(model(shuffled), model(images), rtol=1e-5, atol=1e-5)
    with_positions = VisionTransformer(tiny(class_token=False, pool="mean")).eval()
    assert not torch.allclose(with_positions(shuffled), with_positions(images), atol=1e-4)


def test_model_runs_backward():
    torch.manual_seed(0)
    model = VisionTransformer(tiny())
    loss = model(torch.randn(2, 3, 24, 40)).logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_resampled_pos_embed_moves_a_model_to_a_new_size():
    torch.manual_seed(0)
    small = VisionTransformer(tiny(img_size=32, patch_size=8))
    with pytest.raises(ValueError, match=r"64x64.*img_size=\(32, 32\).*resample_pos_embed"):
        small(torch.randn(1, 3, 64, 64))
    large = VisionTransformer(tiny(img_size=64, patch_size=8))
    state = small.state_dict()
    state["pos_embed"] = resample_pos_embed(state["pos_embed"], large.config.grid_size)
    large.load_state_dict(state)
    assert large(torch.randn(1, 3, 64, 64)).shape == (1, 5)
    assert torch.equal(large.pos_embed[:, 0], small.pos_embed[:, 0])


def test_config_is_frozen_and_keyword_only():
    config = tiny()
    with pytest.raises(AttributeError):
        config.depth = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        ViTConfig(224, 16)  # type: ignore[misc]
    assert ViTConfig(img_size=32, patch_size=8).img_size == (32, 32)


# --- pos_embed="relative": a learned bias per head and 2D offset in every block ----------------


@pytest.mark.parametrize("class_token", [True, False])
def test_relative_bias_parameter_count_and_shapes(class_token):
    pool = "cls" if class_token else "mean"
    config = tiny(pos_embed="relative", class_token=class_token, pool=pool)
    model = VisionTransformer(config)
    # Grid 3 x 5: (2*3 - 1) * (2*5 - 1) = 45 offsets, 3 heads, 2 blocks.
    tables = [bias.relative_position_bias_table for bias in model.rel_pos_bias]
    assert [tuple(t.shape) for t in tables] == [(45, 3), (45, 3)]
    assert model.pos_embed is None
    assert sum(p.numel() for p in model.parameters()) == config.num_parameters()
    assert config.num_parameters() == tiny(pos_embed="none", class_token=class_token,
                                           pool=pool).num_parameters() + 2 * 45 * 3
    logits, weights = model.forward_with_attention(torch.randn(2, 3, 24, 40))
    n = config.num_tokens
    assert logits.shape == (2, 5) and [w.shape for w in weights] == [(2, 3, n, n)] * 2


def test_relative_bias_of_zero_is_the_model_without_positions():
    torch.manual_seed(0)
    relative = VisionTransformer(tiny(pos_embed="relative")).eval()
    plain = VisionTransformer(tiny(pos_embed="none")).eval()
    plain.load_state_dict(relative.state_dict(), strict=False)  # all but the bias tables
    images = torch.randn(2, 3, 24, 40)
    with torch.no_grad():
        for bias in relative.rel_pos_bias:
            bias.relative_position_bias_table.normal_()  # larger than the init's std 0.02
    # At init the residual stream hardly depends on attention; its weights show the bias.
    biased = relative.forward_with_attention(images)[1][0]
    assert (biased - plain.forward_with_attention(images)[1][0]).abs().max() > 0.1
    with torch.no_grad():
        for bias in relative.rel_pos_bias:
            bias.relative_position_bias_table.zero_()
    torch.testing.assert_close(relative(images), plain(images), rtol=0, atol=0)
    torch.testing.assert_close(
        relative.forward_with_attention(images)[1][0],
        plain.forward_with_attention(images)[1][0],
        rtol=0,
        atol=0,
    )


def test_relative_bias_enters_the_logits_of_each_block():
    torch.manual_seed(0)
    model = VisionTransformer(tiny(pos_embed="relative", attn_impl="explicit")).eval()
    x = model.embed(torch.randn(2, 3, 24, 40))  # (B, N, D)
    block = model.blocks[0]
    q, k, _ = block.attn._split_heads(block.norm1(x))  # each (B, Nh, N, Dh)
    logits = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + model.attention_bias(0)
    _, weights = block.forward_with_weights(x, mask=model.attention_bias(0))
    torch.testing.assert_close(weights, logits.softmax(dim=-1))
    # The class token's row and column get no bias.
    bias = model.attention_bias(1)
    assert bias[:, 0].abs().sum() == 0 and bias[:, :, 0].abs().sum() == 0
    assert bias[:, 1:, 1:].abs().sum() > 0


def test_relative_bias_sdpa_and_explicit_agree_and_train():
    torch.manual_seed(0)
    explicit = VisionTransformer(tiny(pos_embed="relative", attn_impl="explicit")).eval()
    fused = VisionTransformer(tiny(pos_embed="relative", attn_impl="sdpa")).eval()
    fused.load_state_dict(explicit.state_dict())
    images = torch.randn(2, 3, 24, 40)
    torch.testing.assert_close(fused(images), explicit(images), rtol=1e-5, atol=1e-5)
    fused(images).logsumexp(-1).mean().backward()
    assert all(b.relative_position_bias_table.grad is not None for b in fused.rel_pos_bias)


# --- DeiT's distillation token ----------------------------------------------------------------

# DeiT's distilled models at 224 px, 1000 classes (Touvron et al., 2021; timm's
# deit_*_distilled_patch16_224): the ViT of the same size plus the distillation token, its
# position-embedding row and a second head, D + D + (D * 1000 + 1000).
EXPECTED_DISTILLED = {
    "ViT-Ti/16": 5_910_800,
    "ViT-S/16": 22_436_432,
    "ViT-B/16": 87_338_192,
}


@pytest.mark.parametrize("name", list(EXPECTED_DISTILLED))
def test_deit_distilled_parameter_counts(name):
    config = ViTConfig.from_name(name, distilled=True)
    with torch.device("meta"):
        model = VisionTransformer(config)
    assert sum(p.numel() for p in model.parameters()) == EXPECTED_DISTILLED[name]
    assert config.num_parameters() == EXPECTED_DISTILLED[name]
    d = config.embed_dim
    plain = EXPECTED_PARAMETERS[name]
    assert EXPECTED_DISTILLED[name] - plain == 2 * d + d * 1000 + 1000
    assert (config.num_prefix_tokens, config.num_tokens) == (2, 198)


@pytest.mark.parametrize(
    "overrides",
    [
        {"distilled": True},
        {"distilled": True, "pos_embed": "sincos2d"},
        {"distilled": True, "pos_embed": "relative"},
        {"distilled": True, "num_classes": 0},
        {"distilled": True, "stem": "conv", "qkv_bias": False},
    ],
)
def test_closed_form_count_matches_real_count_for_the_distilled_options(overrides):
    config = tiny(**overrides)
    model = VisionTransformer(config)
    assert sum(p.numel() for p in model.parameters()) == config.num_parameters()


def test_distilled_state_dict_keys_follow_timm():
    model = VisionTransformer(tiny(depth=1, distilled=True))
    keys = list(model.state_dict())
    assert keys[:3] == ["cls_token", "dist_token", "pos_embed"]
    assert keys[-4:] == ["head.weight", "head.bias", "head_dist.weight", "head_dist.bias"]
    plain = list(VisionTransformer(tiny(depth=1)).state_dict())
    assert sorted(set(keys) - set(plain)) == [
        "dist_token", "head_dist.bias", "head_dist.weight"
    ]  # fmt: skip
    assert model.pos_embed.shape == (1, 2 + 3 * 5, 24)  # both prefix tokens have a position


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != "2.13.0",
    reason=f"recorded with torch 2.13.0's random stream; torch {torch.__version__} draws "
           "other initial weights from the same seed",
)
def test_without_the_new_options_the_model_is_built_exactly_as_before():
    # Recorded at commit fd21d46, before the distillation token and the stem existed
    # (torch 2.13.0, CPU): the same seed gives the same weights, and the random stream
    # after building the model is where it was, so seeded training runs are unchanged.
    recorded = [(TINY, 516.45804376, 0.8845755457878113),
                ({"img_size": (8, 12), "patch_size": 2, "in_chans": 1, "embed_dim": 16,
                  "depth": 2, "num_heads": 4, "num_classes": 10, "pos_embed": "relative",
                  "class_token": False, "pool": "mean"}, 213.05503391, 0.8316075801849365)]
    for fields, total, next_draw in recorded:
        torch.manual_seed(0)
        model = VisionTransformer(ViTConfig(**fields))
        state = model.state_dict()
        assert sum(t.double().abs().sum().item() for t in state.values()) == pytest.approx(
            total, abs=1e-6
        )
        assert torch.rand(1).item() == pytest.approx(next_draw, abs=1e-7)
        assert not any(k.startswith(("dist_token", "head_dist", "patch_embed.stem"))
                       for k in state)  # fmt: skip


def test_distilled_model_returns_both_heads_in_training_and_their_mean_in_eval():
    torch.manual_seed(0)
    model = VisionTransformer(tiny(distilled=True, drop_rate=0.0))
    images = torch.randn(2, 3, 24, 40)
    logits, logits_dist = model.train()(images)
    assert logits.shape == logits_dist.shape == (2, 5)
    features = model.forward_features(images)
    assert features.shape == (2, 2 + 15, 24)
    torch.testing.assert_close(logits, model.head(features[:, 0]))
    torch.testing.assert_close(logits_dist, model.head_dist(features[:, 1]))
    model.eval()
    torch.testing.assert_close(model(images), (logits + logits_dist) / 2)
    both = model.forward_heads(features)
    torch.testing.assert_close(both[0], logits)  # forward_heads ignores the mode
    mean, weights = model.forward_with_attention(images)
    torch.testing.assert_close(mean, model(images))
    assert [w.shape for w in weights] == [(2, 3, 17, 17)] * 2
    with pytest.raises(ValueError, match="this model has one \\(distilled=False\\)"):
        VisionTransformer(tiny()).forward_heads(features)


def test_distillation_token_init_and_position_rows():
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig.from_name("ViT-S/16", num_classes=10, distilled=True))
    assert model.dist_token.std().item() == pytest.approx(0.02, rel=0.15)  # timm's init
    assert model.cls_token.abs().max().item() < 1e-5
    assert model.head_dist.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert (model.head_dist.bias == 0).all()
    sincos = VisionTransformer(tiny(distilled=True, pos_embed="sincos2d"))
    assert torch.equal(sincos.pos_embed[0, :2], torch.zeros(2, 24))  # no position for either
    relative = VisionTransformer(tiny(distilled=True, pos_embed="relative"))
    bias = relative.attention_bias(0)  # (Nh, N, N)
    assert bias[:, :2].abs().sum() == 0 and bias[:, :, :2].abs().sum() == 0
    assert bias[:, 2:, 2:].abs().sum() > 0


def test_reset_classifier_replaces_both_heads_with_zeros():
    model = VisionTransformer(tiny(distilled=True)).eval()
    model.reset_classifier(7)
    assert model.head.weight.shape == model.head_dist.weight.shape == (7, 24)
    images = torch.randn(2, 3, 24, 40)
    assert torch.equal(model(images), torch.zeros(2, 7))
    model.reset_classifier(0)
    assert isinstance(model.head_dist, torch.nn.Identity)
    features = model.forward_features(images)
    torch.testing.assert_close(model(images), (features[:, 0] + features[:, 1]) / 2)


def test_distilled_needs_the_class_token_readout():
    with pytest.raises(ValueError, match="distilled=True.*needs class_token=True and pool='cls'"):
        tiny(distilled=True, class_token=False, pool="mean")
    with pytest.raises(ValueError, match="got class_token=True, pool='mean'"):
        tiny(distilled=True, pool="mean")
    with pytest.raises(TypeError, match="distilled must be True or False, got 'yes'"):
        tiny(distilled="yes")


def test_a_distilled_model_moves_to_a_new_resolution_keeping_both_prefix_rows():
    from vitbook.pretrained.transfer import change_resolution

    torch.manual_seed(0)
    model = VisionTransformer(tiny(img_size=32, patch_size=8, distilled=True))
    bigger = change_resolution(model, 48)
    assert bigger.pos_embed.shape == (1, 2 + 6 * 6, 24)
    assert torch.equal(bigger.pos_embed[:, :2], model.pos_embed[:, :2])
    assert torch.equal(bigger.dist_token, model.dist_token)
    state = model.state_dict()
    resampled = resample_pos_embed(state["pos_embed"], (6, 6), num_prefix_tokens=2)
    torch.testing.assert_close(bigger.pos_embed, resampled)
    assert bigger.eval()(torch.randn(2, 3, 48, 48)).shape == (2, 5)
