"""The photo chapter's recipe ladder: its rows, what each row trains, its recorded runs.

:data:`RECORDED_ROWS` (the shipped recording, :data:`RESULTS_PATH`), :data:`ROWS` (the next
ladder, one change per row) and :data:`DEIT_ROWS` (one change each from ``vit-200``).
:func:`run_parts` makes what ``vitbook.train.fit`` trains one run with.

See chapter: Real photos.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import torch
from torch import nn

from vitbook import _files
from vitbook._files import ASSETS
from vitbook.baselines import CifarResNet18
from vitbook.data import augment
from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize
from vitbook.studies import cpu_photos, records
from vitbook.studies.progress import Progress, progress_of
from vitbook.train import Recipe
from vitbook.train.distill import DistillationLoss
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = [
    "ALL_ROWS",
    "DEIT_ROWS",
    "FIRST_ROWS",
    "H100_SECONDS_PER_EPOCH",
    "NEXT_RESULTS_PATH",
    "PHOTO_VIT",
    "PLAN",
    "Progress",
    "RECORDED_ROWS",
    "RESULTS_PATH",
    "ROWS",
    "TINY_VIT",
    "augmentation",
    "build",
    "changes",
    "describe",
    "describe_change",
    "group_provenance",
    "load_results",
    "load_progress",
    "plan_cost",
    "planned_recipe",
    "projected_minutes",
    "recipe",
    "recipes",
    "recording_order",
    "recording_progress",
    "run_parts",
    "summarize",
]

RESULTS_PATH = ASSETS / "cifar10_results.json"
# Where the next recording (ROWS and DEIT_ROWS) ships once a GPU has recorded some of it.
NEXT_RESULTS_PATH = ASSETS / "cifar10_next_results.json"

# AdamW with DeiT's regularisers, scaled to CIFAR-10: what every recorded row shares.
BASE = {"lr": 1e-3, "weight_decay": 0.05, "batch_size": 256, "warmup_epochs": 3,
        "label_smoothing": 0.1}  # fmt: skip
# The shipped recording (scripts/train_cifar10.py at f5734a8), rows as that script wrote them.
# "randaugment" there is torchvision's scale: 2 ops at bin 9 of 31 (rotation up to 9 degrees).
RECORDED_ROWS: dict[str, dict[str, object]] = {
    "vit-crop-flip": {"model": "vit", "epochs": 30, "augment": "crop-flip"},
    "vit-randaugment": {"model": "vit", "epochs": 30, "augment": "crop-flip+randaugment"},
    "vit-regularised-100": {"model": "vit", "epochs": 100, "augment": "crop-flip+randaugment",
                            "drop_path_rate": 0.1},
    "vit-mix-200": {"model": "vit", "epochs": 200, "augment": "crop-flip+randaugment",
                    "drop_path_rate": 0.1, "mix": True},
    "resnet18": {"model": "resnet18", "epochs": 30, "augment": "crop-flip"},
}  # fmt: skip

# The next ladder. Row 0 is the recorded vit-crop-flip trained 50 epochs; each later row changes
# one field of the row above. RandAugment is at DeiT's strength, m9 with magnitude noise 0.5 on
# timm's 0-10 scale (rotation up to 27 degrees), where the recorded rows used bin 9 of
# torchvision's 31. Weight decay "timm" leaves norms, biases, position embeddings and the class
# token undecayed. Repeated augmentation shows each photo 3 times an epoch, differently augmented.
_START = {
    "model": "vit", "epochs": 50, **BASE, "weight_decay_rule": "all", "augment": "crop-flip",
    "rand_augment": None, "mix": False, "random_erasing": 0.0, "repeated_augmentation": 1,
    "drop_path_rate": 0.0,
}  # fmt: skip
_STEPS = [  # (row, the one change from the row above)
    ("vit-50", {}),
    ("vit-50-timm-decay", {"weight_decay_rule": "timm"}),
    ("vit-50-randaugment-m9", {"rand_augment": {"num_ops": 2, "magnitude": 9, "scale": "timm",
                                                "magnitude_std": 0.5}}),  # fmt: skip
    ("vit-50-mix", {"mix": True}),
    ("vit-50-erasing", {"random_erasing": 0.25}),
    ("vit-50-drop-path", {"drop_path_rate": 0.1}),
    ("vit-50-repeated", {"repeated_augmentation": 3}),
    ("vit-200", {"epochs": 200}),
    ("resnet18-200", {"model": "resnet18", "drop_path_rate": 0.0}),  # no drop path in it
]


def _ladder() -> dict[str, dict[str, object]]:
    rows, above = {}, _START
    for name, change in _STEPS:
        rows[name] = above = {**above, **change}
    return rows


ROWS: dict[str, dict[str, object]] = _ladder()
# Seeds per row: two resolve a step of about a point (the recorded 30-epoch rows varied by
# 0.3 points from seed to seed); three for the row the ladder is aiming at.
PLAN: dict[str, tuple[int, ...]] = {name: (0, 1) for name in ROWS}
PLAN["vit-200"] = (0, 1, 2)
PLAN["resnet18-200"] = (0, 1, 2)  # seed s teaches vit-200-deit-hard's seed s
BEST_ROW = "vit-200"  # the row whose seed 0 the chapter looks inside

# The rows of "Can a ViT beat the CNN that taught it?": one change each from vit-200. The
# distilled row learns from resnet18-200 of its own seed; the token-only and mean-pooled rows
# are its controls (why: that chapter). Three seeds resolve only large gaps.
DEIT_ROWS: dict[str, dict[str, object]] = {
    "vit-200-deit-hard": {**ROWS["vit-200"], "distilled": True, "teacher": "resnet18-200",
                          "distillation": "hard"},
    "vit-200-token": {**ROWS["vit-200"], "distilled": True, "distillation": "none"},  # no teacher
    "vit-200-mean": {**ROWS["vit-200"], "class_token": False, "pool": "mean"},
    "vit-200-conv-stem": {**ROWS["vit-200"], "stem": "conv", "blocks_removed": 1},
}  # fmt: skip
DEIT_PLAN: dict[str, tuple[int, ...]] = {name: (0, 1, 2) for name in DEIT_ROWS}
# Recorded first: the data-efficient chapter's answer on photos (seed 0 of each).
FIRST_ROWS = ("resnet18-200", "vit-200", "vit-200-deit-hard", "vit-200-token", "vit-200-mean",
              "vit-200-conv-stem")

# Measured alone on an NVIDIA H100 80GB HBM3, bf16, 45,000 training photos, at f5734a8: one epoch
# of `fit` with crop and flip and no validation (benchmarks/gpu.py), and the recorded vit-mix-200
# seed 0 over its last ~100 epochs (RandAugment, MixUp/CutMix, stochastic depth, validation).
# Projections use the slower, so they bound the lighter rows; ResNet-18 was never timed alone.
# The compiled figure: fit(compile=True) on an NVIDIA H100 80GB, torch 2.11.0+cu130, at 38c1719,
# batch 256, bf16, 45,000 random photos, crop and flip, no validation, the median of 5 rounds
# interleaved with the other loops of benchmarks/gpu.py (issue 35; the first call compiled 51 s).
H100_SECONDS_PER_EPOCH = {"fit, crop and flip": 2.15, "plain loop": 2.00,
                          "vit-mix-200, all of it": (3.1, 3.6),
                          "fit(compile=True), crop and flip": 1.455}  # fmt: skip

# The photo ViT: 32 px, 4 x 4 patches (64 tokens and the class token), D = 256, 6 blocks.
PHOTO_VIT = ViTConfig(img_size=32, patch_size=4, num_classes=10, embed_dim=256, depth=6,
                      num_heads=8, mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
TINY_VIT = ViTConfig(img_size=32, patch_size=8, num_classes=10, embed_dim=32, depth=2,
                     num_heads=2, mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
# Every row a run can name: the next ladder, the recorded one, the data-efficient rows, the CPU's.
ALL_ROWS: dict[str, dict[str, object]] = {**ROWS, **RECORDED_ROWS, **DEIT_ROWS, **cpu_photos.ROWS}


def build(row: dict[str, object], n_cls: int, tiny: bool = False) -> nn.Module:
    """A row's model, untrained, normalising the photos first. See chapter: Real photos."""
    if row["model"] == "resnet18":
        body: nn.Module = CifarResNet18(n_cls)
    else:
        base = TINY_VIT if tiny else ViTConfig(**row["vit"]) if "vit" in row else PHOTO_VIT
        config = dataclasses.replace(
            base, num_classes=n_cls, drop_path_rate=row.get("drop_path_rate", 0.0),
            distilled=row.get("distilled", False), stem=row.get("stem", "patch"),
            depth=base.depth - row.get("blocks_removed", 0),
            class_token=row.get("class_token", base.class_token), pool=row.get("pool", base.pool),
        )  # fmt: skip
        body = VisionTransformer(config)
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), body)


