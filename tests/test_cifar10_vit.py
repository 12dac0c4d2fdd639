"""The ViT trained on CIFAR-10 on a CPU: its recorded run, its int8 file, its accuracy here."""

from __future__ import annotations

import json

import pytest
import torch

from vitbook import VisionTransformer, ViTConfig
from vitbook.data import load_cifar10_sample
from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize
from vitbook.pretrained import CIFAR10_VIT_PATH, load_cifar10_vit, load_model, read_metadata
from vitbook.pretrained.checkpoints import dequantize_int8, quantize_int8, save_model
from vitbook.studies import cpu_photos


@pytest.fixture(scope="module")
def run():
    (only,) = cpu_photos.load_results()["runs"]
    return only


def test_the_recorded_run_is_the_plan_on_two_cores_above_the_floor(run):
    results = cpu_photos.load_results()
    assert (run["row"], run["seed"]) == (cpu_photos.ROW, 0)
    assert run["recipe"] == cpu_photos.planned_recipe(cpu_photos.ROW)
    epochs = cpu_photos.ROWS[cpu_photos.ROW]["epochs"]
    assert run["epochs"] == len(run["val_accuracy"]) == len(run["epoch_seconds"]) == epochs
    # its minutes are its epochs' seconds, each validation pass included
    assert abs(run["wall_clock_minutes"] - sum(run["epoch_seconds"]) / 60) < 0.01
    assert run["test_accuracy"] >= 0.75  # the floor that counts (UvA's GPU-trained ViT: 75.6%)
    assert run["parameters"] <= 5_000_000
    sessions = results["provenance"]  # one entry per session of the state folder
    assert [where["session"] for where in sessions] == list(range(len(sessions)))
    assert len({where["git_commit"] for where in sessions}) == 1  # one code version
    for where in sessions:
        for key in ("cpu", "cpu_capability", "cpu_matrix_features", "torch", "git_commit",
                    "command", "seeds", "data"):  # fmt: skip
            assert where[key] not in (None, "", [], "unknown"), key
        assert where["cpu_count"] == where["torch_threads"] == 2 and where["seeds"] == [0]
        assert "--plan cpu" in where["command"] and where["gpu"] is None
        assert where["data"]["train"] == 45_000 and where["data"]["test"] == 10_000
        assert where["data"]["note"] == "CIFAR-10, JPEG copy, quality 75"
    assert cpu_photos.load_progress().complete


@pytest.mark.xfail(strict=True, reason="the recorded run reached 77.4% in 122.3 minutes: the "
                   "goal is 80% within 120 minutes of 2 cores (Real photos says so); a "
                   "recording that meets it turns this into a failure, to be made a plain test")
def test_the_recorded_run_meets_the_goal_of_80_percent_within_two_hours(run):
    assert sum(run["epoch_seconds"]) / 60 <= 120  # validation included
    assert run["test_accuracy"] >= 0.80


def test_time_to_accuracy_reads_the_curve(run):
    levels = (0.5, 0.75)
    reached = cpu_photos.time_to_accuracy(run, levels)
    assert 0 < reached[0.5] < reached[0.75] <= sum(run["epoch_seconds"]) / 60
    first = next(k for k, a in enumerate(run["val_accuracy"]) if a >= 0.5)
    assert reached[0.5] == round(sum(run["epoch_seconds"][: first + 1]) / 60, 2)
    with pytest.raises(ValueError, match="fractions"):
        cpu_photos.time_to_accuracy(run, (75,))
    with pytest.raises(ValueError, match="same length"):
        cpu_photos.time_to_accuracy({"val_accuracy": [0.5], "epoch_seconds": []}, (0.5,))


def test_the_shipped_model_is_the_cpu_vit_behind_its_normalisation():
    model = load_cifar10_vit()
    assert isinstance(model[0], Normalize) and isinstance(model[1], VisionTransformer)
    assert not model.training
    assert model[1].config == ViTConfig(**cpu_photos.CPU_VIT)
    torch.testing.assert_close(model[0].mean.flatten(), torch.tensor(CIFAR10_MEAN))
    torch.testing.assert_close(model[0].std.flatten(), torch.tensor(CIFAR10_STD))
    assert CIFAR10_VIT_PATH.stat().st_size <= 4_000_000
    assert sum(p.numel() for p in model.parameters()) <= 5_000_000


def test_the_shipped_model_reaches_its_recorded_accuracy_on_the_shipped_photos(run):
    measured = json.loads(read_metadata(CIFAR10_VIT_PATH)["measured"])
    assert measured["test_accuracy_fp32_recorded"] == run["test_accuracy"]
    assert measured["test_accuracy_int8"] >= 0.75
    assert abs(measured["test_accuracy_int8"] - run["test_accuracy"]) <= 0.005  # int8 costs little
    _, _, x_test, y_test = load_cifar10_sample()
    with torch.no_grad():
        accuracy = (load_cifar10_vit()(x_test).argmax(1) == y_test).float().mean().item()
    # within 3 points of its accuracy on all 10,000 test photos (the bound); the
    # same model on any CPU gets a photo or two otherwise where two logits are close
    assert abs(accuracy - measured["test_accuracy_int8"]) <= 0.03
    assert abs(accuracy - measured["sample_test_accuracy_int8"]) <= 0.002


def test_int8_weights_round_trip_exactly_and_take_a_quarter_of_the_room(tmp_path):
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, in_chans=3, num_classes=5,
                                        embed_dim=32, depth=2, num_heads=2))  # fmt: skip
    full, small = tmp_path / "fp32.safetensors", tmp_path / "int8.safetensors"
    save_model(model, full)
    save_model(model, small, int8=True, note="x")
    assert small.stat().st_size < 0.4 * full.stat().st_size
    loaded = load_model(small)
    packed, names = quantize_int8(model.state_dict())
    expected = dequantize_int8(packed, names)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in expected.items())
    assert "blocks.0.attn.qkv.weight" in names and "blocks.0.norm1.weight" not in names
    assert "pos_embed" not in names and "cls_token" not in names
    again, _ = quantize_int8(loaded.state_dict())  # quantizing again changes nothing
    assert all(torch.equal(again[k], packed[k]) for k in packed)
    x = torch.rand(3, 3, 8, 8)
    torch.testing.assert_close(loaded(x), model.eval()(x), atol=0.05, rtol=0)
    assert json.loads(read_metadata(small)["int8"]) == names


def test_int8_files_that_lie_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, in_chans=3, num_classes=5,
                                        embed_dim=8, depth=1, num_heads=2))  # fmt: skip
    good = tmp_path / "good.safetensors"
    save_model(model, good, int8=True)
    tensors, metadata = load_file(str(good)), read_metadata(good)
    name = "head.weight"

    def variant(path, tensors, metadata):
        save_file(tensors, str(path), metadata=metadata)
        return path

    as_float = {**tensors, name: tensors[name].float()}
    with pytest.raises(ValueError, match="head.weight is listed as int8 but is F32"):
        load_model(variant(tmp_path / "a.safetensors", as_float, metadata))
    stray = {**tensors, "norm.weight.int8_scale": torch.ones(8)}
    with pytest.raises(ValueError, match="belong to no int8 weight"):
        load_model(variant(tmp_path / "b.safetensors", stray, metadata))
    with pytest.raises(ValueError, match="JSON list of tensor names"):
        load_model(variant(tmp_path / "c.safetensors", tensors, {**metadata, "int8": '"x"'}))
