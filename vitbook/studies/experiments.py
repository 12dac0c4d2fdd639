"""Measured experiments on the digits: positions, patch size, data hunger and augmentation.

``scripts/run_experiments.py`` writes ``vitbook/assets/experiments.json`` from :func:`run_one`
over ``EXPERIMENTS`` and seeds; the chapters read it with :func:`load_results` and
:func:`summary`. The experiments:

- ``"positions"``: none / learned 1D / 2D sine-cosine / relative positions times a class-token or
  mean-pooled readout (a miniature of the ViT paper's Table 8).
- ``"patch_size"``: P = 1, 2, 4 on the 8 x 8 digits (64, 16, 4 tokens).
- ``"data_size"``: the ViT against a CNN of similar size on 10 % .. 100 % of the training part.
- ``"augmentation"``: ``RECIPE`` with and without its one-pixel shifts, ViT and CNN.

Every run trains ``BASE_VIT`` with the setting's changes (or the CNN) by ``RECIPE`` on the
training part of ``load_digits_split(validation=True)``, on one CPU thread, deterministically.
What the results can and cannot show: the chapter *Training and classification*.

See chapters: Training and classification; Positional encodings; Images as sequences of patches.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _files
from vitbook._files import ASSETS
from vitbook.baselines import DigitsCNN
from vitbook.data import load_digits_split
from vitbook.studies import records
from vitbook.studies.provenance import one_thread
from vitbook.train import Recipe, evaluate, fit, random_shift
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = [
    "AUGMENTS",
    "BASE_VIT",
    "CNN_CHANNELS",
    "EXPERIMENTS",
    "AUGMENT",
    "RECIPE",
    "RECORDED_FIELDS",
    "RESULTS_PATH",
    "build_model",
    "load_results",
    "recorded_recipe",
    "reproduce",
    "run_one",
    "summary",
    "time_training_step",
    "training_subset",
]

RESULTS_PATH = ASSETS / "experiments.json"

BASE_VIT: dict[str, object] = {
    "img_size": 8,
    "patch_size": 2,
    "in_chans": 1,
    "num_classes": 10,
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 4,
    "mlp_ratio": 2.0,
    "class_token": False,
    "pos_embed": "sincos2d",
    "pool": "mean",
    "attn_impl": "sdpa",
}
CNN_CHANNELS = (16, 32, 48)  # 19,162 parameters, against the base ViT's 17,642
RECIPE = Recipe(epochs=100, lr=5e-3, weight_decay=0.05, batch_size=64, warmup_epochs=5,
                label_smoothing=0.1)
# The recipe's fields the results files record: their layout, kept as written.
RECORDED_FIELDS = ("epochs", "lr", "weight_decay", "batch_size", "warmup_epochs", "label_smoothing")
AUGMENT = "random_shift(1)"  # the runs' augmentation, by name (AUGMENTS)
# What the recipe's "augment" names: the one-pixel shifts, or nothing (augmentation experiment).
AUGMENTS = {"random_shift(1)": random_shift(1), "none": None}


def recorded_recipe(recipe: Recipe | None = None) -> dict[str, object]:
    """A recipe (:data:`RECIPE` by default) as the results files record it: its
    :data:`RECORDED_FIELDS` and the augmentation's name.

    Example:
        >>> recorded_recipe()["epochs"], recorded_recipe()["augment"]
        (100, 'random_shift(1)')

    See chapter: Training and classification.
    """
    recipe = RECIPE if recipe is None else recipe
    return {**recipe.to_dict(keys=RECORDED_FIELDS), "augment": AUGMENT}

_READOUTS = {"token": {"class_token": True, "pool": "cls"}, "mean": {"class_token": False}}
_POSITIONS = ("none", "learned", "sincos2d", "relative")
EXPERIMENTS: dict[str, dict[str, object]] = {
    "positions": {
        "description": "position embeddings times readout (ViT paper, Table 8, Appendix D.3)",
        "settings": {
            f"{pos}, {readout}": {"pos_embed": pos, **_READOUTS[readout]}
            for pos in _POSITIONS
            for readout in _READOUTS
        },
    },
    "patch_size": {
        "description": "patch size P on 8 x 8 digits: tokens against accuracy against time",
        "settings": {f"P={p}": {"patch_size": p} for p in (1, 2, 4)},
    },
    "data_size": {
        "description": "ViT against a CNN of similar size as the training set grows",
        "settings": {
            f"{model} {round(100 * fraction)}%": {"model": model.lower(), "fraction": fraction}
            for model in ("ViT", "CNN")
            for fraction in (0.1, 0.25, 0.5, 1.0)
        },
    },
    "augmentation": {
        "description": "the recipe with and without its one-pixel shifts, ViT and CNN",
        "settings": {
            f"{model}, {'shifts' if shifts else 'no shifts'}": {
                "model": model.lower(),
                **({} if shifts else {"augment": "none"}),
            }
            for model in ("ViT", "CNN")
            for shifts in (True, False)
        },
    },
}
_NOT_MODEL_FIELDS = ("model", "fraction", "augment")


def training_subset(labels: torch.Tensor, fraction: float) -> torch.Tensor:
    """Indices of a fixed, stratified, nested part of a training set: (about fraction * B,).

    Each class keeps its first ``round(fraction * count)`` images (at least one) of a fixed
    seed-0 permutation, so smaller parts lie inside larger ones and every seed sees the same.

    Example:
        >>> labels = torch.arange(10).repeat(10)  # (100,) ten images per class
        >>> small, large = training_subset(labels, 0.2), training_subset(labels, 0.5)
        >>> len(small), len(large), set(small.tolist()) <= set(large.tolist())
        (20, 50, True)

    See chapter: Training and classification.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction!r} must be in (0, 1]; use 1.0 for the whole part.")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    keep = []
    for label in labels.unique().tolist():
        members = order[labels[order] == label]  # this class, in the fixed random order
        keep.append(members[: max(1, round(fraction * len(members)))])
    return torch.cat(keep).sort().values