def augmentation(row: dict[str, object]) -> augment.Augment:
    """A row's augmentation, drawn per photo on the training device. See chapter: Real photos."""
    steps = [augment.random_crop_flip(padding=4)]
    if row["augment"] == "crop-flip+randaugment":
        # The recorded rows: bin 9 of torchvision's 31 rotates by up to 9 degrees, about m3 on
        # timm's 0-10 scale, a third of DeiT's m9 (27 degrees).
        steps.append(augment.rand_augment(2, 9))
    if row.get("rand_augment"):  # the next ladder: DeiT's m9, mstd 0.5, on timm's scale
        steps.append(augment.rand_augment(**row["rand_augment"]))
    if row.get("random_erasing"):  # last, as timm erases; fit mixes (MixUp/CutMix) after it
        steps.append(augment.random_erasing(p=row["random_erasing"]))
    return augment.compose(*steps)


def recipe(name: str, batch_size: int | None = None) -> dict[str, object]:
    """What a run of row ``name`` records as its recipe (the recorded rows keep their layout).

    Example:
        >>> recipe("vit-mix-200", 128)["batch_size"], "label_smoothing" in recipe("vit-mix-200")
        (128, False)

    See chapter: Real photos.
    """
    row = ALL_ROWS[name]
    if name in RECORDED_ROWS:
        base = {k: v for k, v in BASE.items() if not (row.get("mix") and k == "label_smoothing")}
        row = {**base, **row}
    return {**{k: v for k, v in row.items() if k != "epochs"},
            **({"batch_size": batch_size} if batch_size else {})}  # fmt: skip


