"""vitbook.pretrained.convert: Hugging Face and timm ViT weights load into vitbook and compute the
same thing.

The parity tests build randomly initialised ``transformers`` ViTs (a test-only dependency, no
network), perturb every parameter so that no tensor is left at a symmetric initial value (zero
biases, unit LayerNorm scales would hide a swapped query and key bias), convert them and compare
logits and attention weights with the original's eager attention.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hubtools import perturb_
from safetensors.torch import load_file

from vitbook import VisionTransformer, ViTConfig
from vitbook.pretrained.convert import (
    config_from_hf,
    from_hf_state_dict,
    from_timm_state_dict,
    hf_class_names,
    to_hf_state_dict,
)

transformers = pytest.importorskip("transformers")

# float32 and the same operations in the same order: the differences measured are exactly 0.
# The tolerance leaves room for another BLAS summing in another order (about 1e-6 at these sizes).
PARITY = {"rtol": 1e-5, "atol": 1e-5}
# vitbook's fused path (scaled_dot_product_attention) against Hugging Face's eager attention.
FUSED = {"rtol": 1e-4, "atol": 1e-5}


def hf_vit(*, eps: float = 1e-12, pooled: bool = False, seed: int = 0, **sizes):
    """A small random Hugging Face ViT with all sizes different and every parameter perturbed."""
    torch.manual_seed(seed)
    fields = {
        "hidden_size": 48,
        "num_hidden_layers": 3,
        "num_attention_heads": 3,
        "intermediate_size": 96,
        "image_size": (32, 48),  # a 4 x 6 grid of 8 x 8 patches, N = 25
        "patch_size": 8,
        "num_labels": 7,
        "layer_norm_eps": eps,
        "id2label": {i: f"class {chr(ord('a') + i)}" for i in range(7)},
        "attn_implementation": "eager",  # attention weights are returned only by eager attention
        **sizes,
    }
    config = transformers.ViTConfig(**fields)
    if pooled:
        model = transformers.ViTModel(config, add_pooling_layer=True)
    else:
        model = transformers.ViTForImageClassification(config)
    perturb_(model, 0.1)
    return model.eval(), config


def hf_outputs(model, images):
    with torch.no_grad():
        out = model(pixel_values=images, output_attentions=True)
    return out.logits, out.attentions


@pytest.mark.parametrize("eps", [1e-12, 0.1], ids=["eps=1e-12", "eps=0.1"])
def test_hf_model_converts_with_the_same_logits_and_attention_weights(eps):
    hf_model, hf_config = hf_vit(eps=eps)
    model = from_hf_state_dict(hf_model.state_dict(), hf_config)
    images = torch.randn(2, 3, 32, 48)
    expected_logits, expected_weights = hf_outputs(hf_model, images)
    with torch.no_grad():
        logits, weights = model.forward_with_attention(images)
        plain = model(images)
    assert model.config.norm_eps == eps and not model.training
    assert expected_logits.abs().max() > 0.5  # the comparison is not between near-zero numbers
    torch.testing.assert_close(logits, expected_logits, **PARITY)
    torch.testing.assert_close(plain, expected_logits, **PARITY)
    assert len(weights) == len(expected_weights) == 3
    for ours, theirs in zip(weights, expected_weights, strict=True):
        assert ours.shape == theirs.shape == (2, 3, 25, 25)
        torch.testing.assert_close(ours, theirs, **PARITY)


def test_the_layernorm_epsilon_is_carried_over_and_matters():
    hf_model, hf_config = hf_vit(eps=0.1)  # large enough that using timm's 1e-6 shows
    images = torch.randn(2, 3, 32, 48)
    expected, _ = hf_outputs(hf_model, images)
    wrong = from_hf_state_dict(hf_model.state_dict(), hf_config, norm_eps=1e-6)
    with torch.no_grad():
        difference = (wrong(images) - expected).abs().max().item()
    assert difference > 0.1
    model = from_hf_state_dict(hf_model.state_dict(), hf_config)
    epsilons = {m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    assert epsilons == {0.1}


def test_fused_attention_path_matches_too():
    hf_model, hf_config = hf_vit()
    model = from_hf_state_dict(hf_model.state_dict(), hf_config, attn_impl="sdpa")
    images = torch.randn(3, 3, 32, 48)
    expected, _ = hf_outputs(hf_model, images)
    with torch.no_grad():
        torch.testing.assert_close(model(images), expected, **FUSED)


def test_hub_file_names_and_transformers_5_module_names_give_the_same_model(tmp_path):
    hf_model, hf_config = hf_vit()
    hf_model.save_pretrained(tmp_path)  # written with the names of the files on the Hub
    on_disk = load_file(str(tmp_path / "model.safetensors"))
    assert "vit.encoder.layer.0.attention.attention.query.weight" in on_disk
    in_memory = hf_model.state_dict()
    assert on_disk.keys() != in_memory.keys()
    a = from_hf_state_dict(on_disk, hf_config)
    b = from_hf_state_dict(in_memory, hf_config.to_dict())  # the config as a dict works too
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


def test_to_hf_state_dict_writes_exactly_the_hub_files_names_and_tensors(tmp_path):
    hf_model, hf_config = hf_vit()
    hf_model.save_pretrained(tmp_path)
    on_disk = load_file(str(tmp_path / "model.safetensors"))
    back = to_hf_state_dict(from_hf_state_dict(on_disk, hf_config))
    assert back.keys() == on_disk.keys()
    for name, tensor in on_disk.items():
        torch.testing.assert_close(back[name], tensor, rtol=0, atol=0, msg=name)


def test_vit_model_without_classifier_converts_to_features_and_names_the_pooler():
    hf_model, hf_config = hf_vit(pooled=True)
    state = hf_model.state_dict()
    with pytest.raises(ValueError, match=r"pooler\.dense\.weight \(the tanh 'pooler'"):
        from_hf_state_dict(state, hf_config)
    kept = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    model = from_hf_state_dict(kept, hf_config)
    assert model.config.num_classes == 0
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        expected = hf_model(pixel_values=images).last_hidden_state  # (B, N, D)
        torch.testing.assert_close(model.forward_features(images), expected, **PARITY)


def test_config_from_hf_reads_every_field():
    hf_config = transformers.ViTConfig(
        hidden_size=40, num_hidden_layers=2, num_attention_heads=5, intermediate_size=120,
        image_size=(24, 40), patch_size=8, num_channels=2, qkv_bias=False, layer_norm_eps=1e-5,
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2,
    )  # fmt: skip
    config = config_from_hf(hf_config, num_classes=3, attn_impl="sdpa")
    assert config == ViTConfig(
        img_size=(24, 40), patch_size=8, in_chans=2, num_classes=3, embed_dim=40, depth=2,
        num_heads=5, mlp_ratio=3.0, qkv_bias=False, norm_eps=1e-5, drop_rate=0.1,
        attn_drop_rate=0.2, attn_impl="sdpa",
    )  # fmt: skip


def test_an_mlp_width_that_float_division_does_not_give_back():
    config = config_from_hf({"hidden_size": 7, "num_hidden_layers": 1, "num_attention_heads": 1,
                             "intermediate_size": 61, "image_size": 8, "patch_size": 4},
                            num_classes=0)  # fmt: skip
    assert 7 * (61 / 7) < 61 and config.mlp_hidden_dim == 61


def test_without_qkv_bias_and_with_another_channel_count():
    hf_model, hf_config = hf_vit(qkv_bias=False, num_channels=1)
    model = from_hf_state_dict(hf_model.state_dict(), hf_config)
    assert model.blocks[0].attn.qkv.bias is None
    images = torch.randn(2, 1, 32, 48)
    expected, _ = hf_outputs(hf_model, images)
    with torch.no_grad():
        torch.testing.assert_close(model(images), expected, **PARITY)


def test_class_names_come_in_logit_order():
    _, hf_config = hf_vit()
    assert hf_class_names(hf_config) == tuple(f"class {c}" for c in "abcdefg")
    eleven = {str(i): f"name {i}" for i in (10, 2, 0, 1, 3, 4, 5, 6, 7, 8, 9)}
    assert hf_class_names({"id2label": eleven})[2:] == tuple(f"name {i}" for i in range(2, 11))
    with pytest.raises(ValueError, match="without gaps"):
        hf_class_names({"id2label": {"0": "a", "2": "c"}})


# --- nothing dropped, nothing invented ------------------------------------------------------


def test_missing_unexpected_and_misshapen_keys_are_named():
    hf_model, hf_config = hf_vit()
    state = dict(hf_model.state_dict())
    del state["vit.layernorm.bias"]
    with pytest.raises(ValueError, match=r"lacks 1 parameter.*'layernorm\.bias'"):
        from_hf_state_dict(state, hf_config)
    state = {**hf_model.state_dict(), "vit.extra.weight": torch.zeros(3)}
    with pytest.raises(ValueError, match=r"1 key\(s\) that a ViT has no place for: \['vit\.extra"):
        from_hf_state_dict(state, hf_config)
    state = {k: v for k, v in hf_model.state_dict().items() if "layers.1.attention.v_proj" not in k}
    with pytest.raises(ValueError, match=r"blocks\.1\.attn\.qkv\.\w+ needs query, key and value.*"
                                         r"lacks \['value'\]"):  # fmt: skip
        from_hf_state_dict(state, hf_config)
    wrong_size = {**hf_config.to_dict(), "image_size": 64}
    with pytest.raises(ValueError, match=r"position_embeddings: \(1, 25, 48\), expected "
                                         r"\(1, 65, 48\).*resample_pos_embed"):  # fmt: skip
        from_hf_state_dict(hf_model.state_dict(), wrong_size)
    fewer_labels = {**hf_config.to_dict(), "id2label": {"0": "a", "1": "b"}}
    with pytest.raises(ValueError, match="classifier has 7 rows but id2label names 2"):
        from_hf_state_dict(hf_model.state_dict(), fewer_labels)


def test_configs_vitbook_cannot_build_are_refused():
    _, hf_config = hf_vit()
    base = hf_config.to_dict()
    with pytest.raises(ValueError, match="model_type='beit' is neither a plain ViT nor a DeiT"):
        config_from_hf({**base, "model_type": "beit"}, num_classes=7)
    with pytest.raises(ValueError, match="hidden_act='gelu_new'.*exact GELU"):
        config_from_hf({**base, "hidden_act": "gelu_new"}, num_classes=7)
    with pytest.raises(ValueError, match=r"lacks \['patch_size'\]"):
        config_from_hf({k: v for k, v in base.items() if k != "patch_size"}, num_classes=7)
    with pytest.raises(TypeError, match="hf_config must be a transformers ViTConfig"):
        config_from_hf("config.json", num_classes=7)
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        from_hf_state_dict([("cls_token", torch.zeros(1))], hf_config)
    with pytest.raises(TypeError, match=r"not tensors: \['cls_token'\]"):
        from_hf_state_dict({"cls_token": [0.0]}, hf_config)


# --- timm -----------------------------------------------------------------------------------

TIMM_CONFIG = ViTConfig(img_size=(32, 48), patch_size=8, embed_dim=48, depth=2, num_heads=3,
                        num_classes=7)  # fmt: skip


def test_timm_state_dict_loads_unchanged():
    torch.manual_seed(0)
    source = VisionTransformer(TIMM_CONFIG).eval()
    model = from_timm_state_dict(source.state_dict(), TIMM_CONFIG, attn_impl="sdpa")
    assert model.config.attn_impl == "sdpa" and model.config.norm_eps == 1e-6
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        torch.testing.assert_close(model(images), source(images), **FUSED)


def test_timm_preset_name_and_its_errors():
    preset = ViTConfig.from_name("ViT-Ti/16", depth=1, img_size=32, num_classes=3)
    model = from_timm_state_dict(VisionTransformer(preset).state_dict(), "ViT-Ti/16", depth=1,
                                 img_size=32, num_classes=3)  # fmt: skip
    assert model.config == preset
    small = VisionTransformer(TIMM_CONFIG).state_dict()
    with pytest.raises(ValueError, match=r"no place for: \['fc_norm\.bias', 'fc_norm\.weight'\]"):
        extra = {"fc_norm.weight": torch.ones(48), "fc_norm.bias": torch.zeros(48)}
        from_timm_state_dict({**small, **extra}, TIMM_CONFIG)
    with pytest.raises(ValueError, match=r"lacks 1 parameter.*\['head\.bias'\]"):
        from_timm_state_dict({k: v for k, v in small.items() if k != "head.bias"}, TIMM_CONFIG)
    with pytest.raises(ValueError, match=r"head\.weight: \(7, 48\), expected \(1000, 48\)"):
        from_timm_state_dict(small, TIMM_CONFIG, num_classes=1000)
    with pytest.raises(TypeError, match="config must be a ViTConfig or a preset name"):
        from_timm_state_dict(small, {"embed_dim": 48})


def test_to_hf_state_dict_refuses_models_hugging_face_cannot_express():
    mean_pooled = VisionTransformer(dataclasses.replace(TIMM_CONFIG, pool="mean"))
    with pytest.raises(ValueError, match="pool='mean'"):
        to_hf_state_dict(mean_pooled)
    conv_stem = VisionTransformer(dataclasses.replace(TIMM_CONFIG, stem="conv"))
    with pytest.raises(ValueError, match="a patch embedding; .*stem='conv'"):
        to_hf_state_dict(conv_stem)
    with pytest.raises(TypeError, match="must be a vitbook VisionTransformer"):
        to_hf_state_dict(torch.nn.Linear(2, 2))


# --- DeiT: the distillation token and two heads ----------------------------------------------


def hf_deit(*, model: str = "teacher", seed: int = 0, **sizes):
    """A small random Hugging Face DeiT, all sizes different, every parameter perturbed."""
    torch.manual_seed(seed)
    fields = {
        "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 3,
        "intermediate_size": 96, "image_size": (32, 48), "patch_size": 8, "num_labels": 7,
        "attn_implementation": "eager", **sizes,
    }  # fmt: skip
    config = transformers.DeiTConfig(**fields)
    classes = {
        "teacher": transformers.DeiTForImageClassificationWithTeacher,
        "single": transformers.DeiTForImageClassification,
    }
    hf_model = (
        transformers.DeiTModel(config, add_pooling_layer=False)
        if model == "features" else classes[model](config)
    )  # fmt: skip
    perturb_(hf_model, 0.1)
    return hf_model.eval(), config


def test_hf_deit_with_teacher_converts_with_the_same_logits_heads_and_attention():
    hf_model, hf_config = hf_deit()
    model = from_hf_state_dict(hf_model.state_dict(), hf_config)
    assert model.config.distilled and model.config.num_prefix_tokens == 2
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        expected = hf_model(pixel_values=images, output_attentions=True)
        logits, weights = model.forward_with_attention(images)
        cls_logits, dist_logits = model.forward_heads(model.forward_features(images))
    assert expected.logits.abs().max() > 0.5
    torch.testing.assert_close(logits, expected.logits, **PARITY)  # eval: the heads' mean
    torch.testing.assert_close(cls_logits, expected.cls_logits, **PARITY)
    torch.testing.assert_close(dist_logits, expected.distillation_logits, **PARITY)
    assert not torch.allclose(cls_logits, dist_logits, atol=1e-3)  # two different heads
    for ours, theirs in zip(weights, expected.attentions, strict=True):
        assert ours.shape == theirs.shape == (2, 3, 2 + 24, 2 + 24)
        torch.testing.assert_close(ours, theirs, **PARITY)
    sdpa = from_hf_state_dict(hf_model.state_dict(), hf_config, attn_impl="sdpa")
    with torch.no_grad():
        torch.testing.assert_close(sdpa(images), expected.logits, **FUSED)


def test_hf_deit_round_trips_through_the_hub_file_names(tmp_path):
    hf_model, hf_config = hf_deit()
    hf_model.save_pretrained(tmp_path)
    on_disk = load_file(str(tmp_path / "model.safetensors"))
    assert "deit.embeddings.distillation_token" in on_disk
    model = from_hf_state_dict(on_disk, hf_config.to_dict())
    back = to_hf_state_dict(model)
    assert back.keys() == on_disk.keys()
    for name, tensor in on_disk.items():
        torch.testing.assert_close(back[name], tensor, rtol=0, atol=0, msg=name)
    in_memory = from_hf_state_dict(hf_model.state_dict(), hf_config)
    for (name, x), (_, y) in zip(model.state_dict().items(), in_memory.state_dict().items(),
                                 strict=True):  # fmt: skip
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


def test_hf_deit_model_without_heads_gives_the_features():
    hf_model, hf_config = hf_deit(model="features")
    model = from_hf_state_dict(hf_model.state_dict(), hf_config)
    assert model.config.num_classes == 0 and model.config.distilled
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        expected = hf_model(pixel_values=images).last_hidden_state  # (B, 2 + N, D)
        torch.testing.assert_close(model.forward_features(images), expected, **PARITY)


def test_hf_deit_with_one_classifier_is_refused_by_name():
    hf_model, hf_config = hf_deit(model="single")
    with pytest.raises(ValueError, match=r"classifier\.bias \(the single head of "
                                         r"DeiTForImageClassification.*WithTeacher"):  # fmt: skip
        from_hf_state_dict(hf_model.state_dict(), hf_config)
    deit_names, _ = hf_deit()
    vit_config = {**hf_config.to_dict(), "model_type": "vit"}
    with pytest.raises(ValueError, match=r"deit\.embeddings\.cls_token \(a DeiT's name"):
        from_hf_state_dict(deit_names.state_dict(), vit_config)


@pytest.mark.parametrize(
    ("name", "width", "heads"),
    [("ViT-Ti/16", 192, 3), ("ViT-S/16", 384, 6), ("ViT-B/16", 768, 12)],
)
def test_deit_distilled_counts_agree_with_transformers(name, width, heads):
    hf_config = transformers.DeiTConfig(hidden_size=width, num_attention_heads=heads,
                                        intermediate_size=4 * width, num_labels=1000)
    with torch.device("meta"):
        hf_model = transformers.DeiTForImageClassificationWithTeacher(hf_config)
    config = config_from_hf(hf_config, num_classes=1000)
    assert config == ViTConfig.from_name(name, distilled=True, norm_eps=1e-12)
    assert sum(p.numel() for p in hf_model.parameters()) == config.num_parameters()