def build_model(setting: dict[str, object]) -> nn.Module:
    """The model of one setting: ``BASE_VIT`` with the setting's fields, or the CNN.

    Example:
        >>> build_model({"pos_embed": "relative"}).config.pos_embed
        'relative'
        >>> type(build_model({"model": "cnn", "fraction": 0.1})).__name__
        'DigitsCNN'

    See chapter: Training and classification.
    """
    fields = {k: v for k, v in setting.items() if k not in _NOT_MODEL_FIELDS}
    if setting.get("model", "vit") == "cnn":
        return DigitsCNN(channels=CNN_CHANNELS)
    return VisionTransformer(ViTConfig(**{**BASE_VIT, **fields}))


def _moved_right(images: torch.Tensor) -> torch.Tensor:
    """Images (B, C, H, W) moved one pixel to the right, zeros entering on the left."""
    return F.pad(images, (1, 0))[..., : images.shape[-1]]


def run_one(setting: dict[str, object], seed: int) -> dict[str, object]:
    """Train the setting's model with ``RECIPE`` and ``seed`` (weights, order, augmentation)
    on the training part or its ``fraction`` (:func:`training_subset`); measure it.

    Returns:
        ``{"seed", "validation_accuracy", "moved_validation_accuracy", "test_accuracy",
        "train_loss", "seconds", "seconds_per_epoch", "parameters", "tokens",
        "train_images"}``; ``train_loss`` is the last epoch's mean loss, ``tokens`` N (0: CNN).

    Example:
        >>> run = run_one(EXPERIMENTS["data_size"]["settings"]["CNN 10%"], seed=0)  # a second
        >>> run["train_images"], run["parameters"], 0.0 <= run["validation_accuracy"] <= 1.0
        (109, 19162, True)

    See chapter: Training and classification.
    """
    x_train, y_train, x_val, y_val, x_test, y_test = load_digits_split(validation=True)
    fraction = float(setting.get("fraction", 1.0))
    if fraction < 1.0:
        keep = training_subset(y_train, fraction)
        x_train, y_train = x_train[keep], y_train[keep]
    augment = AUGMENTS[str(setting.get("augment", AUGMENT))]
    with one_thread():
        torch.manual_seed(seed)
        model = build_model(setting)
        start = time.perf_counter()
        history = fit(model, (x_train, y_train), RECIPE.replace(seed=seed), augment=augment,
                      progress=False)  # fmt: skip
        seconds = time.perf_counter() - start
        validation = evaluate(model, (x_val, y_val))
        moved = evaluate(model, (_moved_right(x_val), y_val))
        test = evaluate(model, (x_test, y_test))
    return {
        "seed": seed,
        "validation_accuracy": round(validation, 6),
        "moved_validation_accuracy": round(moved, 6),
        "test_accuracy": round(test, 6),
        "train_loss": round(history.train_loss[-1], 6),
        "seconds": round(seconds, 2),
        "seconds_per_epoch": round(seconds / history.epochs, 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens": model.config.num_tokens if isinstance(model, VisionTransformer) else 0,
        "train_images": len(x_train),
    }


def time_training_step(setting: dict[str, object], *, repeats: int = 30) -> float:
    """Seconds of one training step (forward, backward, AdamW) on 64 digits, one CPU thread.

    The minimum over ``repeats`` steps after 3 untimed ones (the least disturbed by load).

    Example:
        >>> time_training_step({"patch_size": 4}, repeats=2) > 0
        True

    See chapter: Images as sequences of patches.
    """
    images, labels = load_digits_split(validation=True)[:2]  # the training part
    images, labels = images[: RECIPE.batch_size], labels[: RECIPE.batch_size]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = build_model(setting).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE.lr)
        times = []
        for step in range(3 + repeats):
            start = time.perf_counter()
            loss = nn.functional.cross_entropy(model(images), labels)  # (B, K) logits
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step >= 3:
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return min(times)


