"""A miniature of the ViT paper's transfer protocol, on the digits: pre-train, then fine-tune.

Pre-train on the digits 0 to 4, then tell 5 to 9 apart with 1, 5, 20 or all labels per class, by
each setting of ``SETTINGS`` (scratch, linear probe, fine-tuning, at 12 px). Validation digits
choose each learning rate from ``LR_GRID``; the test digits are read once, for the chosen runs.
Runs train on one CPU thread with deterministic algorithms. ``scripts/run_transfer.py`` writes
``vitbook/assets/transfer.json`` and the seed-0 pre-trained model.

See chapter: Fine-tuning a pretrained ViT.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import torch
from torch import nn

from vitbook import _files
from vitbook._files import ASSETS
from vitbook.data import load_digits_split
from vitbook.pretrained.checkpoints import load_model
from vitbook.pretrained.transfer import (
    FINETUNE_RECIPE,
    Preprocess,
    Preprocessed,
    change_resolution,
    freeze_body,
)
from vitbook.studies import records
from vitbook.studies.experiments import RECIPE
from vitbook.studies.provenance import one_thread
from vitbook.train import evaluate, fit, random_shift
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = [
    "HIGH_RES",
    "HIGH_RES_SETTINGS",
    "LONG_STEPS",
    "LR_GRID",
    "METHODS",
    "MODEL",
    "PRETRAINED_PATH",
    "PRETRAIN_RECIPE",
    "RESULTS_PATH",
    "SETTINGS",
    "SHOTS",
    "STEPS",
    "VAL_PER_CLASS",
    "TransferData",
    "build",
    "evaluate_test",
    "labelled_subset",
    "load_pretrained_digits",
    "load_results",
    "load_transfer_data",
    "pretrain",
    "reproduce",
    "summary",
    "train_one",
]

RESULTS_PATH = ASSETS / "transfer.json"
PRETRAINED_PATH = ASSETS / "digits04_vit.safetensors"

SOURCE_DIGITS = (0, 1, 2, 3, 4)
TARGET_DIGITS = (5, 6, 7, 8, 9)
VAL_PER_CLASS = 20  # validation digits of each new class, held out of the training digits
SHOTS = ("1", "5", "20", "all")  # labelled examples per new class
STEPS = 300  # optimiser steps of every run on the new task
LONG_STEPS = 1000  # "scratch, 1000 steps" and "fine-tune, 1000 steps": a longer budget
HIGH_RES = 12  # pixels of the higher-resolution fine-tuning (8 x 8 digits upsampled)

# Learned 1D position embeddings and a class-token readout, as in the paper: the embeddings are
# what the higher-resolution fine-tuning interpolates.
MODEL: dict[str, object] = {
    "img_size": 8,
    "patch_size": 2,
    "in_chans": 1,
    "num_classes": len(SOURCE_DIGITS),
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 4,
    "mlp_ratio": 2.0,
    "pos_embed": "learned",
    "class_token": True,
    "pool": "cls",
    "attn_impl": "sdpa",
}
PRETRAIN_RECIPE = RECIPE  # the experiments' recipe: the digits' one pre-training recipe
# Every method trains STEPS steps with random_shift(1); its learning rate is chosen on the
# validation digits from LR_GRID (a choice at the grid's edge would ask for a wider grid).
METHODS: dict[str, dict[str, object]] = {
    "scratch": {"optimizer": "adamw", "weight_decay": 0.05, "label_smoothing": 0.1},
    "linear probe": dict(FINETUNE_RECIPE),
    "fine-tune": dict(FINETUNE_RECIPE),
}
LR_GRID: dict[str, tuple[float, ...]] = {
    "scratch": (1e-3, 3e-3, 1e-2, 3e-2),
    "linear probe": (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0),
    "fine-tune": (0.01, 0.03, 0.1, 0.3),
}
HIGH_RES_SETTINGS = ("fine-tune 12 px", "fine-tune 12 px, new positions")
# Every setting with the numbers of labels it is run with.
SETTINGS: dict[str, tuple[str, ...]] = {
    **{method: SHOTS for method in METHODS},
    **{setting: SHOTS for setting in HIGH_RES_SETTINGS},
    f"scratch, {LONG_STEPS} steps": ("all",),
    f"fine-tune, {LONG_STEPS} steps": ("all",),
}


class TransferData:
    """The miniature's split, each part ``(images (B, 1, 8, 8), labels (B,))``: ``source`` and
    ``source_test`` the digits 0 to 4; ``pool`` (to draw labels from), ``val`` and ``test`` the
    digits 5 to 9, relabelled 0 to 4.

    See chapter: Fine-tuning a pretrained ViT.
    """

    def __init__(self, val_per_class: int = VAL_PER_CLASS) -> None:
        x_train, y_train, x_test, y_test = load_digits_split()
        shift = TARGET_DIGITS[0]
        source, target = y_train < shift, y_train >= shift
        self.source = (x_train[source], y_train[source])
        self.source_test = (x_test[y_test < shift], y_test[y_test < shift])
        x_target, y_target = x_train[target], y_train[target] - shift
        generator = torch.Generator().manual_seed(0)  # the same validation digits every time
        val, pool = [], []
        for label in range(len(TARGET_DIGITS)):
            members = torch.nonzero(y_target == label).flatten()
            members = members[torch.randperm(len(members), generator=generator)]
            val.append(members[:val_per_class])
            pool.append(members[val_per_class:])
        val, pool = torch.cat(val).sort().values, torch.cat(pool).sort().values
        self.val = (x_target[val], y_target[val])
        self.pool = (x_target[pool], y_target[pool])
        test = y_test >= shift
        self.test = (x_test[test], y_test[test] - shift)

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{name}={len(getattr(self, name)[1])}"
            for name in ("source", "source_test", "pool", "val", "test")
        )
        return f"TransferData({sizes})"


_DATA: dict[int, TransferData] = {}


def load_transfer_data() -> TransferData:
    """The miniature's split (made once per process; the same every time).

    Example:
        >>> load_transfer_data()
        TransferData(source=675, source_test=226, pool=572, val=100, test=224)

    See chapter: Fine-tuning a pretrained ViT.
    """
    if VAL_PER_CLASS not in _DATA:
        _DATA[VAL_PER_CLASS] = TransferData(VAL_PER_CLASS)
    return _DATA[VAL_PER_CLASS]


def labelled_subset(labels: torch.Tensor, shots: str, seed: int) -> torch.Tensor:
    """Indices of ``shots`` labelled examples per class (``"all"``: every one), drawn by
    ``seed``; for one seed, smaller sets lie inside larger ones.

    Example:
        >>> labels = torch.arange(3).repeat(4)  # (12,) four of each class
        >>> one, two = labelled_subset(labels, "1", 0), labelled_subset(labels, "2", 0)
        >>> labels[one].tolist(), set(one.tolist()) <= set(two.tolist())
        ([0, 1, 2], True)

    Raises:
        ValueError: ``shots`` is neither ``"all"`` nor a positive whole number.

    See chapter: Fine-tuning a pretrained ViT.
    """
    if shots != "all" and not (isinstance(shots, str) and shots.isdigit() and int(shots) > 0):
        raise ValueError(f"shots={shots!r} must be 'all' or a positive number as a str, e.g. '5'.")
    generator = torch.Generator().manual_seed(seed)
    keep = []
    for label in labels.unique().tolist():
        members = torch.nonzero(labels == label).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        keep.append(members if shots == "all" else members[: int(shots)])
    return torch.cat(keep).sort().values


def pretrain(seed: int) -> tuple[VisionTransformer, dict[str, float]]:
    """Pre-train ``MODEL`` on the digits 0 to 4 with ``PRETRAIN_RECIPE`` and ``seed``: ``(model
    in eval mode, {"source_test_accuracy", "train_loss", "seconds"})``.

    See chapter: Fine-tuning a pretrained ViT.
    """
    data = load_transfer_data()
    with one_thread():
        torch.manual_seed(seed)
        model = VisionTransformer(ViTConfig(**MODEL))
        start = time.perf_counter()
        history = fit(model, data.source, PRETRAIN_RECIPE.replace(seed=seed),
                      augment=random_shift(1), progress=False)  # fmt: skip
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, data.source_test)
    return model, {
        "source_test_accuracy": round(accuracy, 6),
        "train_loss": round(history.train_loss[-1], 6),
        "seconds": round(seconds, 2),
    }


def load_pretrained_digits() -> VisionTransformer:
    """The shipped pre-trained model of seed 0 (:func:`pretrain` with ``seed=0``), in eval mode.

    Example:
        >>> model = load_pretrained_digits()
        >>> model.config.num_classes, model.config.pos_embed
        (5, 'learned')

    See chapter: Fine-tuning a pretrained ViT.
    """
    return load_model(PRETRAINED_PATH)


def build(setting: str, pretrained: VisionTransformer | None) -> nn.Module:
    """The model a setting starts from: random, or a copy of ``pretrained`` with a new head
    (a 12 px setting: a ``Preprocessed`` model).

    See chapter: Fine-tuning a pretrained ViT.
    """
    classes = len(TARGET_DIGITS)
    if setting.startswith("scratch"):
        return VisionTransformer(ViTConfig(**{**MODEL, "num_classes": classes}))
    if pretrained is None:
        raise ValueError(f"setting {setting!r} starts from a pre-trained model; pass one.")
    model = copy.deepcopy(pretrained)
    model.reset_classifier(classes)  # zero-initialised, as in the paper
    if setting == "linear probe":
        freeze_body(model)
        return model
    if setting in ("fine-tune", f"fine-tune, {LONG_STEPS} steps"):
        return model
    if setting not in HIGH_RES_SETTINGS:
        raise ValueError(
            f"unknown setting {setting!r}; choose one of {[*METHODS, *HIGH_RES_SETTINGS]}."
        )
    model = change_resolution(model, HIGH_RES)  # (1, 17, D) -> (1, 37, D) positions
    if setting.endswith("new positions"):
        with torch.no_grad():
            nn.init.trunc_normal_(model.pos_embed, std=0.02)  # as a new model's
    return Preprocessed(Preprocess(HIGH_RES, mean=(0.0,), std=(1.0,)), model)


def train_one(
    setting: str, shots: str, lr: float, seed: int, pretrained: VisionTransformer | None
) -> tuple[nn.Module, dict[str, object]]:
    """Train one setting on ``shots`` labels per class for ``STEPS`` (or ``LONG_STEPS``) steps:
    ``(model, {"seed", "lr", "val_accuracy", "train_loss", "train_images", "steps",
    "seconds"})``; the test digits are not read.

    Example:
        >>> model, run = train_one("linear probe", "1", 0.1, 0, load_pretrained_digits())
        >>> run["train_images"], run["steps"], 0.0 <= run["val_accuracy"] <= 1.0
        (5, 300, True)

    See chapter: Fine-tuning a pretrained ViT.
    """
    data = load_transfer_data()
    keep = labelled_subset(data.pool[1], shots, seed)
    images, labels = data.pool[0][keep], data.pool[1][keep]
    batch_size = min(64, len(labels))
    steps_per_epoch = math.ceil(len(labels) / batch_size)
    steps = LONG_STEPS if setting.endswith(f", {LONG_STEPS} steps") else STEPS
    epochs = math.ceil(steps / steps_per_epoch)
    recipe = METHODS[setting.split(",")[0].split(" 12 px")[0]]
    with one_thread():
        torch.manual_seed(seed)
        model = build(setting, pretrained)
        start = time.perf_counter()
        history = fit(
            model, (images, labels), epochs=epochs, lr=lr, batch_size=batch_size, seed=seed,
            warmup_epochs=max(1, epochs // 10), augment=random_shift(1), progress=False,
            **recipe,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, data.val)
    return model, {
        "seed": seed,
        "lr": lr,
        "val_accuracy": round(accuracy, 6),
        "train_loss": round(history.train_loss[-1], 6),
        "train_images": len(labels),
        "steps": epochs * steps_per_epoch,
        "seconds": round(seconds, 2),
    }


def evaluate_test(model: nn.Module) -> float:
    """Accuracy on the 224 test digits 5 to 9 (read only for reported runs).

    See chapter: Fine-tuning a pretrained ViT.
    """
    with one_thread():
        return round(evaluate(model, load_transfer_data().test), 6)


def load_results(path: str | Path = RESULTS_PATH) -> dict[str, object]:
    """The recorded miniature, as written by ``scripts/run_transfer.py``.

    Keys: ``settings`` (setting -> shots -> ``{"lr", "runs"}``), ``sweep`` (the learning-rate
    choice's runs), ``pretraining``, this module's constants and ``provenance``.

    Example:
        >>> results = load_results()
        >>> list(results["settings"])[:3]
        ['scratch', 'linear probe', 'fine-tune']

    See chapter: Fine-tuning a pretrained ViT.
    """
    return _files.read_json(path, remedy="write it with python scripts/run_transfer.py.")


def summary(
    results: dict[str, object], metric: str = "test_accuracy"
) -> dict[str, dict[str, dict[str, float]]]:
    """Spread over seeds: ``{setting: {shots: {n, mean, std, min, max, lr}}}`` (std: n - 1).

    Example:
        >>> table = summary(load_results())
        >>> row = table["fine-tune"]["5"]
        >>> row["min"] <= row["mean"] <= row["max"] and row["n"] >= 3
        True

    See chapter: Fine-tuning a pretrained ViT.
    """
    table: dict[str, dict[str, dict[str, float]]] = {}
    for setting, by_shots in results["settings"].items():
        table[setting] = {}
        for shots, entry in by_shots.items():
            values = [float(run[metric]) for run in entry["runs"]]
            table[setting][shots] = {**records.spread(values), "lr": entry["lr"]}
    return table


def reproduce(
    results: dict[str, object], setting: str, shots: str, seed: int
) -> tuple[dict[str, object], dict[str, object]]:
    """Re-run one recorded run with its chosen learning rate: ``(stored, rerun)``; seeds but 0
    pre-train again.

    Raises:
        ValueError: the file has no run for that setting, number of labels and seed.

    Example:
        >>> stored, rerun = reproduce(load_results(), "linear probe", "1", 0)
        >>> stored["train_images"] == rerun["train_images"] == 5
        True

    See chapter: Fine-tuning a pretrained ViT.
    """
    entry = results["settings"].get(setting, {}).get(shots)
    stored = [run for run in (entry or {}).get("runs", []) if run["seed"] == seed]
    if not stored:
        raise ValueError(
            f"no recorded run for setting={setting!r}, shots={shots!r}, seed={seed}; see "
            "load_results()['settings'] for what there is."
        )
    pretrained = None
    if not setting.startswith("scratch"):
        pretrained = load_pretrained_digits() if seed == 0 else pretrain(seed)[0]
    model, rerun = train_one(setting, shots, entry["lr"], seed, pretrained)
    return stored[0], {**rerun, "test_accuracy": evaluate_test(model)}