def run_parts(row: str, n_cls: int, *, seed: int, epochs: int, batch_size: int | None = None,
              teacher: nn.Module | None = None, tiny: bool = False,
              ) -> tuple[nn.Module, Recipe, augment.Augment, augment.Mix | None, nn.Module | None]:
    """What ``fit`` trains one run of ``row`` with: ``(model, recipe, augment, mix, criterion)``.

    The model is built after ``torch.manual_seed(seed)``. Label smoothing moves from the recipe
    into MixUp/CutMix or the distillation criterion when the row has one. ``teacher``: the
    trained model of the row's ``"teacher"`` row; ``tiny``: :data:`TINY_VIT` (smoke runs).
    ValueError for an unknown row, or a teacher missing or given where the row has none.

    Example:
        >>> model, recipe, _, mix, loss = run_parts("vit-50-mix", 10, seed=1, epochs=2, tiny=True)
        >>> recipe.label_smoothing, mix is not None, loss is None
        (0.0, True, True)

    See chapter: Real photos.
    """
    if row not in ALL_ROWS:
        raise ValueError(f"{row!r} is not a row of the ladder; choose from {list(ALL_ROWS)}.")
    fields = ALL_ROWS[row]
    if ("teacher" in fields) != (teacher is not None):
        raise ValueError(
            f"{row} learns from {fields['teacher']}: pass its trained model as teacher=."
            if "teacher" in fields else f"{row} has no teacher; leave teacher=None."
        )
    torch.manual_seed(seed)
    model = build(fields, n_cls, tiny)
    own = {k: fields[k] for k in ("weight_decay_rule", "repeated_augmentation", "precision")
           if k in fields}  # fmt: skip
    run_recipe = Recipe(epochs=epochs, seed=seed,
                        **{k: fields.get(k, v) for k, v in BASE.items()}, **own)  # fmt: skip
    if batch_size:
        run_recipe = run_recipe.replace(batch_size=batch_size)
    smoothing, mix, criterion = run_recipe.label_smoothing, None, None
    if fields.get("mix"):
        mix = augment.mixup_cutmix(n_cls, label_smoothing=smoothing)
        smoothing = 0.0  # carried by the soft targets: the criterion adds none
    if "teacher" in fields or fields.get("distilled"):  # no teacher: both heads on the labels
        criterion = DistillationLoss(teacher, fields["distillation"], label_smoothing=smoothing)
    if mix is not None or criterion is not None:
        run_recipe = run_recipe.replace(label_smoothing=0.0)
    return model, run_recipe, augmentation(fields), mix, criterion


