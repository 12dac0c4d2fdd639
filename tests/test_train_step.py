"""vitbook.train.step: the compiled step (one graph, eager's history, the stop still holds) and the
shares of a global batch under torchrun (two gloo processes on the CPU).

Compiling on the CPU takes a while (inductor writes and builds C++), so one test compiles, on a
tiny model and one batch shape; the others trace with ``torch._dynamo.explain`` only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vitbook
from vitbook import VisionTransformer, ViTConfig
from vitbook.train import Recipe, fit
from vitbook.train.step import TrainStep


def vit(seed=0, **overrides):
    torch.manual_seed(seed)
    fields = {"img_size": 4, "patch_size": 2, "in_chans": 1, "num_classes": 3, "embed_dim": 16,
              "depth": 1, "num_heads": 2}  # fmt: skip
    return VisionTransformer(ViTConfig(**{**fields, **overrides}))


def data(n=32, scale=1.0):
    generator = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 4, 4, generator=generator) * scale, torch.arange(n) % 3


def train_step(model, **kwargs) -> TrainStep:
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    fields = {name: kwargs.pop(name) for name in list(kwargs) if name in Recipe.names()}
    recipe = Recipe(**{"epochs": 1, "lr": 1e-3, "precision": "fp32", **fields})
    settings = {"device": torch.device("cpu"), "criterion": None, "rank": 0, "world": 1,
                "compile": False, **kwargs}  # fmt: skip
    scaler = torch.amp.GradScaler("cpu", enabled=recipe.precision == "fp16")
    return TrainStep(model, model, optimizer, scheduler, scaler, params, recipe=recipe,
                     **settings)  # fmt: skip


def breaks(step: TrainStep, images, targets) -> tuple[int, list]:
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(step.forward_loss)(images, targets)
    torch._dynamo.reset()
    return explanation.graph_break_count, explanation.break_reasons


class Distilled(nn.Module):
    """Two heads in training, their mean in evaluation, like a distilled ViT."""

    def __init__(self):
        super().__init__()
        self.vit = vit(drop_rate=0.1)
        self.head_dist = nn.Linear(16, 3)

    def forward(self, images):
        tokens = self.vit.forward_features(images)  # (B, N, D)
        logits, dist = self.vit.forward_head(tokens), self.head_dist(tokens[:, 0])
        return (logits, dist) if self.training else (logits + dist) / 2


@pytest.mark.parametrize(
    "case, precision", [("labels", "fp32"), ("soft targets", "bf16"), ("criterion", "bf16")]
)
def test_the_compiled_step_is_one_graph(case, precision):
    """Forward pass and loss, dropout and stochastic depth on: no graph break (fullgraph)."""
    images, labels = data(6)
    targets = F.one_hot(labels, 3).float() * 0.9 + 0.1 / 3 if case == "soft targets" else labels
    if case == "criterion":
        teacher = vit(seed=1).eval()

        def distillation(outputs, targets, images):  # DeiT's hard distillation, in miniature
            with torch.no_grad():
                teacher_labels = teacher(images).argmax(dim=1)
            logits, dist = outputs
            return (F.cross_entropy(logits, targets) + F.cross_entropy(dist, teacher_labels)) / 2

        step = train_step(Distilled().train(), criterion=distillation, precision=precision)
    else:
        model = vit(drop_rate=0.1, drop_path_rate=0.1).train()
        step = train_step(model, label_smoothing=0.1, precision=precision)
    count, reasons = breaks(step, images, targets)
    assert count == 0, reasons


@pytest.mark.parametrize("name", ["photo ViT", "ResNet-18"])
def test_the_benchmarked_models_make_one_step_graph(name):
    """The photo ViT behind its Normalize, and ResNet-18 (BatchNorm updating its statistics),
    as benchmarks/gpu.py compiles them, in bf16 with label smoothing."""
    from vitbook.baselines import CifarResNet18
    from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize

    if name == "ResNet-18":
        model = CifarResNet18()
    else:
        model = VisionTransformer(ViTConfig(img_size=32, patch_size=4, num_classes=10,
                                            embed_dim=256, depth=6, num_heads=8, mlp_ratio=2.0,
                                            attn_impl="sdpa", drop_path_rate=0.1))  # fmt: skip
    model = nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), model).train()
    step = train_step(model, precision="bf16", label_smoothing=0.1)
    count, reasons = breaks(step, torch.rand(3, 3, 32, 32), torch.tensor([0, 4, 9]))
    assert count == 0, reasons


def count_reads(monkeypatch) -> list[str]:
    """Reads of a tensor's value into Python from vitbook's code (see tests/test_train.py)."""
    package = str(Path(vitbook.__file__).parent)
    reads = []
    for method in ("__bool__", "item", "tolist", "cpu", "numpy", "__float__", "__int__"):
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _original=original, _method=method, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(package):
                reads.append(_method)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counted)
    return reads


def test_compiled_training_matches_eager_and_still_stops(monkeypatch):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    recipe = {"epochs": 3, "batch_size": 16, "lr": 3e-3, "progress": False}  # one batch shape
    eager_model, compiled_model = vit(), vit()
    eager = fit(eager_model, data(), **recipe)
    compiled = fit(compiled_model, data(), compile=True, **recipe)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1 and not counters["graph_break"]
    # inductor fuses and reorders float32 arithmetic: the histories agree to rounding
    assert compiled.train_loss == pytest.approx(eager.train_loss, rel=1e-5)
    assert compiled.train_accuracy == eager.train_accuracy
    for name, tensor in eager_model.state_dict().items():
        torch.testing.assert_close(compiled_model.state_dict()[name], tensor, atol=1e-5,
                                   rtol=1e-4, msg=name)  # fmt: skip

    # When the host reads the verdict changes nothing; a compiled run stopped after an epoch
    # and resumed (compiled from its first step: gradients in buffers of their own) is the
    # compiled run that never stopped. The same graph serves them all.
    late_model = vit()
    late = fit(late_model, data(), compile=True, sync_every=10**9, **recipe)
    assert late.train_loss == compiled.train_loss
    saved = {}
    fit(vit(), data(), compile=True, **recipe,
        after_epoch=lambda done, state: saved.setdefault("state", state()) is not None)
    resumed_model = vit(seed=9)
    resumed = fit(resumed_model, data(), compile=True, resume=saved["state"], **recipe)
    assert resumed.train_loss == compiled.train_loss
    for name, tensor in compiled_model.state_dict().items():
        assert torch.equal(late_model.state_dict()[name], tensor), name
        assert torch.equal(resumed_model.state_dict()[name], tensor), name
    assert counters["stats"]["unique_graphs"] == graphs

    # Another model of the same shapes reuses the graph, and reads the host once per step.
    reads = count_reads(monkeypatch)
    fit(vit(seed=3), data(16 * 5), compile=True, **{**recipe, "epochs": 1})
    five = len(reads)
    reads.clear()
    fit(vit(seed=3), data(16 * 9), compile=True, **{**recipe, "epochs": 1})
    assert len(reads) - five <= 9 - 5
    monkeypatch.undo()
    assert counters["stats"]["unique_graphs"] == graphs  # no recompilation

    # An lr of 1e18 leaves huge but finite weights after step 1 (eager); step 2, compiled,
    # overflows the LayerNorm: the stop restores the weights step 2 began with.
    model = vit(seed=4)
    updated = []
    original = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        updated.append({k: v.clone() for k, v in model.state_dict().items()})
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    with pytest.raises(ValueError, match=r"training loss is nan at epoch 1, step 2 of 6"):
        fit(model, data(), compile=True, **{**recipe, "lr": 1e18, "warmup_steps": 0})
    assert counters["stats"]["unique_graphs"] == graphs  # the compiled graph ran step 2
    assert len(updated) == 2  # step 2's update ran, then was undone
    assert all(t.abs().max() < 1e20 for t in updated[0].values())  # huge, finite weights
    for name, tensor in updated[0].items():  # the weights after step 1
        assert torch.equal(model.state_dict()[name], tensor), name


WORKER = """
import json, sys
import torch
import torch.distributed as dist
from torch import nn
from vitbook.train import fit

