"""vitbook.ladder: the shipped recording and its summary, the next ladder's rows, a read-out."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.analysis import attention_rollout, mean_attention_distance
from vitbook.cifar import Normalize
from vitbook.ladder import (
    BASE,
    H100_SECONDS_PER_EPOCH,
    PLAN,
    RECORDED_ROWS,
    RESULTS_PATH,
    ROWS,
    changes,
    describe,
    group_provenance,
    load_results,
    projected_minutes,
    readout,
    summarize,
)
from vitbook.records import ResultsFileError

# The shared recording (H100, JPEG copy of CIFAR-10, commit f5734a8), copied byte for byte.
SHIPPED_SHA256 = "1d911bf86112bd67f41e607ffeebeafd911a0c0fa31c163669a1dfc24586ddeb"
# row: (seeds, test mean, test sd, validation mean, validation sd), as recorded (4 decimals).
RECORDED = {
    "vit-crop-flip": (3, 0.7826, 0.0024, 0.7771, 0.0027),
    "vit-randaugment": (3, 0.7839, 0.0033, 0.7791, 0.0037),
    "vit-regularised-100": (1, 0.8315, None, 0.8240, None),
    "vit-mix-200": (3, 0.8737, 0.0047, 0.8712, 0.0067),
    "resnet18": (3, 0.8929, 0.0025, 0.8961, 0.0030),
}


def runs(row, accuracies):
    return [
        {"row": row, "seed": seed, "final_val_accuracy": val, "test_accuracy": test,
         "minutes": 1.0 + seed, "epochs": 3, "recipe": {}}
        for seed, (val, test) in enumerate(accuracies)
    ]  # fmt: skip


def test_the_shipped_recording_is_the_one_the_gpu_wrote():
    assert hashlib.sha256(RESULTS_PATH.read_bytes()).hexdigest() == SHIPPED_SHA256
    results = load_results()
    table = summarize(results)
    assert list(table) == list(RECORDED)
    for row, (n, test, test_sd, val, val_sd) in RECORDED.items():
        got = table[row]
        assert got["n"] == n
        assert round(got["test_mean"], 4) == test and round(got["val_mean"], 4) == val
        if n == 1:
            assert got["test_std"] is None and got["val_std"] is None
        else:
            assert round(got["test_std"], 4) == test_sd and round(got["val_std"], 4) == val_sd
    assert describe(table["vit-regularised-100"]) == "0.8315 (one seed)"
    assert describe(table["vit-mix-200"]) == "0.8737 ± 0.0047"


def test_the_recording_names_its_gpu_data_and_the_model_looked_inside():
    results = load_results()
    (group,) = group_provenance(results)  # 13 processes, identical but for command and seeds
    assert group["entries"] == len(results["runs"]) == 13 and group["seeds"] == [0, 1, 2]
    assert group["device"] == "NVIDIA H100 80GB HBM3" and group["git_commit"][:7] == "f5734a8"
    assert group["data"]["note"] == "CIFAR-10, JPEG copy, quality 75"
    assert (group["data"]["train"], group["data"]["val"], group["data"]["test"]) == (
        45_000, 5_000, 10_000)  # fmt: skip
    inside = [(run["row"], run["seed"]) for run in results["runs"] if "inside" in run]
    assert inside == [("vit-mix-200", 0)]
    (run,) = [run for run in results["runs"] if "inside" in run]
    assert torch.tensor(run["inside"]["rollout_maps"]).shape == (8, 8, 8)
    assert torch.tensor(run["inside"]["mean_attention_distance"]).shape == (6, 8)
    for run in results["runs"]:  # the recorded recipes are the ones the script reproduces
        expected = {**BASE, **RECORDED_ROWS[run["row"]]}
        if expected.get("mix"):
            expected.pop("label_smoothing")
        assert run["recipe"] == {k: v for k, v in expected.items() if k != "epochs"}
        assert run["epochs"] == RECORDED_ROWS[run["row"]]["epochs"]


def test_summarize_gives_mean_spread_and_range_per_row_in_order():
    results = {"runs": runs("b", [(0.5, 0.4), (0.7, 0.6), (0.6, 0.5)]) + runs("a", [(0.9, 0.8)])}
    table = summarize(results)
    assert list(table) == ["b", "a"]
    assert table["b"]["n"] == 3 and table["b"]["test_mean"] == pytest.approx(0.5)
    assert table["b"]["test_std"] == pytest.approx(0.1)
    assert (table["b"]["test_min"], table["b"]["test_max"]) == (0.4, 0.6)
    assert table["b"]["wall_clock_minutes"] == pytest.approx(2.0)
    assert table["a"]["test_std"] is None  # one seed has no spread, not a spread of 0
    newer = [{**run, "wall_clock_minutes": run.pop("minutes")} for run in runs("c", [(1, 1)])]
    assert summarize({"runs": newer})["c"]["wall_clock_minutes"] == 1.0


def test_load_results_names_a_damaged_file_and_refuses_a_run_twice(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"scripts/train_cifar10.py --data"):
        load_results(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"runs": [], "provenance": []}))
    with pytest.raises(ResultsFileError, match=r"empty\.json holds no runs or no provenance"):
        load_results(empty)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"runs": runs("a", [(0.9, 0.8)]) * 2, "provenance": [{}]}))
    with pytest.raises(ValueError, match=r"row 'a' seed 0 twice"):
        load_results(twice)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"runs": runs("a", [(0.9, 0.8)]), "provenance": [{"gpu": "x"}]}))
    assert load_results(good)["provenance"] == [{"gpu": "x"}]


def test_every_row_of_the_next_ladder_changes_one_thing():
    names = list(ROWS)
    first = ROWS[names[0]]  # the recorded vit-crop-flip, longer
    recorded = {**BASE, **RECORDED_ROWS["vit-crop-flip"]}
    assert {k: v for k, v in first.items() if k in recorded and recorded[k] != v} == {"epochs": 50}
    assert not any(first[k] for k in ("rand_augment", "mix", "random_erasing", "drop_path_rate"))
    for above, row in zip(names, names[1:], strict=False):
        changed = changes(row, above)
        if ROWS[row]["model"] == "resnet18":  # the CNN: the last ViT row's budget and augment
            assert set(changed) == {"model", "drop_path_rate"}  # its ResNet has no drop path
        else:
            assert len(changed) == 1, (row, changed)
    pairs = list(zip(names, names[1:], strict=False))
    lengths = [row for above, row in pairs if "epochs" in changes(row, above)]
    assert lengths == ["vit-200"]  # training length is a row of its own
    assert ROWS["vit-50-randaugment-m9"]["rand_augment"]["scale"] == "timm"
    with pytest.raises(ValueError, match="not a row of the ladder"):
        changes("vit-300", "vit-200")


def test_the_next_ladder_fits_ninety_h100_minutes_from_measured_epochs():
    assert set(PLAN) == set(ROWS) and all(len(set(s)) == len(s) > 0 for s in PLAN.values())
    assert max(H100_SECONDS_PER_EPOCH["vit-mix-200, all of it"]) == 3.6
    total = sum(projected_minutes(row) or 0 for row in ROWS)
    expected = sum(ROWS[r]["epochs"] * len(PLAN[r]) for r in ROWS if ROWS[r]["model"] == "vit")
    assert total == pytest.approx(expected * 3.6 / 60) and total <= 90
    assert projected_minutes("resnet18-200") is None  # never timed alone on an H100


def test_provenance_groups_keep_what_differs():
    entries = [{"device": "a", "command": "x", "seeds": [0], "date": "1"},
               {"device": "a", "command": "y", "seeds": [1], "date": "2"},
               {"device": "b", "command": "z", "seeds": [0], "date": "3"}]  # fmt: skip
    groups = group_provenance({"provenance": entries})
    assert [(g["device"], g["entries"], g["seeds"]) for g in groups] == [
        ("a", 2, [0, 1]), ("b", 1, [0])]  # fmt: skip
    assert groups[0]["dates"] == ("1", "2") and groups[0]["commands"] == ["x", "y"]


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