def changes(
    row: str, above: str, rows: dict[str, dict[str, object]] | None = None
) -> dict[str, tuple[object, object]]:
    """What ``row`` changes from ``above`` in ``rows`` (:data:`ROWS`, or :func:`recipes` of a
    results file): ``{field: (before, after)}``, ``None`` for absent.

    Example:
        >>> changes("vit-200", "vit-50-repeated")
        {'epochs': (50, 200)}

    See chapter: Real photos.
    """
    rows = ROWS if rows is None else rows
    for name in (row, above):
        if name not in rows:
            raise ValueError(f"{name!r} is not a row of the ladder; choose from {list(rows)}.")
    before, after = rows[above], rows[row]
    fields = dict.fromkeys([*before, *after])
    return {k: (before.get(k), after.get(k)) for k in fields if before.get(k) != after.get(k)}


def recipes(results: dict) -> dict[str, dict[str, object]]:
    """Each recorded row's epochs and recipe, as the file records them: ``{row: {...}}``.

    Example:
        >>> recipes(load_results())["vit-regularised-100"]["drop_path_rate"]
        0.1

    See chapter: Real photos.
    """
    found: dict[str, dict[str, object]] = {}
    for run in results["runs"]:
        found.setdefault(run["row"], {"epochs": run["epochs"], **run["recipe"]})
    return found


_FIELDS = {"mix": "MixUp/CutMix", "drop_path_rate": "stochastic depth",
           "label_smoothing": "label smoothing in the loss", "weight_decay_rule": "decayed weights",
           "rand_augment": "RandAugment", "random_erasing": "random erasing",
           "repeated_augmentation": "repeated augmentation"}  # fmt: skip


def describe_change(change: dict[str, tuple[object, object]]) -> str:
    """A change of :func:`changes` in words, e.g. ``"stochastic depth: none → 0.1"``.

    Example:
        >>> describe_change(changes("vit-50-mix", "vit-50-randaugment-m9"))
        'MixUp/CutMix: off → on'

    See chapter: Real photos.
    """

    def show(value: object) -> str:
        if isinstance(value, dict):  # a RandAugment policy
            return (f"{value['num_ops']} ops, m{value['magnitude']} ± {value['magnitude_std']} "
                    f"({value['scale']} scale)")  # fmt: skip
        if value is None or isinstance(value, bool):
            return {None: "none", True: "on", False: "off"}[value]
        return str(value).replace("+", " + ")  # "crop-flip + randaugment" wraps

    return "; ".join(f"{_FIELDS.get(k, k)}: {show(a)} → {show(b)}" for k, (a, b) in change.items())


def projected_minutes(row: str) -> float | None:
    """H100-minutes of all of a row's seeds at the slowest measured epoch; ``None`` if untimed.

    Example:
        >>> projected_minutes("vit-200"), projected_minutes("resnet18-200")
        (36.0, None)

    See chapter: Real photos.
    """
    if ROWS[row]["model"] != "vit":
        return None
    slowest = max(H100_SECONDS_PER_EPOCH["vit-mix-200, all of it"])
    return ROWS[row]["epochs"] * len(PLAN[row]) * slowest / 60


def planned_recipe(row: str) -> dict[str, object]:
    """What a run of the next recording records as its recipe: the row's fields but epochs.

    Example:
        >>> planned_recipe("vit-200-conv-stem")["stem"], "epochs" in planned_recipe("vit-50")
        ('conv', False)

    See chapter: Real photos.
    """
    rows = {**ROWS, **DEIT_ROWS}
    if row not in rows:
        raise ValueError(f"{row!r} is not a row of the next recording; choose from {list(rows)}.")
    return {k: v for k, v in rows[row].items() if k != "epochs"}


