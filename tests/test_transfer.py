"""vitbook.pretrained.transfer: a new zero-initialised head, a frozen body, a higher resolution, and
the checkpoint's own preprocessing, without a network."""

import math

import pytest
import torch
import torch.nn.functional as F
from hubtools import VIT_PREPROCESSOR, add_snapshot, perturb_

from vitbook import VisionTransformer, ViTConfig, resample_pos_embed, sincos_2d
from vitbook.pretrained import PretrainedViT, load_digits_pretrained, load_pretrained
from vitbook.pretrained.transfer import (
    FINETUNE_RECIPE,
    Frozen,
    Preprocess,
    Preprocessed,
    change_resolution,
    freeze_body,
    with_preprocessing,
)
from vitbook.train import fit

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def small_vit(**changes) -> VisionTransformer:
    """A ViT with all sizes different (C=3, H=12, W=8, P=4 -> Gh=3, Gw=2, D=12, 7 classes)."""
    torch.manual_seed(0)
    config = {"img_size": (12, 8), "patch_size": 4, "in_chans": 3, "num_classes": 7,
              "embed_dim": 12, "depth": 2, "num_heads": 3, "mlp_ratio": 2.0}  # fmt: skip
    return VisionTransformer(ViTConfig(**{**config, **changes}))


def hub_checkpoint(tmp_path, *, preprocessor=None):
    """A random 32 px Hugging Face ViT in a hand-made Hub cache as 'someone/tiny-vit'."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, id2label={k: f"thing {k}" for k in range(4)},
    )  # fmt: skip
    model = transformers.ViTForImageClassification(config).eval()
    perturb_(model, 0.1)
    model.save_pretrained(tmp_path / "saved")
    add_snapshot(tmp_path / "hub", "someone/tiny-vit", tmp_path / "saved",
                 preprocessor=preprocessor or VIT_PREPROCESSOR)  # fmt: skip
    return model


def load(tmp_path, **options) -> PretrainedViT:
    return load_pretrained("someone/tiny-vit", cache_dir=tmp_path / "hub",
                           local_files_only=True, **options)  # fmt: skip


# --- the head -------------------------------------------------------------------------------


def test_load_pretrained_with_num_classes_gives_a_zero_head_and_keeps_the_body(tmp_path):
    hub_checkpoint(tmp_path)
    original = load(tmp_path)
    bundle = load(tmp_path, num_classes=10)
    model = bundle.model
    assert model.config.num_classes == 10 and original.model.config.num_classes == 4
    assert model.head.weight.shape == (10, 32) and model.head.bias.shape == (10,)
    assert not model.head.weight.any() and not model.head.bias.any()
    assert bundle.class_names == tuple(f"class {k}" for k in range(10))
    body = {k: v for k, v in original.model.state_dict().items() if not k.startswith("head.")}
    new = model.state_dict()
    assert set(new) - set(body) == {"head.weight", "head.bias"}
    assert all(torch.equal(new[k], v) for k, v in body.items())  # the body is the checkpoint's
    images = torch.rand(5, 3, 32, 32)
    with torch.no_grad():
        logits = model(bundle.preprocess(images))  # (5, 10), all zero: uniform predictions
        features = original.model.forward_features(original.preprocess(images))
    assert torch.equal(logits, torch.zeros(5, 10))
    loss = F.cross_entropy(logits, torch.arange(5))
    assert math.isclose(loss.item(), math.log(10), rel_tol=1e-6)  # ln K at the first step
    assert features.abs().sum() > 0  # what the zero head reads is not zero
    named = load(tmp_path, num_classes=3, class_names=("plane", "car", "bird"))
    assert named.class_names == ("plane", "car", "bird")


def test_load_pretrained_head_arguments_are_checked(tmp_path):
    hub_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="pass num_classes too, e.g. num_classes=2"):
        load(tmp_path, class_names=("a", "b"))
    with pytest.raises(ValueError, match="class_names has 2 entries for num_classes=3"):
        load(tmp_path, num_classes=3, class_names=("a", "b"))
    with pytest.raises(ValueError, match="num_classes=0"):
        load(tmp_path, num_classes=0)


# --- freezing: a linear probe ---------------------------------------------------------------


def test_freeze_body_leaves_only_the_head_trainable_and_says_what_it_froze():
    model = small_vit()
    model.reset_classifier(5)
    frozen = freeze_body(model)
    assert isinstance(frozen, Frozen)
    assert frozen.trainable == ("head.weight", "head.bias")
    names = [name for name, _ in model.named_parameters()]
    assert frozen.frozen == tuple(n for n in names if not n.startswith("head."))
    assert frozen.trainable_numbers == 12 * 5 + 5
    total = sum(p.numel() for p in model.parameters())
    assert frozen.frozen_numbers + frozen.trainable_numbers == total
    assert [n for n, p in model.named_parameters() if p.requires_grad] == list(frozen.trainable)
    text = str(frozen)
    assert text.splitlines() == [
        f"frozen: {len(frozen.frozen)} tensors, {frozen.frozen_numbers:,} numbers",
        "  (cls_token, pos_embed, patch_embed, blocks, norm)",  # the model's order
        "trainable: head.weight, head.bias, 65 numbers",
        f"  ({65 / total:.2%} of the model)",
    ]


def test_freeze_body_of_a_distilled_model_leaves_both_heads_trainable():
    from vitbook import VisionTransformer, ViTConfig

    model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=1,
                                        num_heads=2, num_classes=3, distilled=True))  # fmt: skip
    frozen = freeze_body(model)
    assert frozen.trainable == ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias")
    assert "dist_token" in frozen.frozen and frozen.trainable_numbers == 2 * (8 * 3 + 3)


def test_under_a_linear_probe_only_the_heads_parameters_change():
    model = small_vit()
    model.reset_classifier(4)
    freeze_body(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    torch.manual_seed(1)
    images, labels = torch.rand(8, 3, 12, 8), torch.arange(8) % 4
    history = fit(model, (images, labels), epochs=20, lr=1.0, batch_size=8, warmup_epochs=0,
                  progress=False, **FINETUNE_RECIPE)  # fmt: skip
    assert history.train_loss[0] == pytest.approx(math.log(4), rel=1e-6)  # one step: zero head
    assert history.train_loss[-1] < 0.95 * history.train_loss[0]
    for name, parameter in model.named_parameters():
        if name.startswith("head."):
            assert not torch.equal(parameter, before[name]), name
        else:
            assert torch.equal(parameter, before[name]), f"{name} changed under a linear probe"
            assert parameter.grad is None, f"the gradient reached {name}"


def test_full_fine_tuning_changes_the_body_too():
    model = small_vit()
    model.reset_classifier(4)
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    images, labels = torch.rand(24, 3, 12, 8), torch.arange(24) % 4
    fit(model, (images, labels), epochs=2, lr=0.05, batch_size=8, warmup_epochs=0,
        progress=False, **FINETUNE_RECIPE)  # fmt: skip
    assert not torch.equal(model.blocks[0].attn.qkv.weight, before)


def test_freeze_body_errors():
    with pytest.raises(TypeError, match="pass its .model"):
        freeze_body(torch.nn.Linear(2, 2))
    headless = small_vit(num_classes=0)
    with pytest.raises(ValueError, match=r"num_classes=0.*reset_classifier\(K\)"):
        freeze_body(headless)


def test_finetune_recipe_is_the_papers():
    assert FINETUNE_RECIPE == {"optimizer": "sgd", "weight_decay": 0.0, "clip_grad_norm": 1.0}


# --- a higher resolution --------------------------------------------------------------------


def test_change_resolution_interpolates_positions_and_copies_every_other_weight():
    model = small_vit().eval()
    bigger = change_resolution(model, (20, 12))  # grid (3, 2) -> (5, 3)
    assert bigger.config.img_size == (20, 12) and bigger.config.grid_size == (5, 3)
    assert model.config.img_size == (12, 8) and model.pos_embed.shape == (1, 7, 12)
    assert bigger.pos_embed.shape == (1, 1 + 15, 12)
    expected = resample_pos_embed(model.pos_embed, (5, 3), old_grid_size=(3, 2))
    assert torch.equal(bigger.pos_embed, expected)
    assert torch.equal(bigger.pos_embed[:, 0], model.pos_embed[:, 0])  # the class token's row
    old, new = model.state_dict(), bigger.state_dict()
    assert set(old) == set(new)
    assert all(torch.equal(old[k], new[k]) for k in old if k != "pos_embed")
    assert not bigger.training
    with torch.no_grad():
        assert bigger(torch.rand(2, 3, 20, 12)).shape == (2, 7)
    same = change_resolution(model, (12, 8))
    images = torch.rand(2, 3, 12, 8)
    with torch.no_grad():
        assert torch.equal(same(images), model(images))


def test_change_resolution_keeps_each_parameter_frozen_or_trainable():
    model = small_vit()
    model.requires_grad_(False)
    model.head.requires_grad_(True)  # a linear probe
    model.pos_embed.requires_grad_(True)
    bigger = change_resolution(model, (20, 12))
    trainable = {name for name, p in bigger.named_parameters() if p.requires_grad}
    assert trainable == {"head.weight", "head.bias", "pos_embed"}
    assert all(p.requires_grad for p in change_resolution(small_vit(), 16).parameters())


def test_change_resolution_of_fixed_positions_makes_the_new_table():
    model = small_vit(pos_embed="sincos2d")
    bigger = change_resolution(model, 16)
    table = sincos_2d((4, 4), 12)  # (Gh * Gw, D), the class token's row is zero
    assert torch.equal(bigger.pos_embed[0, 1:], table)
    with pytest.raises(ValueError, match="relative position bias"):
        change_resolution(small_vit(pos_embed="relative"), 16)
    with pytest.raises(ValueError, match="img_size height=18 is not a multiple of patch_size"):
        change_resolution(model, (18, 8))
    with pytest.raises(TypeError, match="VisionTransformer"):
        change_resolution(torch.nn.Linear(2, 2), 16)


def test_fine_tuning_at_a_higher_resolution_with_resampled_positions():
    """The paper's Section 3.2 in miniature: digits upsampled inside the model from 8 to 12 px,
    the patch size kept, more tokens, the interpolated position embeddings trained with
    everything else, starting from the miniature's model pre-trained on the digits 0 to 4."""
    from vitbook.studies.transfer_digits import load_pretrained_digits, load_transfer_data

    model = load_pretrained_digits()  # 8 px, P = 2, learned positions
    bigger = change_resolution(model, 12)  # 4 x 4 -> 6 x 6 patches, 37 tokens
    assert bigger.config.num_tokens == 37 and model.config.num_tokens == 17
    bigger.reset_classifier(5)
    finetuned = Preprocessed(Preprocess(12, (0.0,), (1.0,)), bigger)
    images, labels = (part[:40] for part in load_transfer_data().pool)  # digits 5 to 9
    start = bigger.pos_embed.detach().clone()
    with torch.no_grad():
        first = F.cross_entropy(finetuned(images), labels).item()
    assert first == pytest.approx(math.log(5), rel=1e-6)  # the zero head: uniform predictions
    history = fit(finetuned, (images, labels), epochs=10, lr=0.1, batch_size=20,
                  warmup_epochs=1, progress=False, **FINETUNE_RECIPE)  # fmt: skip
    assert history.train_loss[-1] < 0.5 * first
    assert not torch.equal(bigger.pos_embed, start)  # the resampled table is fine-tuned
    with torch.no_grad():
        assert finetuned(images).shape == (40, 5)


