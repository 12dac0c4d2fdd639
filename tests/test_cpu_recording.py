"""scripts/train_cifar10.py --plan cpu and scripts/ship_cifar10_vit.py, on the stand-in.

The CPU recording runs through the same state folder as the GPU ladder: a budget stops it and
the next session goes on; each run records its epochs' seconds (the time-to-accuracy curve)
and its provenance names the CPU. The ship script turns a finished state folder into an int8
model file and a results file, into ``runs/`` unless told ``--write-assets``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from vitbook.data.cifar import cifar10_standin
from vitbook.pretrained.checkpoints import CIFAR10_VIT_PATH, load_model, read_metadata
from vitbook.studies import cpu_photos
from vitbook.studies.provenance import cpu_matrix_features

ROOT = Path(__file__).resolve().parents[1]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A CPU plan of the tiny ViT on the stand-in, in two sessions: 1 epoch, then the rest."""
    folder = tmp_path_factory.mktemp("cpu")
    script = load("train_cifar10_cpu", ROOT / "scripts" / "train_cifar10.py")
    state = folder / "state"
    argv = ["--plan", "cpu", "--standin", "--tiny", "--state", str(state), "--epochs", "3"]
    stopped = script.main([*argv, "--minutes", "0.02"])  # too short for an epoch
    finished = script.main(argv)
    return folder, state, stopped, finished


def test_the_cpu_plan_records_every_epochs_seconds_and_the_cpu(recorded):
    _, state, stopped, finished = recorded
    assert stopped == finished == 0
    results = json.loads((state / "results.json").read_text())
    (run,) = results["runs"]
    assert (run["row"], run["seed"]) == (cpu_photos.ROW, 0)
    assert len(run["epoch_seconds"]) == len(run["val_accuracy"]) == run["epochs"] == 3
    assert all(s > 0 for s in run["epoch_seconds"])
    assert run["precision"] == "bf16"  # the row's, on the CPU
    assert run["recipe"]["vit"] == cpu_photos.CPU_VIT and run["recipe"]["lr"] == 1e-3
    assert cpu_photos.time_to_accuracy(run, (0.0,))[0.0] == round(run["epoch_seconds"][0] / 60, 2)
    entry = results["provenance"][-1]
    assert entry["plan"] == "cpu" and entry["gpu"] is None
    assert entry["cpu_matrix_features"] == cpu_matrix_features()
    assert entry["torch_threads"] == torch.get_num_threads()
    assert entry["cpu_capability"] and entry["cpu"]
    plan = json.loads((state / "plan.json").read_text())
    assert "CPU photo ViT" in json.dumps(plan) or "tiny" in json.dumps(plan)
    assert (state / "weights" / f"{cpu_photos.ROW}-seed0.safetensors").is_file()
    assert (state / "weights" / f"{cpu_photos.ROW}-seed0-readout.json").is_file()


def test_the_cpu_plan_takes_only_its_own_rows(tmp_path, capsys):
    script = load("train_cifar10_rows", ROOT / "scripts" / "train_cifar10.py")
    with pytest.raises(SystemExit):
        script.main(["--plan", "cpu", "--standin", "--tiny", "--state", str(tmp_path / "s"),
                     "--rows", "vit-200"])  # fmt: skip
    assert "are not rows of --plan cpu" in capsys.readouterr().err
    assert script.main(["--plan", "cpu", "--plan-only"]) == 0
    assert f"{cpu_photos.ROW} seed 0: 70 epochs" in capsys.readouterr().out


def test_shipping_refuses_data_other_than_the_runs(recorded, monkeypatch, capsys):
    folder, state, _, _ = recorded
    ship = load("ship_cifar10_vit_1", ROOT / "scripts" / "ship_cifar10_vit.py")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(ship, "load_cifar10", lambda path: cifar10_standin(seed=1))
    before = hashlib.sha256(CIFAR10_VIT_PATH.read_bytes()).hexdigest()
    with pytest.raises(SystemExit):
        ship.main([str(state), "--data", "other.npz"])
    assert "is not the data the run was recorded on" in capsys.readouterr().err
    assert not list(folder.glob("runs/cifar10-vit-*.safetensors"))
    with pytest.raises(SystemExit):  # the shipped files only when told
        ship.main([str(tmp := folder / "nothing"), "--data", "x.npz"])
    assert "nothing written" in capsys.readouterr().err and not tmp.exists()
    assert hashlib.sha256(CIFAR10_VIT_PATH.read_bytes()).hexdigest() == before


def test_shipping_a_finished_folder(recorded, monkeypatch, capsys):
    folder, state, _, _ = recorded
    ship = load("ship_cifar10_vit_2", ROOT / "scripts" / "ship_cifar10_vit.py")
    monkeypatch.chdir(folder)
    results = json.loads((state / "results.json").read_text())
    monkeypatch.setattr(ship, "load_cifar10", lambda path: cifar10_standin())
    before = hashlib.sha256(CIFAR10_VIT_PATH.read_bytes()).hexdigest()
    assert ship.main([str(state), "--data", "standin"]) == 0
    (model_file,) = (folder / "runs").glob("cifar10-vit-*.safetensors")
    (results_file,) = (folder / "runs").glob("cifar10-cpu-results-*.json")
    assert json.loads(results_file.read_text()) == results
    metadata = read_metadata(model_file)
    measured = json.loads(metadata["measured"])
    assert measured["test_accuracy_fp32_recorded"] == results["runs"][0]["test_accuracy"]
    assert 0 <= measured["test_accuracy_int8"] <= 1
    assert measured["sample_test_accuracy_int8"] is None  # 3 classes: not CIFAR-10's 10
    assert json.loads(metadata["int8"]) and metadata["row"] == cpu_photos.ROW
    assert load_model(model_file).config.embed_dim == 32  # the tiny ViT it trained
    assert hashlib.sha256(CIFAR10_VIT_PATH.read_bytes()).hexdigest() == before
    assert "test_accuracy_int8" in capsys.readouterr().out