def recording_order(
    seeds: dict[str, tuple[int, ...]] | None = None,
) -> list[tuple[str, int]]:
    """The next recording's runs ``(row, seed)`` of ``seeds`` (default: :data:`PLAN` and
    ``DEIT_PLAN``), in order: seed 0 of :data:`FIRST_ROWS`, seed 0 of the other rows, then
    the later seeds; a teacher's run comes before its student's.

    Example:
        >>> recording_order()[5:7]
        [('vit-200-conv-stem', 0), ('vit-50', 0)]

    See chapter: Real photos.
    """
    seeds = {**PLAN, **DEIT_PLAN} if seeds is None else seeds
    rows = [*FIRST_ROWS, *(name for name in ROWS if name not in FIRST_ROWS)]
    unknown = sorted(set(seeds) - set(rows))
    if unknown:
        raise ValueError(f"{unknown} are not rows of the next recording; choose from {rows}.")
    order = [(row, 0) for row in rows if 0 in seeds.get(row, ())]
    later = sorted({seed for row in rows for seed in seeds.get(row, ()) if seed != 0})
    order += [(row, seed) for seed in later for row in rows if seed in seeds.get(row, ())]
    return order


def plan_cost(
    seconds_per_epoch: float = H100_SECONDS_PER_EPOCH["fit(compile=True), crop and flip"],
    order: list[tuple[str, int]] | None = None,
) -> list[tuple[str, int, int, float | None]]:
    """``[(row, seed, epochs, minutes)]`` in recording order at ``seconds_per_epoch`` of the
    photo ViT (a lower bound: the default has no augmentation beyond crop and flip); minutes
    are ``None`` for models never timed (ResNet-18, a distilled student, the conv stem).

    Example:
        >>> plan_cost()[1]
        ('vit-200', 0, 200, 4.85)

    See chapter: Real photos.
    """
    rows = {**ROWS, **DEIT_ROWS}
    timed = {name for name, row in ROWS.items() if row["model"] == "vit"}
    return [(row, seed, rows[row]["epochs"],
             rows[row]["epochs"] * seconds_per_epoch / 60 if row in timed else None)
            for row, seed in (recording_order() if order is None else order)]  # fmt: skip


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """The recorded runs of ``scripts/train_cifar10.py``: ``{"runs": [...], "provenance": [...]}``.

    FileNotFoundError for no file; ``vitbook._files.ResultsFileError`` for a damaged one, or one
    without runs or provenance.

    See chapter: Real photos.
    """
    remedy = ("record the ladder on a GPU with `python scripts/train_cifar10.py --data "
              "cifar10.npz` (or --download).")  # fmt: skip
    results = _files.read_json(path, remedy=remedy)
    if not results.get("runs") or not results.get("provenance"):
        raise _files.ResultsFileError(f"{path} holds no runs or no provenance; {remedy}")
    records.check_together([(str(path), results)], allow_mixed=True)  # layout, no repeated run
    return results


def summarize(results: dict) -> dict[str, dict[str, float | int | None]]:
    """Per row: ``{"n", "val_mean", "val_std", "test_mean", "test_std", "test_min", "test_max",
    "wall_clock_minutes"}``; sample standard deviations (n - 1), ``None`` for one seed.

    Raises:
        TypeError / ValueError: a run without row, seed or accuracies, a non-integer seed, an
            accuracy outside [0, 1] or NaN, a (row, seed) twice; each named with the run.

    Example:
        >>> runs = [{"row": "a", "seed": s, "final_val_accuracy": v, "test_accuracy": t,
        ...          "minutes": 2.0} for s, v, t in ((0, 0.8, 0.79), (1, 0.82, 0.81))]
        >>> row = summarize({"runs": runs})["a"]
        >>> row["n"], round(row["test_mean"], 4), round(row["test_std"], 4)
        (2, 0.8, 0.0141)

    See chapter: Real photos.
    """
    records.check_summable(results["runs"])
    table: dict[str, dict[str, float | int | None]] = {}
    for name in dict.fromkeys(run["row"] for run in results["runs"]):
        runs = [run for run in results["runs"] if run["row"] == name]
        val = [run["final_val_accuracy"] for run in runs]
        test = [run["test_accuracy"] for run in runs]
        minutes = [run.get("wall_clock_minutes", run.get("minutes")) for run in runs]
        table[name] = {
            "n": len(runs),
            "val_mean": statistics.fmean(val),
            "val_std": statistics.stdev(val) if len(runs) > 1 else None,
            "test_mean": statistics.fmean(test),
            "test_std": statistics.stdev(test) if len(runs) > 1 else None,
            "test_min": min(test),
            "test_max": max(test),
            "wall_clock_minutes": statistics.fmean(minutes) if None not in minutes else None,
        }
    return table