# --- the checkpoint's preprocessing ---------------------------------------------------------


def test_with_preprocessing_normalises_with_the_checkpoints_mean_and_std(tmp_path):
    hub_checkpoint(tmp_path)  # preprocessor_config.json of google/vit-base-patch16-224
    bundle = load(tmp_path, num_classes=10)
    assert bundle.mean == bundle.std == (0.5, 0.5, 0.5)  # not ImageNet's statistics
    classifier = with_preprocessing(bundle)
    assert classifier.model is bundle.model and classifier.config.num_classes == 10
    assert classifier.preprocess.mean.flatten().tolist() == [0.5] * 3
    assert classifier.preprocess.std.flatten().tolist() == [0.5] * 3
    photos = torch.rand(3, 3, 16, 16)  # smaller than the model's 32 px, as CIFAR for 224 px
    inputs = classifier.preprocess(photos)
    assert inputs.shape == (3, 3, 32, 32)
    assert torch.equal(inputs, bundle.preprocess(photos))
    white = classifier.preprocess(torch.ones(1, 3, 16, 16))
    assert torch.allclose(white, torch.ones_like(white))  # (1 - 0.5) / 0.5
    imagenet = Preprocess(32, IMAGENET_MEAN, IMAGENET_STD)(torch.ones(1, 3, 16, 16))
    assert (imagenet - white).abs().max() > 1  # another model's statistics: other inputs
    with torch.no_grad():
        assert torch.equal(classifier(photos), bundle.model(bundle.preprocess(photos)))


