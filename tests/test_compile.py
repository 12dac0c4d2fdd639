"""The model on a GPU's terms: no graph breaks, mixed precision, stochastic depth, a new head.

A forward pass that reads a tensor's value into Python (a NaN check, say) makes a GPU wait for the
host on every call and breaks a ``torch.compile`` graph; ``torch._dynamo.explain`` counts the
breaks without a GPU. The presets are traced on the meta device, so nothing is allocated, with
two of their blocks.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from vitbook import PRESETS, EncoderBlock, VisionTransformer, ViTConfig
from vitbook.encoder import DropPath

# The book's small configurations: every position scheme, readout and attention path.
SMALL = [
    ViTConfig(
        img_size=(8, 12), patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=2,
        num_heads=4, pos_embed=pos, pool=pool, class_token=pool == "cls", attn_impl=impl,
        drop_rate=0.1, drop_path_rate=0.1,
    )
    for (pos, impl), pool in zip(
        itertools.product(("learned", "sincos2d", "none", "relative"), ("explicit", "sdpa")),
        itertools.cycle(("cls", "mean")),
    )
] + [  # DeiT's distillation token and the convolutional stem, alone and together
    ViTConfig(
        img_size=(8, 12), patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=2,
        num_heads=4, pos_embed=pos, attn_impl=impl, distilled=distilled, stem=stem,
        drop_rate=0.1, drop_path_rate=0.1,
    )
    for pos, impl, distilled, stem in (
        ("learned", "sdpa", True, "patch"),
        ("relative", "explicit", True, "patch"),
        ("sincos2d", "sdpa", False, "conv"),
        ("learned", "explicit", True, "conv"),
    )
]  # fmt: skip
# The photo model of "Real photos" (3.2M parameters).
CIFAR = ViTConfig(img_size=32, patch_size=4, num_classes=10, embed_dim=256, depth=6,
                  num_heads=8, mlp_ratio=2.0, attn_impl="sdpa", drop_path_rate=0.1)  # fmt: skip


def label(config: ViTConfig) -> str:
    return f"{config.pos_embed}-{config.pool}-{config.attn_impl}"


def graph_breaks(model: torch.nn.Module, images: torch.Tensor) -> tuple[int, list]:
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(images)
    torch._dynamo.reset()
    return explanation.graph_break_count, explanation.break_reasons


@pytest.mark.parametrize("config", [*SMALL, CIFAR], ids=[*map(label, SMALL), "cifar"])
def test_small_configurations_compile_into_one_graph(config):
    model = VisionTransformer(config).train()  # dropout and stochastic depth on
    images = torch.randn(3, config.in_chans, *config.img_size)
    count, reasons = graph_breaks(model, images)
    assert count == 0, reasons


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_compile_into_one_graph(name):
    # Every preset's widths, heads, patch size and classes, with two of its blocks: dynamo unrolls
    # the loop over the blocks and traces the same code for each, so a break would show in the
    # first; the second traces the hand-over from block to block. Tracing all 32 of ViT-H/14's
    # blocks took 80 s and checked nothing more.
    with torch.device("meta"):
        config = ViTConfig.from_name(name, attn_impl="sdpa")
        model = VisionTransformer(dataclasses.replace(config, depth=2))
        images = torch.randn(2, 3, 224, 224)
    count, reasons = graph_breaks(model, images)
    assert count == 0, reasons


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", SMALL, ids=list(map(label, SMALL)))
def test_every_configuration_runs_under_autocast(config, dtype):
    """Activations in low precision and weights in fp32 is what autocast means, not an error."""
    model = VisionTransformer(config).eval()
    images = torch.randn(2, config.in_chans, *config.img_size)
    with torch.autocast("cpu", dtype=dtype):
        logits = model(images)
        explicit_logits, weights = model.forward_with_attention(images)
    reference = model(images)
    assert logits.dtype == dtype and len(weights) == config.depth
    # Low precision: about 3 significant digits for bf16, so compare loosely.
    torch.testing.assert_close(logits.float(), reference, atol=0.05, rtol=0.05)
    torch.testing.assert_close(explicit_logits.float(), reference, atol=0.05, rtol=0.05)


def test_outside_autocast_a_dtype_mismatch_is_still_refused():
    model = VisionTransformer(SMALL[0])
    with pytest.raises(TypeError, match="images has dtype torch.bfloat16 but the model"):
        model(torch.randn(2, 1, 8, 12, dtype=torch.bfloat16))


def test_drop_path_drops_whole_samples_and_keeps_the_mean():
    drop = DropPath(0.25).train()
    torch.manual_seed(0)
    out = drop(torch.ones(4000, 3, 2))
    per_sample = out.flatten(1)
    assert ((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1)).all()
    assert (per_sample[:, 0] == 0).float().mean().item() == pytest.approx(0.25, abs=0.03)
    assert out.mean().item() == pytest.approx(1.0, abs=0.05)
    drop.eval()
    x = torch.randn(5, 3)
    assert drop(x) is x
    with pytest.raises(ValueError, match="p=1.0 must be a finite number >= 0 and < 1"):
        DropPath(1.0)


def test_stochastic_depth_rises_linearly_and_leaves_the_state_dict_alone():
    config = ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=5, num_heads=2,
                       num_classes=3, drop_path_rate=0.2)  # fmt: skip
    model = VisionTransformer(config)
    rates = [block.drop_path1.p for block in model.blocks]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    plain = VisionTransformer(ViTConfig(**{**config.__dict__, "drop_path_rate": 0.0}))
    assert model.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(model.state_dict())
    images = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(plain.eval()(images), model.eval()(images))
    model.train()
    torch.manual_seed(1)
    assert not torch.allclose(model(images), plain(images))  # in training, branches drop
    assert EncoderBlock(8, 2).state_dict().keys() == EncoderBlock(8, 2, drop_path=0.3).state_dict(
    ).keys()  # fmt: skip


def test_reset_classifier_attaches_a_zero_head_of_the_new_size():
    config = ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=1, num_heads=2, num_classes=5)
    model = VisionTransformer(config).double()
    features = model.forward_features(torch.randn(2, 3, 8, 8, dtype=torch.float64))
    model.reset_classifier(7)
    assert model.config.num_classes == 7 and model.head.weight.shape == (7, 8)
    assert model.head.weight.dtype == torch.float64
    assert model.head.weight.abs().sum() == 0 and model.head.bias.abs().sum() == 0
    assert torch.equal(model.forward_head(features), torch.zeros(2, 7, dtype=torch.float64))
    model.reset_classifier(0)
    assert isinstance(model.head, torch.nn.Identity) and model.config.num_classes == 0
    with pytest.raises(ValueError, match="num_classes=-1 must be an int >= 0"):
        model.reset_classifier(-1)