def describe(row: dict, split: str = "test", digits: int = 4, *, percent: bool = False) -> str:
    """A :func:`summarize` row's ``split`` accuracy as text: ``"0.8737 ± 0.0047"``; ``percent``
    keeps the precision of ``digits`` decimals of a fraction.

    Example:
        >>> describe({"test_mean": 0.8315, "test_std": None})
        '0.8315 (one seed)'
        >>> describe({"test_mean": 0.87366, "test_std": 0.00467}, percent=True)
        '87.37 ± 0.47'

    See chapter: Real photos.
    """
    mean, std = row[f"{split}_mean"], row[f"{split}_std"]
    scale, digits = (100, digits - 2) if percent else (1, digits)
    if std is None:
        return f"{scale * mean:.{digits}f} (one seed)"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def group_provenance(results: dict) -> list[dict[str, object]]:
    """A results file's provenance entries grouped where only command, date and seeds differ:
    the shared fields, ``"entries"``, ``"seeds"``, ``"dates"`` (first, last), ``"commands"``.

    See chapter: Real photos.
    """
    groups: dict[str, dict[str, object]] = {}
    for entry in results["provenance"]:
        shared = {k: v for k, v in entry.items() if k not in ("command", "date", "seeds")}
        key = repr(sorted(shared.items(), key=lambda item: item[0]))
        group = groups.setdefault(key, {**shared, "entries": 0, "seeds": set(), "dates": [],
                                        "commands": []})  # fmt: skip
        group["entries"] += 1
        group["seeds"] |= set(entry.get("seeds", []))
        group["dates"].append(entry.get("date", ""))
        group["commands"].append(entry.get("command", ""))
    for group in groups.values():
        group["seeds"] = sorted(group["seeds"])
        group["dates"] = (min(group["dates"]), max(group["dates"]))
    return list(groups.values())


def recording_progress(
    results: dict | None,
    order: list[tuple[str, int]] | None = None,
    *,
    source: str = "",
) -> Progress:
    """The :class:`vitbook.studies.progress.Progress` of ``order`` (default:
    :func:`recording_order`) in ``results`` (``None``: nothing recorded yet).

    Raises:
        vitbook._files.ResultsFileError: no list of runs, or a run without row, seed, epochs
            or recipe.
        ValueError: a planned run recorded twice, or with other epochs or recipe than planned.

    Example:
        >>> progress = recording_progress(None)
        >>> progress.complete, progress.next, progress.label("vit-200")
        (False, ('resnet18-200', 0), 'vit-200 (not recorded)')

    See chapter: Real photos.
    """
    order = recording_order() if order is None else list(order)
    rows = {**ROWS, **DEIT_ROWS}
    planned = {row: (rows[row]["epochs"], planned_recipe(row)) for row, _ in order}
    return progress_of(results, order, planned, source=source)


def load_progress(path: str | Path = NEXT_RESULTS_PATH) -> Progress:
    """:func:`recording_progress` of the file at ``path`` (none: nothing recorded); raises as it.

    Example:
        >>> load_progress("no-such-file.json").source
        'nothing recorded yet: no file at no-such-file.json'

    See chapter: Real photos.
    """
    path = Path(path)
    if not path.exists():
        return recording_progress(None, source=f"nothing recorded yet: no file at {path}")
    remedy = ("record the plan with `python scripts/train_cifar10.py --data cifar10.npz "
              "--state DIR --minutes M`.")  # fmt: skip
    return recording_progress(_files.read_json(path, remedy=remedy), source=str(path))
