"""scripts/train_cifar10.py: a smoke run on the stand-in, and the same run under torchrun.

Under ``torchrun --nproc_per_node=2`` (gloo on the CPU) each process trains on half of every
global batch inside DistributedDataParallel; the per-epoch losses must equal one process's on the
same global batches, up to the order of floating-point sums.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_cifar10.py"
SMOKE = ["--standin", "--tiny", "--epochs", "2", "--seeds", "0", "--rows", "vit-crop-flip",
         "--batch-size", "60"]  # fmt: skip
TIMEOUT_S = 240


def run(command: list[str], out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VITBOOK_PROGRESS": "0", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [*command, *SMOKE, "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    return run([sys.executable, str(SCRIPT)], tmp_path_factory.mktemp("one") / "results.json")


def test_a_smoke_run_records_the_run_and_its_provenance(one_process):
    (record,) = one_process["runs"]
    assert record["row"] == "vit-crop-flip" and record["seed"] == 0 and record["epochs"] == 2
    assert len(record["train_loss"]) == len(record["val_accuracy"]) == 2
    assert 0 <= record["test_accuracy"] <= 1 and record["precision"] == "fp32"
    (provenance,) = one_process["provenance"]
    assert provenance["processes"] == 1 and provenance["gpu"] is None
    assert provenance["data"]["source"].startswith("stand-in")
    assert len(provenance["data"]["sha256"]) == 64
    assert "--standin" in provenance["command"]


def test_two_processes_under_torchrun_compute_the_losses_of_one(one_process, tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", str(SCRIPT)]  # fmt: skip
    two = run(torchrun, tmp_path / "results.json")
    assert two["provenance"][0]["processes"] == 2
    (one_run,), (two_run,) = one_process["runs"], two["runs"]
    assert two_run["train_loss"] == pytest.approx(one_run["train_loss"], rel=1e-5)
    assert two_run["val_accuracy"] == pytest.approx(one_run["val_accuracy"], abs=1e-6)
