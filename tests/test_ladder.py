"""vitbook.ladder: the recorded runs of the photo chapter, their summary, a model's read-out."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.analysis import attention_rollout, mean_attention_distance
from vitbook.cifar import Normalize
from vitbook.ladder import load_results, readout, summarize


def runs(row, accuracies):
    return [
        {"row": row, "seed": seed, "final_val_accuracy": val, "test_accuracy": test,
         "minutes": 1.0 + seed}
        for seed, (val, test) in enumerate(accuracies)
    ]  # fmt: skip


def test_summarize_gives_mean_spread_and_range_per_row_in_order():
    results = {"runs": runs("b", [(0.5, 0.4), (0.7, 0.6), (0.6, 0.5)]) + runs("a", [(0.9, 0.8)])}
    table = summarize(results)
    assert list(table) == ["b", "a"]
    assert table["b"]["n"] == 3 and table["b"]["test_mean"] == pytest.approx(0.5)
    assert table["b"]["test_std"] == pytest.approx(0.1)
    assert (table["b"]["test_min"], table["b"]["test_max"]) == (0.4, 0.6)
    assert table["b"]["minutes"] == pytest.approx(2.0)
    assert table["a"]["test_std"] == 0.0 and math.isfinite(table["a"]["val_mean"])


def test_load_results_says_how_to_record_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"scripts/train_cifar10.py --download"):
        load_results(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"runs": [], "provenance": []}))
    with pytest.raises(ValueError, match="no runs or no provenance"):
        load_results(empty)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"runs": runs("a", [(0.9, 0.8)]), "provenance": [{"gpu": "x"}]}))
    assert load_results(good)["provenance"] == [{"gpu": "x"}]


def test_readout_is_rollout_and_distance_of_the_normalised_photos():
    torch.manual_seed(0)
    vit = VisionTransformer(ViTConfig(img_size=(8, 12), patch_size=4, embed_dim=8, depth=3,
                                      num_heads=2, num_classes=3))  # fmt: skip
    normalize = Normalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    photos = torch.rand(5, 3, 8, 12)
    out = readout(nn.Sequential(normalize, vit), photos, maps=2)
    _, attentions = vit.forward_with_attention(normalize(photos))
    expected_rollout = attention_rollout([a[:2] for a in attentions])[:, 0, 1:].reshape(2, 2, 3)
    torch.testing.assert_close(out["rollout_maps"], expected_rollout)
    expected_distance = torch.stack([mean_attention_distance(a, (2, 3), 4) for a in attentions])
    torch.testing.assert_close(out["mean_attention_distance"], expected_distance)
