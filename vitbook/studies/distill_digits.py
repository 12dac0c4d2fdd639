"""A miniature of DeiT on the digits: can a small ViT beat the CNN that taught it?

Each model of ``SETTINGS`` trains on ``FRACTION`` of the training digits with
``experiments.RECIPE``, students of seed s learning from teachers of seed s; :func:`run_one`
trains and measures one run, deterministically on one CPU thread.

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch
from torch import nn

from vitbook import _files
from vitbook._files import ASSETS
from vitbook.analysis import mean_attention_distance
from vitbook.baselines import DigitsCNN
from vitbook.data import load_digits_split
from vitbook.data.augment import mixup_cutmix
from vitbook.pretrained.checkpoints import read_weights
from vitbook.studies import experiments, records
from vitbook.studies.experiments import CNN_CHANNELS, training_subset
from vitbook.studies.provenance import one_thread
from vitbook.train import evaluate, fit, predict, random_shift
from vitbook.train.distill import DistillationLoss, head_agreement
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = [
    "DISTILLATION",
    "FRACTION",
    "MIX",
    "RESULTS_PATH",
    "SETTINGS",
    "STUDENT",
    "TEACHERS",
    "TEACHER_PATH",
    "WEAK_FRACTION",
    "build",
    "load_results",
    "load_teacher",
    "macs_per_image",
    "reproduce",
    "run_one",
    "save_teacher",
    "summary",
    "train_setting",
]

RESULTS_PATH = ASSETS / "distillation.json"
TEACHER_PATH = ASSETS / "digits_cnn_teacher.safetensors"

FRACTION = 0.5  # of the 1,077 training digits: 536, where the CNN leads the ViT clearly
# The data-size experiment's ViT, read out from a class token as DeiT's students are.
STUDENT: dict[str, object] = {**experiments.BASE_VIT, "class_token": True, "pool": "cls"}
DISTILLATION: dict[str, float] = {"alpha": 0.5, "tau": 1.0}  # DeiT's defaults
MIX: dict[str, float] = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0}  # DeiT's, one draw a batch
# The weak teacher's share of the training digits (109 of them, inside the 536): the CNN of the
# data-size experiment is there about as accurate as the ViT is on the 536.
WEAK_FRACTION = 0.1
SETTINGS: dict[str, dict[str, object]] = {
    "CNN teacher": {"model": "cnn"},
    "ViT, scratch": {"model": "vit"},
    "hard, CNN teacher": {"model": "vit", "distilled": True, "teacher": "cnn", "type": "hard"},
    "soft, CNN teacher": {"model": "vit", "distilled": True, "teacher": "cnn", "type": "soft"},
    "hard, ViT teacher": {"model": "vit", "distilled": True, "teacher": "vit", "type": "hard"},
    "hard, class token only": {"model": "vit", "teacher": "cnn", "type": "hard"},
    "conv stem": {"model": "vit", "stem": "conv"},
    "ViT, scratch, mixed": {"model": "vit", "mix": True},
    "hard, CNN teacher, mixed": {"model": "vit", "distilled": True, "teacher": "cnn",
                                 "type": "hard", "mix": True},
    # The controls, recorded after the settings above.
    "ViT, mean-pooled": {"model": "vit", "class_token": False, "pool": "mean"},
    "token, no teacher": {"model": "vit", "distilled": True, "type": "none"},
    "soft, CNN teacher, batchmean": {"model": "vit", "distilled": True, "teacher": "cnn",
                                     "type": "soft", "kl_reduction": "batchmean"},
    # DeiT's protocol, recorded after the controls: a teacher trained with the students' mixing,
    # a longer schedule, the paper's soft constants, and a teacher about as good as the student.
    "CNN teacher, mixed": {"model": "cnn", "mix": True},
    "hard, mixed CNN teacher, mixed": {"model": "vit", "distilled": True, "teacher": "cnn-mixed",
                                       "type": "hard", "mix": True},
    "ViT, scratch, 300 epochs": {"model": "vit", "epochs": 300},
    "hard, CNN teacher, 300 epochs": {"model": "vit", "distilled": True, "teacher": "cnn",
                                      "type": "hard", "epochs": 300},
    "soft, CNN teacher, τ 3, λ 0.1": {"model": "vit", "distilled": True,
                                             "teacher": "cnn", "type": "soft", "tau": 3.0,
                                             "alpha": 0.1},
    "weak CNN teacher": {"model": "cnn", "fraction": WEAK_FRACTION},
    "hard, weak CNN teacher": {"model": "vit", "distilled": True, "teacher": "cnn-weak",
                               "type": "hard"},
    # The batchmean control again, on the machine type of the nine settings: a same-machine
    # pair for "soft, CNN teacher" (the control itself ran on another machine).
    "soft, CNN teacher, batchmean, rerun": {"model": "vit", "distilled": True, "teacher": "cnn",
                                            "type": "soft", "kl_reduction": "batchmean",
                                            "rerun_of": "soft, CNN teacher, batchmean"},
}
TEACHERS = {  # teacher -> the setting that trains it
    "cnn": "CNN teacher",
    "vit": "ViT, scratch",
    "cnn-mixed": "CNN teacher, mixed",
    "cnn-weak": "weak CNN teacher",
}
_MODEL_FIELDS = ("distilled", "stem", "class_token", "pool")


def build(setting: dict[str, object]) -> nn.Module:
    """The untrained model of a setting: the CNN, or ``STUDENT`` with the setting's changes.

    Example:
        >>> build(SETTINGS["hard, CNN teacher"]).config.num_prefix_tokens
        2
        >>> type(build(SETTINGS["CNN teacher"])).__name__
        'DigitsCNN'

    See chapter: Can a ViT beat the CNN that taught it?
    """
    if setting["model"] == "cnn":
        return DigitsCNN(channels=CNN_CHANNELS)
    fields = {k: v for k, v in setting.items() if k in _MODEL_FIELDS}
    return VisionTransformer(ViTConfig(**{**STUDENT, **fields}))


def macs_per_image(model: nn.Module) -> int:
    """Multiply-accumulates of one 8 x 8 digit through ``model`` (FlopCounterMode / 2).

    A ViT is counted with ``attn_impl="explicit"``, so that QK^T and AV count.

    Example:
        >>> macs_per_image(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)))  # 64 x 10
        640
        >>> scratch = build(SETTINGS["ViT, scratch"])  # attn_impl="sdpa"
        >>> macs_per_image(scratch) - 280_896  # QK^T and AV: 2 layers x 17 x 17 x 32 x 2
        36992

    See chapter: Can a ViT beat the CNN that taught it?
    """
    from torch.utils.flop_counter import FlopCounterMode

    if isinstance(model, VisionTransformer) and model.config.attn_impl != "explicit":
        explicit = VisionTransformer(dataclasses.replace(model.config, attn_impl="explicit"))
        explicit.load_state_dict(model.state_dict())
        model = explicit
    was_training = model.training
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 1, 8, 8))
    model.train(was_training)
    return counter.get_total_flops() // 2


def _data(fraction: float = FRACTION) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    x_train, y_train, x_val, y_val, x_test, y_test = load_digits_split(validation=True)
    keep = training_subset(y_train, fraction)
    return {"train": (x_train[keep], y_train[keep]), "val": (x_val, y_val),
            "test": (x_test, y_test)}  # fmt: skip


def train_setting(
    label: str, seed: int, teachers: dict[str, nn.Module] | None = None
) -> tuple[nn.Module, float]:
    """Train one setting's model with ``RECIPE`` and ``seed`` on one CPU thread.

    ``teachers``: kind (``"cnn"``, ...) -> this seed's teacher; a missing one is trained first
    and added. Returns ``(model, seconds)``, the model in eval mode.

    Example:
        >>> model, seconds = train_setting("CNN teacher", seed=0)  # doctest: +SKIP

    See chapter: Can a ViT beat the CNN that taught it?
    """
    setting = SETTINGS[label]
    teachers = {} if teachers is None else teachers
    data = _data(float(setting.get("fraction", FRACTION)))
    distillation = {k: float(setting.get(k, v)) for k, v in DISTILLATION.items()}
    # Label smoothing once: in the mix's soft targets (as DeiT and timm do), or in the loss.
    smoothing = experiments.RECIPE.label_smoothing
    mix = mixup_cutmix(10, label_smoothing=smoothing, **MIX) if setting.get("mix") else None
    smoothing = 0.0 if mix else smoothing
    criterion = None
    if "type" in setting:  # a distillation loss; "none" has no teacher
        teacher = None
        if "teacher" in setting:
            kind = setting["teacher"]
            if kind not in teachers:
                teachers[kind] = train_setting(TEACHERS[kind], seed)[0]
            teacher = teachers[kind]
        criterion = DistillationLoss(
            teacher, str(setting["type"]), label_smoothing=smoothing,
            single_head=not setting.get("distilled", False),
            kl_reduction=str(setting.get("kl_reduction", "mean")), **distillation,
        )  # fmt: skip
    with one_thread():
        torch.manual_seed(seed)
        model = build(setting)
        recipe = experiments.RECIPE.replace(  # the criterion smooths the true labels itself
            epochs=int(setting.get("epochs", experiments.RECIPE.epochs)),  # warm-up unchanged
            label_smoothing=0.0 if criterion else smoothing, seed=seed,
        )  # fmt: skip
        start = time.perf_counter()
        fit(model, data["train"], recipe, augment=random_shift(1), mix=mix, progress=False,
            criterion=criterion)  # fmt: skip
        seconds = time.perf_counter() - start
    return model.eval(), seconds


def _distances(model: VisionTransformer, images: torch.Tensor) -> list[list[float]]:
    """Mean attention distance (pixels) of every head of every layer: [layer][head]."""
    cfg = model.config
    with torch.no_grad():
        _, attentions = model.eval().forward_with_attention(images)
    return [
        [round(d, 4) for d in mean_attention_distance(
            a, cfg.grid_size, cfg.patch_size, num_prefix_tokens=cfg.num_prefix_tokens,
            renormalize=True).tolist()]
        for a in attentions
    ]  # fmt: skip


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1).mean().item()


def run_one(
    label: str, seed: int, teachers: dict[str, nn.Module] | None = None
) -> tuple[nn.Module, dict[str, object]]:
    """Train one setting with one seed and measure it: ``(model, run)``.

    ``run``: ``seed``, the accuracies, ``seconds``, ``parameters``, ``macs``; for a ViT
    ``attention_distance`` ([layer][head] pixels) and ``teacher_agreement``; for a distilled one
    the heads' accuracies, ``head_agreement``, ``token_cosine``, ``final_token_cosine``.

    Example:
        >>> model, run = run_one("CNN teacher", seed=0)  # doctest: +SKIP

    See chapter: Can a ViT beat the CNN that taught it?
    """
    teachers = {} if teachers is None else teachers
    model, seconds = train_setting(label, seed, teachers)
    data = _data()
    x_val, y_val = data["val"]
    run: dict[str, object] = {
        "seed": seed,
        "validation_accuracy": round(evaluate(model, data["val"]), 6),
        "seconds": round(seconds, 2),
        "parameters": sum(p.numel() for p in model.parameters()),
        "macs": macs_per_image(model),
    }
    if "teacher" in SETTINGS[label]:  # the teacher this run learned from, as trained here
        run["teacher_validation_accuracy"] = round(
            evaluate(teachers[SETTINGS[label]["teacher"]], data["val"]), 6
        )
    if isinstance(model, VisionTransformer):
        run["attention_distance"] = _distances(model, x_val)
        if "cnn" not in teachers:
            teachers["cnn"] = train_setting("CNN teacher", seed)[0]
        teacher_says = predict(teachers["cnn"], x_val).argmax(dim=1)
        run["teacher_agreement"] = round(
            (predict(model, x_val).argmax(dim=1) == teacher_says).float().mean().item(), 6
        )
    if getattr(getattr(model, "config", None), "distilled", False):
        heads = head_agreement(model, x_val)
        run["class_head_accuracy"] = round((heads["class"] == y_val).float().mean().item(), 6)
        run["distillation_head_accuracy"] = round(
            (heads["distillation"] == y_val).float().mean().item(), 6
        )
        run["head_agreement"] = round(heads["agreement"], 6)
        with torch.no_grad():
            features = model.forward_features(x_val)  # (B, 2 + Gh*Gw, D)
            run["token_cosine"] = round(_cosine(model.cls_token[0, 0], model.dist_token[0, 0]), 6)
            run["final_token_cosine"] = round(_cosine(features[:, 0], features[:, 1]), 6)
    run["test_accuracy"] = round(evaluate(model, data["test"]), 6)  # read once, at the end
    return model, run


def save_teacher(model: DigitsCNN, path: str | Path, **metadata: str) -> None:
    """Write a trained CNN teacher as safetensors, atomically, with string ``metadata``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "teacher.safetensors"
        >>> save_teacher(build(SETTINGS["CNN teacher"]), path, seed="0")
        >>> load_teacher(path).head.weight.shape
        torch.Size([10, 48])

    See chapter: Can a ViT beat the CNN that taught it?
    """
    if not isinstance(model, DigitsCNN):
        raise TypeError(f"model must be a DigitsCNN, got {type(model).__name__}.")
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    info = {"channels": json.dumps(list(CNN_CHANNELS)), **metadata}
    _files.write_with(Path(path), lambda temporary: save_file(tensors, str(temporary), info))


def load_teacher(path: str | Path = TEACHER_PATH) -> DigitsCNN:
    """The recorded miniature's CNN teacher of seed 0 (or another saved one), in eval mode.

    Example:
        >>> teacher = load_teacher()  # doctest: +SKIP
        >>> teacher.training  # doctest: +SKIP
        False

    See chapter: Can a ViT beat the CNN that taught it?
    """
    metadata, tensors = read_weights(path)
    channels = json.loads(metadata.get("channels", "null") or "null")
    if channels != list(CNN_CHANNELS):
        raise ValueError(
            f"{path} holds a CNN with channels {channels}, not the miniature's "
            f"{list(CNN_CHANNELS)}; write it with scripts/run_distillation.py."
        )
    model = DigitsCNN(channels=CNN_CHANNELS)
    model.load_state_dict(tensors)
    return model.eval()


def load_results(path: str | Path = RESULTS_PATH) -> dict[str, object]:
    """The recorded miniature: ``provenance``, the constants, and ``runs[label]`` (one per seed).

    A ViT's ``"macs"`` include QK^T and AV only where its provenance entry says so.

    Example:
        >>> results = load_results()  # doctest: +SKIP
        >>> sorted(results["runs"]) == sorted(SETTINGS)  # doctest: +SKIP
        True

    See chapter: Can a ViT beat the CNN that taught it?
    """
    remedy = "record it with python scripts/run_distillation.py --write-assets."
    results = _files.read_json(path, remedy=remedy)
    if not isinstance(results.get("runs"), dict):
        raise _files.ResultsFileError(
            f"{path} holds no 'runs' of settings; it is not a file of this miniature. {remedy}"
        )
    return results


def summary(
    results: dict[str, object], metric: str = "validation_accuracy"
) -> dict[str, dict[str, float]]:
    """Mean, sample standard deviation, minimum and maximum over seeds, per setting.

    Example:
        >>> table = summary({"runs": {"a": [{"x": 0.5}, {"x": 0.7}]}}, "x")
        >>> round(table["a"]["mean"], 3), round(table["a"]["std"], 3), table["a"]["n"]
        (0.6, 0.141, 2)

    See chapter: Can a ViT beat the CNN that taught it?
    """
    table = {}
    for label, runs in results["runs"].items():
        values = [float(run[metric]) for run in runs if metric in run]
        if not values:
            continue
        table[label] = records.spread(values)
    return table


def reproduce(
    results: dict[str, object], label: str, seed: int
) -> tuple[dict[str, object], dict[str, object]]:
    """Re-run one stored run (teachers included): ``(stored, rerun)``, to compare.

    Raises:
        ValueError: the file has no run for that setting and seed.

    Example:
        >>> stored, rerun = reproduce(load_results(), "CNN teacher", 0)  # doctest: +SKIP

    See chapter: Can a ViT beat the CNN that taught it?
    """
    stored = [run for run in results["runs"].get(label, []) if run["seed"] == seed]
    if not stored:
        raise ValueError(
            f"no stored run for setting={label!r}, seed={seed}; the file has "
            f"{sorted(results['runs'])}."
        )
    return stored[0], run_one(label, seed)[1]