def load_results(path: str | Path = RESULTS_PATH) -> dict[str, object]:
    """The stored results: ``provenance``, ``recipe``, ``base_vit``, and ``experiments[name]``
    with ``description``, ``settings`` (label -> fields) and ``runs`` (label -> :func:`run_one`
    dicts, one per seed).

    Example:
        >>> results = load_results()
        >>> sorted(results["experiments"])
        ['augmentation', 'data_size', 'patch_size', 'positions']
        >>> len(results["experiments"]["patch_size"]["runs"]["P=1"]) >= 3
        True

    See chapter: Training and classification.
    """
    return _files.read_json(path, remedy="write it with python scripts/run_experiments.py.")


def summary(
    results: dict[str, object], experiment: str, metric: str = "validation_accuracy"
) -> dict[str, dict[str, float]]:
    """Spread over seeds of one metric, per setting: ``{label: {n, mean, std, min, max}}``.

    ``std`` divides by n - 1. Compare settings by the default; ``metric="test_accuracy"`` gives
    the held-out number of a chosen setting.

    Example:
        >>> table = summary(load_results(), "positions")
        >>> row = table["sincos2d, mean"]
        >>> row["min"] <= row["mean"] <= row["max"] and row["n"] >= 3
        True

    See chapter: Training and classification.
    """
    experiments = results["experiments"]
    if experiment not in experiments:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {sorted(experiments)}.")
    table = {}
    for label, runs in experiments[experiment]["runs"].items():
        values = [float(run[metric]) for run in runs]
        table[label] = records.spread(values)
    return table


def reproduce(
    results: dict[str, object], experiment: str, label: str, seed: int
) -> tuple[dict[str, object], dict[str, object]]:
    """Re-run one stored run: ``(stored, rerun)``, to compare their numbers.

    On the file's ``provenance`` machine and software, all but ``seconds`` are equal.

    Raises:
        ValueError: the file has no run for that experiment, setting and seed.

    Example:
        >>> stored, rerun = reproduce(load_results(), "data_size", "CNN 10%", seed=0)
        >>> stored["train_images"] == rerun["train_images"]
        True

    See chapter: Training and classification.
    """
    runs = results["experiments"].get(experiment, {}).get("runs", {}).get(label, [])
    stored = [run for run in runs if run["seed"] == seed]
    if not stored:
        raise ValueError(
            f"no stored run for experiment={experiment!r}, setting={label!r}, seed={seed}; "
            "see load_results()['experiments'] for what there is."
        )
    return stored[0], run_one(EXPERIMENTS[experiment]["settings"][label], seed)
