"""Threads for the book's tiny models: one torch thread against two, on an idle and a busy machine.

The chapters train and run models of 17,642 to 135,050 parameters on batches of at most 450 digits.
For such small tensors, the work of one operator is too small to split well between threads, and
a second thread may cost more in synchronisation than it saves. This section measures it for the
workloads the chapters run, each as one unit of work timed interleaved at 1 and 2 threads
(``torch.set_num_threads`` before each call), and again with one core kept busy by another
process (a Python busy loop), as when the book build and the tests share a 2-core machine.

Reported: the median time of each and the ratio 2 threads / 1 thread (above 1: one thread is
faster). The chapters choose their thread count from this table (``vitbook.train.fit`` runs on
one thread for models of up to ``TINY_MODEL_PARAMETERS`` parameters).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import MIN_REPEATS, Table, interleaved_times, median, undisturbed

BUSY_LOOP = "while True: pass"


def _digits_vit(**overrides: object) -> nn.Module:
    from vitbook import VisionTransformer, ViTConfig

    fields = dict(
        img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=64, depth=4,
        num_heads=4, mlp_ratio=2.0, pos_embed="sincos2d", class_token=False, pool="mean",
    )  # fmt: skip
    fields.update(overrides)
    return VisionTransformer(ViTConfig(**fields))


def _train_step(model: nn.Module, batch: int) -> Callable[[], None]:
    images, labels = torch.rand(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()

    def step() -> None:
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def _inference(model: nn.Module, batch: int) -> Callable[[], None]:
    images = torch.rand(batch, 1, 8, 8)
    model.eval()

    def forward() -> None:
        with torch.no_grad():
            model(images)

    return forward


def workloads(quick: bool = False) -> dict[str, tuple[int, Callable[[], None]]]:
    """name -> (parameters, one unit of work), the training and inference the chapters run."""
    from vitbook.baselines import DigitsCNN

    torch.manual_seed(0)
    models = {
        "digits ViT (D 64, 4 blocks), train step, batch 128": (_digits_vit(), "train", 128),
        "small ViT (D 32, 2 blocks), train step, batch 64": (
            _digits_vit(embed_dim=32, depth=2),
            "train",
            64,
        ),
        "digits CNN, train step, batch 128": (DigitsCNN(), "train", 128),
        "digits ViT (D 64, 4 blocks), 450 test digits": (_digits_vit(), "infer", 450),
    }
    if quick:
        models = dict(list(models.items())[:1])
    out = {}
    for name, (model, kind, batch) in models.items():
        unit = _train_step(model, batch) if kind == "train" else _inference(model, batch)
        out[name] = (sum(p.numel() for p in model.parameters()), unit)
    return out


def _at_threads(threads: int, unit: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        torch.set_num_threads(threads)
        unit()

    return run


def run(quick: bool = False) -> list[Table]:
    table = Table(
        key="threads",
        title="Threads for the book's tiny models: 1 vs 2 torch threads (median ms; ratio = "
        "2 threads / 1 thread, above 1: one thread is faster)",
        columns=[
            "workload", "parameters", "machine", "1 thread ms", "2 threads ms", "2 / 1",
            "repeats", "others' CPU",
        ],
        formats=["", ",", "", ".1f", ".1f", ".2f", "", ".0%"],
    )  # fmt: skip
    before = torch.get_num_threads()
    repeats = MIN_REPEATS if quick else 30
    try:
        for busy in (False, True):
            if quick and busy:
                continue
            loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
            try:
                for name, (parameters, unit) in workloads(quick).items():
                    candidates = {"1": _at_threads(1, unit), "2": _at_threads(2, unit)}

                    def measure(candidates=candidates) -> dict[str, list[float]]:
                        return interleaved_times(candidates, warmup=3, repeats=repeats)

                    times, others, _ = undisturbed(measure, name, retry=not (busy or quick))
                    one, two = median(times["1"]), median(times["2"])
                    machine = "one core busy" if busy else "idle"
                    table.add(
                        name, parameters, machine, one * 1e3, two * 1e3, two / one, repeats,
                        others,
                    )  # fmt: skip
            finally:
                if loop is not None:
                    loop.kill()
                    loop.wait()
    finally:
        torch.set_num_threads(before)
    table.notes.append(
        "Each row: one unit of work at 1 and at 2 threads, interleaved in one process. "
        "'one core busy': another process spins on one core meanwhile (its CPU shows under "
        "others' CPU), as when the book build and the tests share a 2-core machine."
    )
    return [table]
