"""The checkpoint that the chapter "A pretrained ViT" loads online, read from a cache on disk.

A random Hugging Face ViT-B/16, written by ``save_pretrained`` and placed in a Hugging Face cache
under the name ``google/vit-base-patch16-224`` (``hubtools.vit_b16_home``), stands in for the
real checkpoint: same config, same files, same names, random weights. ``load_pretrained`` takes
the path that a reader with internet access takes after the download, and the model it builds
computes what the original computes. The chapter's online and offline branches run end to end in
tests/test_branches.py; the conversion itself is covered by tests/test_convert.py.
"""

from __future__ import annotations

import pytest
import torch
from hubtools import vit_b16_home  # noqa: F401  (a fixture)

from vitbook.data import sample_image
from vitbook.pretrained import DEFAULT_CHECKPOINT, load_pretrained

transformers = pytest.importorskip("transformers")

PARITY = {"rtol": 1e-5, "atol": 1e-5}  # float32, the same operations (see test_convert.py)


def test_vit_b16_from_the_cache_has_the_originals_logits_and_attention(vit_b16_home):  # noqa: F811
    cache = vit_b16_home / "hub"
    pretrained = load_pretrained(DEFAULT_CHECKPOINT, cache_dir=cache, local_files_only=True)
    assert pretrained.model.config.num_parameters() == 86_567_656
    assert pretrained.class_names[7] == "class 7, synonym of class 7"
    original = transformers.ViTForImageClassification.from_pretrained(
        DEFAULT_CHECKPOINT, cache_dir=cache, local_files_only=True, attn_implementation="eager"
    ).eval()
    inputs = pretrained.preprocess(sample_image("grace_hopper", size=224))  # (1, 3, 224, 224)
    with torch.no_grad():
        expected = original(pixel_values=inputs, output_attentions=True)
        logits, weights = pretrained.model.forward_with_attention(inputs)
    torch.testing.assert_close(logits, expected.logits, **PARITY)
    for ours, theirs in zip(weights, expected.attentions, strict=True):
        assert ours.shape == theirs.shape == (1, 12, 197, 197)
        torch.testing.assert_close(ours, theirs, **PARITY)
