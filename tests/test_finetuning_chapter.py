"""The recipe of the chapter "Fine-tuning a pretrained ViT", called directly on a Hub checkpoint.

A small random ViT with ViT-B/16's input (224 px, 16 px patches, the checkpoint's normalisation),
placed in a Hugging Face cache under ``google/vit-base-patch16-224`` (``hubtools.small_vit_home``),
is loaded with a new ten-class head as the chapter loads ViT-B/16, and trained with the authors'
recipe as the chapter's real run trains it: batches built from micro-batches, a warm-up in steps,
the inception crop and a flip, fp16 (a T4's precision; autocast runs on the CPU). The chapter's
branches themselves run in tests/test_branches.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hubtools import small_vit_home  # noqa: F401  (a fixture)

from vitbook.data.augment import random_resized_crop
from vitbook.data.cifar import CIFAR10_CLASSES, cifar10_standin
from vitbook.pretrained import DEFAULT_CHECKPOINT, load_pretrained
from vitbook.pretrained.transfer import FINETUNE_RECIPE, freeze_body, with_preprocessing
from vitbook.train import fit

pytest.importorskip("transformers")


def test_the_recipe_trains_the_checkpoint_behind_its_own_preprocessing(small_vit_home):  # noqa: F811
    bundle = load_pretrained(DEFAULT_CHECKPOINT, cache_dir=small_vit_home / "hub",
                             local_files_only=True, num_classes=10, class_names=CIFAR10_CLASSES,
                             attn_impl="sdpa")  # fmt: skip
    head = bundle.model.head
    assert not head.weight.any() and not head.bias.any(), "a zero head, as the paper's"
    assert bundle.mean == bundle.std == (0.5, 0.5, 0.5)  # the checkpoint's, not ImageNet's
    photos = cifar10_standin(n_train=12, n_val=3, n_test=3).train  # (12, 3, 32, 32), 3 labels
    classifier = with_preprocessing(bundle)
    with torch.no_grad():
        start = F.cross_entropy(classifier(photos[0]), photos[1]).item()
    assert math.isclose(start, math.log(10), rel_tol=1e-6), "ln 10 before the first step"
    frozen = freeze_body(bundle.model)
    assert frozen.trainable_numbers == 32 * 10 + 10
    seen = []
    classifier.model.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach()))
    crop = random_resized_crop(scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3), flip=True)
    history = fit(classifier, photos, epochs=2, batch_size=6, accumulate=3, warmup_steps=1,
                  augment=crop, lr=0.1, precision="fp16", progress=False,
                  **FINETUNE_RECIPE)  # fmt: skip
    assert history.epochs == 2 and history.precision == "fp16"
    assert history.train_loss[-1] < history.train_loss[0]
    assert len(seen) == 2 * 2 * 3, "2 epochs of 2 steps of 3 micro-batches"
    for inputs in seen:  # what the ViT received: 2 photos, resized and normalised inside
        assert inputs.shape == (2, 3, 224, 224)
        assert inputs.min() >= -1.0 - 1e-3 and inputs.max() <= 1.0 + 1e-3  # (x - 0.5) / 0.5
    changed = [name for name, p in bundle.model.named_parameters() if p.requires_grad]
    assert changed == ["head.weight", "head.bias"] and head.weight.any()