dist.init_process_group("gloo")
generator = torch.Generator().manual_seed(1)
images, labels = torch.randn(9, 1, 4, 4, generator=generator), torch.arange(9) % 3
runs = {}
for batch_size in (4, 6):  # last batches of 1 (a share of 0) and of 3 (shares of 2 and 1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    history = fit(model, (images, labels), epochs=3, batch_size=batch_size, lr=0.1,
                  label_smoothing=0.1, progress=False)
    runs[batch_size] = {"loss": history.train_loss, "accuracy": history.train_accuracy,
                        "weights": [p.tolist() for p in model.parameters()]}
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as file:
        json.dump(runs, file)
dist.destroy_process_group()
"""


def test_uneven_and_empty_shares_under_torchrun_give_the_global_batch_s_gradient(tmp_path):
    import json
    import subprocess

    script, out = tmp_path / "worker.py", tmp_path / "runs.json"
    script.write_text(WORKER)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VITBOOK_PROGRESS": "0", "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(script), str(out)]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    two = json.loads(out.read_text())
    generator = torch.Generator().manual_seed(1)
    images, labels = torch.randn(9, 1, 4, 4, generator=generator), torch.arange(9) % 3
    for batch_size in (4, 6):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        one = fit(model, (images, labels), epochs=3, batch_size=batch_size, lr=0.1,
                  label_smoothing=0.1, progress=False)  # fmt: skip
        run = two[str(batch_size)]
        assert run["loss"] == pytest.approx(one.train_loss, rel=1e-6), batch_size
        assert run["accuracy"] == one.train_accuracy
        for theirs, ours in zip(run["weights"], model.parameters(), strict=True):
            torch.testing.assert_close(torch.tensor(theirs), ours.detach(), atol=1e-6, rtol=0)