def test_with_preprocessing_follows_another_checkpoints_statistics(tmp_path):
    preprocessor = {**VIT_PREPROCESSOR, "image_mean": list(IMAGENET_MEAN),
                    "image_std": list(IMAGENET_STD)}  # fmt: skip
    hub_checkpoint(tmp_path, preprocessor=preprocessor)
    classifier = with_preprocessing(load(tmp_path))
    assert classifier.preprocess.mean.flatten().tolist() == pytest.approx(IMAGENET_MEAN)
    assert classifier.preprocess.std.flatten().tolist() == pytest.approx(IMAGENET_STD)


def test_preprocess_resizes_only_when_needed_and_checks_its_statistics():
    preprocess = Preprocess((6, 4), (0.25,), (2.0,))
    images = torch.rand(2, 1, 6, 4)
    assert torch.equal(preprocess(images), (images - 0.25) / 2.0)
    assert preprocess(torch.rand(2, 1, 3, 2)).shape == (2, 1, 6, 4)
    assert "size=(6, 4), mean=[0.25], std=[2.0]" in repr(preprocess)
    assert not dict(preprocess.state_dict())  # buffers are not saved with the weights
    eight_bit = torch.randint(0, 256, (2, 1, 3, 2), dtype=torch.uint8)  # and of another size
    with pytest.raises(TypeError, match=r"float images in \[0, 1\], got torch.uint8"):
        preprocess(eight_bit)  # said before the resize, not from inside torch
    with pytest.raises(ValueError, match=r"takes \(B, 1, H, W\) images, got shape \(2, 3, 3, 2\)"):
        preprocess(torch.rand(2, 3, 3, 2))
    with pytest.raises(ValueError, match="mean has 3 values and std 1"):
        Preprocess(4, (0.5,) * 3, (0.5,))
    with pytest.raises(ValueError, match="std"):
        Preprocess(4, (0.5,), (0.0,))
    with pytest.raises(TypeError, match="Preprocessed takes a Preprocess and a VisionTransformer"):
        Preprocessed(preprocess, torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="PretrainedViT"):
        with_preprocessing(small_vit())


def test_digits_bundle_through_with_preprocessing_is_the_bundles_own_path():
    bundle = load_digits_pretrained()
    classifier = with_preprocessing(bundle)
    images = torch.rand(4, 1, 16, 16)
    with torch.no_grad():
        assert torch.equal(classifier(images), bundle.model(bundle.preprocess(images)))
