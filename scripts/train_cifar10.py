#!/usr/bin/env python3
"""Train the recipe ladder of "Real photos" on CIFAR-10 and record the results.

    python scripts/train_cifar10.py --data cifar10.npz      # the ladder, each row's planned seeds
    python scripts/train_cifar10.py --data cifar10.npz --rows vit-50 vit-200 --seeds 0
    torchrun --nproc_per_node=4 scripts/train_cifar10.py --data cifar10.npz   # 4 GPUs
    python scripts/train_cifar10.py --standin --tiny --epochs 1 --rows vit-50 --seeds 0  # smoke
    python scripts/train_cifar10.py --merge runs/a.json runs/b.json --out runs/ladder.json
    python scripts/train_cifar10.py --data cifar10.npz --rows resnet18-200 vit-200-deit-hard \
        vit-200-conv-stem --save-dir runs/weights        # the chapter on data-efficient ViTs
    python scripts/train_cifar10.py --data cifar10.npz --state runs/state --minutes 10  # a session
    python scripts/train_cifar10.py --plan-only --minutes 10    # the plan, priced, in budgets

The rows are ``vitbook.studies.ladder.ROWS`` (each changes one thing from the row above; seeds from
``vitbook.studies.ladder.PLAN``), to reproduce the shipped recording ``RECORDED_ROWS``, and the rows
of "Can a ViT beat the CNN that taught it?" (``DEIT_ROWS``): the ladder's best ViT recipe and budget
(``vit-200``) distilled from the ladder's ResNet-18 (``resnet18-200``, same augmentation and
budget) through DeiT's distillation token and hard targets; its two controls, the token with no
teacher (both heads on the labels) and the ViT read out by mean pooling; and the same ViT with a
convolutional stem and one encoder block fewer. A distilled row with a teacher needs its
teacher's trained weights for each seed: trained earlier in the same command (the teacher's row
runs first), or found in ``--teacher-dir`` as ``<teacher row>-seed<seed>.safetensors``, the file
``--save-dir`` writes; the script checks that it is there before anything trains. Every row
trains with ``vitbook.train.fit`` (mixed precision, data and augmentation on the GPU), choosing
nothing on the test set: each run records the validation accuracy after every epoch and reads
the test set once, at the end.

Nothing recorded is overwritten. By default the results go to a new file, ``runs/cifar10-<UTC
time>.json``; ``--out FILE`` names a file, and an existing one gets this run's runs appended only
if they belong with its runs (same data checksum, device, epochs and recipe per row, no row and
seed twice). Files in ``vitbook/assets`` (the shipped recording) are written only with
``--write-assets``. Every output path is checked before anything trains, and every write is
atomic. The file holds every run and one provenance entry per process (the GPU, torch and CUDA
versions, the data's source and checksum, the seeds and the command); each run names its entry
(``process``), its wall-clock minutes (under a shared GPU, longer than alone) and its peak GPU
memory. For seed 0 of the best row (``--inside``) it also records what the chapter shows of the
trained model: attention rollout from the class token on eight test photos and the mean
attention distance of every head. ``--save-dir`` also writes each run's trained weights
(safetensors) and that read-out as a file of its own.

Sessions of any length (``--state DIR``, ``--minutes M``): the next recording (the ladder and the
data-efficient rows, in ``vitbook.studies.ladder.recording_order``: seed 0 of ``resnet18-200``,
``vit-200``, ``vit-200-deit-hard`` and ``vit-200-conv-stem`` first) is recorded into a state
folder (``vitbook.studies.session``), a session at a time. Every run saves its whole training state
there every ``--save-every`` minutes, when SIGTERM or SIGINT ask it to stop, and before the budget
of ``M`` minutes ends; the next session, on the same machine or a bare one with the folder and the
data file copied over, continues each unfinished run where it stopped (on the CPU the finished run
is bit for bit the one an uninterrupted process makes). Runs share the GPU side by side
(``--processes``: how many is measured at the start of each session and printed); a finished run
joins ``DIR/results.json`` with the provenance of every session. A folder made with other data,
code, torch, precision or recipe is refused, and so is one with results but no ``plan.json`` or
one that holds what a state folder does not; a run that failed is named in every report with
the file to delete to train it again. On a GPU the step is compiled (``--no-compile`` to train
eagerly); the compiler's caches live in the folder too.

Under ``torchrun`` each process takes its share of every global batch inside PyTorch's
DistributedDataParallel (see ``fit``); only the first process writes. Each worker waits for the
others (to start, and at every step's gradient average) at most ``--dist-timeout`` seconds (5
minutes by default); a worker that stops or does not answer in that time stops the others with a
message that says what they waited for, instead of a hang.
On the CPU, ``torchrun --nproc_per_node=2`` runs with the gloo backend, which is how the tests
check that two processes compute the same losses as one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig, _files
from vitbook.baselines import CifarResNet18
from vitbook.data import augment
from vitbook.data.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DataUnavailableError,
    ImageSplits,
    Normalize,
    cifar10_standin,
    load_cifar10,
)
from vitbook.studies import cpu_photos, records
from vitbook.studies import provenance as provenance_of
from vitbook.studies.budgets import Concurrency, budgets_left
from vitbook.studies.ladder import (
    BASE,
    BEST_ROW,
    DEIT_PLAN,
    DEIT_ROWS,
    H100_SECONDS_PER_EPOCH,
    PLAN,
    RECORDED_ROWS,
    ROWS,
    plan_cost,
    readout,
    recording_order,
)
from vitbook.studies.session import (
    Checkpointer,
    OutOfTime,
    StateFolder,
    StateMismatchError,
    StopRequest,
    code_version,
    hard_deadline,
)
from vitbook.train import Recipe, evaluate, fit, resolve_precision
from vitbook.train import resume as training_state
from vitbook.train.distill import DistillationLoss
from vitbook.train.step import DivergenceError

STARTED = time.monotonic()  # a session's budget counts from here (after the imports)
# The photo ViT: 32 px, 4 x 4 patches (64 tokens and the class token), D = 256, 6 blocks.
VIT = ViTConfig(img_size=32, patch_size=4, num_classes=10, embed_dim=256, depth=6, num_heads=8,
                mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
TINY = ViTConfig(img_size=32, patch_size=8, num_classes=10, embed_dim=32, depth=2, num_heads=2,
                 mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
ALL_ROWS = {**ROWS, **RECORDED_ROWS, **DEIT_ROWS, **cpu_photos.ROWS}
NEXT = {**ROWS, **DEIT_ROWS}  # the rows a state folder records by default (--plan next)
# What a state folder can record: --plan next (the GPU ladder) or --plan cpu (the CPU run).
PLANS = {"next": (NEXT, {**PLAN, **DEIT_PLAN}), "cpu": (cpu_photos.ROWS, cpu_photos.PLAN)}
INSIDE_PHOTOS = 8  # test photos whose rollout maps the chapter shows
DISTANCE_PHOTOS = 512  # test photos over which mean attention distance is averaged
TIMING_NOTE = ("wall_clock_minutes: each run's wall-clock time, which includes validation and "
               "is longer than a run alone when runs share the GPU")  # fmt: skip
SESSION_NOTE = ("wall_clock_minutes: the sum of the run's epochs over the sessions that trained "
                "it (validation, and compiling at each session's first epoch, included), longer "
                "than a run alone when runs share the GPU")  # fmt: skip
DIST_TIMEOUT_S = 300  # a torchrun worker waits this long for the others, then stops with a message
EXIT_MARGIN_S = 10.0  # a session's runs stop this much before its budget (at most 5% of it)
MAX_MINUTES = 7 * 24 * 60  # the longest budget or save interval taken: a week
# fit(compile=True)'s epoch of the photo ViT on an H100, as measured (crop and flip, batch 256)
H100_COMPILED = H100_SECONDS_PER_EPOCH["fit(compile=True), crop and flip"]


def augmentation(row: dict[str, object]):
    """The row's augmentation, drawn per photo on the training device."""
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


def recipe(name: str, batch_size: int | None) -> dict[str, object]:
    """What a run records as its recipe (the recorded rows keep the layout they were written in)."""
    row = ALL_ROWS[name]
    if name in RECORDED_ROWS:
        base = {k: v for k, v in BASE.items() if not (row.get("mix") and k == "label_smoothing")}
        row = {**base, **row}
    return {**{k: v for k, v in row.items() if k != "epochs"},
            **({"batch_size": batch_size} if batch_size else {})}  # fmt: skip


def build(row: dict[str, object], n_cls: int, tiny: bool) -> nn.Module:
    """The row's model, with the photos' normalisation as its first layer."""
    if row["model"] == "resnet18":
        body: nn.Module = CifarResNet18(n_cls)
    else:
        base = TINY if tiny else ViTConfig(**row["vit"]) if "vit" in row else VIT
        config = dataclasses.replace(
            base, num_classes=n_cls, drop_path_rate=row.get("drop_path_rate", 0.0),
            distilled=row.get("distilled", False), stem=row.get("stem", "patch"),
            depth=base.depth - row.get("blocks_removed", 0),
            class_token=row.get("class_token", base.class_token), pool=row.get("pool", base.pool),
        )  # fmt: skip
        body = VisionTransformer(config)
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), body)


def world(timeout_s: int) -> tuple[int, int, int]:
    """Set up torch.distributed under torchrun; return (rank, local rank, processes)."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if os.environ["RANK"] == "0":
        print(f"torchrun: each of {os.environ.get('WORLD_SIZE')} workers waits at most "
              f"{timeout_s} s for the others, to start and at every step's gradient average "
              "(--dist-timeout)", flush=True)  # fmt: skip
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
    return torch.distributed.get_rank(), local, torch.distributed.get_world_size()


def inside(model: nn.Sequential, splits: ImageSplits, device: torch.device) -> dict:
    """What the chapter shows of a trained ViT: rollout maps and mean attention distances."""
    out = readout(model, splits.test[0][:DISTANCE_PHOTOS].to(device), maps=INSIDE_PHOTOS)
    return {
        "photos": (splits.test[0][:INSIDE_PHOTOS] * 255).round().to(torch.uint8).tolist(),
        "labels": splits.test[1][:INSIDE_PHOTOS].tolist(),
        "rollout_maps": out["rollout_maps"].tolist(),
        "mean_attention_distance": out["mean_attention_distance"].tolist(),
        "distance_photos": min(DISTANCE_PHOTOS, len(splits.test[1])),
    }


def epochs_of(name: str, args) -> int:
    return args.epochs or ALL_ROWS[name]["epochs"]


def teacher_path(args, name: str, seed: int) -> Path:
    """Where a distilled row finds its teacher of ``seed`` when it was not trained in this run."""
    return args.teacher_dir / f"{ALL_ROWS[name]['teacher']}-seed{seed}.safetensors"


def load_teacher(args, name: str, seed: int, n_cls: int, device: torch.device) -> nn.Module:
    """A teacher row's saved weights (written by --save-dir), behind the photos' normalisation.

    Raises:
        ValueError: the file is damaged, or holds another model or another run, naming the
            file and what to do (never safetensors' own error or a list of hundreds of keys).
    """
    from vitbook.pretrained import _safetensors

    row = ALL_ROWS[name]["teacher"]
    path = teacher_path(args, name, seed)
    fix = (f"it should hold {row} seed {seed}'s trained weights as --save-dir writes them. Train "
           f"the teacher again (--rows {row} --seeds {seed} --save-dir DIR) and point "
           "--teacher-dir at DIR, or replace the file with a good copy")  # fmt: skip
    if getattr(args, "state", None) is not None:  # the state folder keeps its teachers itself
        fix = (f"it should hold {row} seed {seed}'s trained weights, as a session keeps them in "
               f"{path.parent}. Replace it with a good copy (from a copy of the state folder); "
               f"without one, record {row} seed {seed} in a new state folder (--state NEW --rows "
               f"{row} --seeds {seed}) and copy its weights/{path.name} here")  # fmt: skip
    teacher = build(ALL_ROWS[row], n_cls, args.tiny)
    try:
        metadata, _ = _safetensors.read_header(path)
        tensors = _safetensors.load_tensors(path)
    except ValueError as error:
        reason = error.__cause__  # safetensors' own words; none for NaN weights
        why = (f"cannot be read ({reason}): it is damaged, cut short or not safetensors"
               if reason is not None else str(error).split(";")[0].replace(f"{path} ", ""))
        raise ValueError(f"teacher file {path} for {name} seed {seed} {why}; {fix}.") from error
    said = (metadata.get("row"), metadata.get("seed"))
    if said != (None, None) and said != (row, str(seed)):
        raise ValueError(f"teacher file {path} holds {said[0]} seed {said[1]}, not {row} seed "
                         f"{seed}; {fix}.")  # fmt: skip
    expected = teacher[1].state_dict()
    missing = [k for k in expected if k not in tensors]
    extra = [k for k in tensors if k not in expected]
    shapes = [f"{k} {tuple(tensors[k].shape)} (needs {tuple(v.shape)})"
              for k, v in expected.items() if k in tensors and tensors[k].shape != v.shape]
    if missing or extra or shapes:
        def few(keys: list[str]) -> str:
            return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

        found = "; ".join(part for part in (
            f"{len(missing)} of {len(expected)} tensors missing ({few(missing)})" * bool(missing),
            f"{len(extra)} tensors too many ({few(extra)})" * bool(extra),
            f"other shapes: {few(shapes)}" * bool(shapes)) if part)  # fmt: skip
        raise ValueError(f"teacher file {path} does not hold a {row} of {n_cls} classes: "
                         f"{found}; {fix}.")  # fmt: skip
    teacher[1].load_state_dict(tensors)
    return teacher.to(device)


def run(
    name: str,
    seed: int,
    splits: ImageSplits,
    args,
    device: torch.device,
    rank: int,
    *,
    resume: dict | None = None,
    after_epoch=None,
) -> tuple:
    """Train one row with one seed; return (the run's record, the trained model).

    A distilled row takes its teacher from ``args.teachers`` (the models trained earlier in this
    command, by row and seed), or else from ``--teacher-dir``. With ``resume`` and
    ``after_epoch`` (a state folder), the run continues a saved state and may stop early: the
    record is then ``None``.
    """
    row = ALL_ROWS[name]
    torch.manual_seed(seed)
    model = build(row, splits.num_classes, args.tiny).to(device)
    # What decides the run's numbers, one value: the ladder's base recipe, the row's changes
    # (the next ladder's rows name a weight-decay rule and repeated augmentation), the seed.
    changes = {k: row[k] for k in ("weight_decay_rule", "repeated_augmentation", "precision")
               if k in row}  # fmt: skip
    run_recipe = Recipe(epochs=epochs_of(name, args), seed=seed,
                    **{k: row.get(k, v) for k, v in BASE.items()}, **changes)  # fmt: skip
    if args.batch_size:
        run_recipe = run_recipe.replace(batch_size=args.batch_size)
    smoothing, mix, criterion = run_recipe.label_smoothing, None, {}
    if row.get("mix"):  # MixUp/CutMix carry the label smoothing in their soft targets
        mix = augment.mixup_cutmix(splits.num_classes, label_smoothing=smoothing)
        smoothing = 0.0  # not twice: a criterion then smooths nothing more
    if "teacher" in row:  # DeiT: the teacher labels the batch the student sees, in its autocast
        teacher = getattr(args, "teachers", {}).get((row["teacher"], seed))
        if teacher is None:
            teacher = load_teacher(args, name, seed, splits.num_classes, device)
        criterion["criterion"] = DistillationLoss(
            teacher, row["distillation"], label_smoothing=smoothing
        )  # the criterion smooths the true labels
    elif row.get("distilled"):  # the token without a teacher: both heads on the labels
        criterion["criterion"] = DistillationLoss(
            None, row["distillation"], label_smoothing=smoothing
        )
    if mix is not None or criterion:
        run_recipe = run_recipe.replace(label_smoothing=0.0)  # smoothed where the targets are made
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    history = fit(model, splits.train, run_recipe, augment=augmentation(row), mix=mix,
                  eval_data=splits.val, progress=rank == 0, compile=compiles(args, device),
                  resume=resume, after_epoch=after_epoch, **criterion)  # fmt: skip
    seconds = time.perf_counter() - start
    if history.epochs < epochs_of(name, args):
        return None, model
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    result = {
        "row": name,
        "seed": seed,
        "epochs": epochs_of(name, args),
        "parameters": sum(p.numel() for p in model.parameters()),
        "precision": history.precision,
        "train_loss": history.train_loss,
        "val_accuracy": history.eval_accuracy,
        "epoch_seconds": history.seconds,  # each epoch's wall clock, its validation included
        "final_val_accuracy": history.eval_accuracy[-1],
        # The test set, read once, for the number the chapter reports.
        "test_accuracy": evaluate(model, splits.test, precision="auto"),
        "wall_clock_minutes": (seconds if resume is None else history.total_seconds) / 60,
        "peak_gpu_memory_mb": peak,
        "recipe": recipe(name, args.batch_size),
    }
    if name == args.inside and seed == 0 and row["model"] == "vit":
        result["inside"] = inside(model, splits, device)
    return result, model


def compiles(args, device: torch.device) -> bool:
    """Compile the step: by default on a GPU in one process (not under torchrun)."""
    if args.compile is not None:
        return args.compile
    return device.type == "cuda" and "RANK" not in os.environ


def provenance(args, splits: ImageSplits, processes: int, device: torch.device) -> dict:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "command": provenance_of.command(),
        "processes": processes,
        "date": provenance_of.now(),
        "git_commit": provenance_of.git("rev-parse", "HEAD", where=Path(__file__).parent),
        "device": gpu or f"CPU ({provenance_of.cpu_model_name()})",
        "gpu": gpu,
        "cpu": provenance_of.cpu_model_name(),
        "cpu_capability": provenance_of.cpu_capability(),
        "cpu_matrix_features": provenance_of.cpu_matrix_features(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "kernel_variables": {k: os.environ[k] for k in provenance_of.RECORDED_VARIABLES
                             if k in os.environ},
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "data": {"source": splits.source, "sha256": splits.sha256,
                 "train": len(splits.train[1]), "val": len(splits.val[1]),
                 "test": len(splits.test[1]), "note": args.data_note},  # fmt: skip
        "seeds": sorted({seed for _, seeds in args.plan for seed in seeds}),
        "base_recipe": BASE,
        "plan": args.plan_name,
        "vit": dataclasses.asdict(TINY if args.tiny else VIT) if args.plan_name == "next"
        else {row: dataclasses.asdict(TINY) if args.tiny else cpu_photos.ROWS[row]["vit"]
              for row in cpu_photos.ROWS},
        "timing": TIMING_NOTE,
    }


def save_weights(model: nn.Sequential, path: Path, result: dict) -> None:
    """The trained body's weights (Normalize has none) as safetensors, with the run's numbers."""
    notes = {"row": result["row"], "seed": str(result["seed"]),
             "test_accuracy": str(result["test_accuracy"]), "recipe": json.dumps(result["recipe"]),
             "normalize": json.dumps({"mean": CIFAR10_MEAN, "std": CIFAR10_STD})}  # fmt: skip
    body = model[1]
    if isinstance(body, VisionTransformer):  # vitbook's model file: load_model rebuilds it
        from vitbook.pretrained.checkpoints import save_model

        _files.write_with(path, lambda temporary: save_model(body, temporary, overwrite=True,
                                                              **notes))  # fmt: skip
    else:
        from safetensors.torch import save

        tensors = {k: v.detach().cpu().contiguous() for k, v in body.state_dict().items()}
        _files.write_bytes(path, save(tensors, metadata=notes))


def merge(args, parser: argparse.ArgumentParser) -> None:
    """Join result files into a new one: their runs, and every provenance entry."""
    out = args.out or _files.new_path(Path("runs"), "cifar10-merged")
    inputs = {path.expanduser().resolve() for path in args.merge}
    try:
        if out.exists() and out.expanduser().resolve() not in inputs:
            raise FileExistsError(
                f"{out} exists and is not among the files to merge, so its runs would be lost; "
                f"add it to --merge, or choose a new --out."
            )
        _files.check_output(out, write_assets=args.write_assets)
        parts = [(str(path), _files.read_json(path, remedy="pass a file written by this "
                                               "script.")) for path in args.merge]  # fmt: skip
        note = {"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "files": [str(path) for path in args.merge]}  # fmt: skip
        joined = records.join(parts, allow_mixed=args.allow_mixed, note=note)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: not merged: {error}\n")
    _files.write_json(out, joined)
    print(f"merged {len(joined['runs'])} runs into {out}")


def load_splits(args) -> ImageSplits:
    if args.standin:
        return cifar10_standin()
    try:
        return load_cifar10(args.data, download=args.download)
    except (DataUnavailableError, ValueError) as error:
        sys.exit(f"no CIFAR-10 here: {error}")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number; give 1 or more")
    return value


def minutes(text: str) -> float:
    value = float(text)
    if not 0 < value:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of minutes; e.g. 10")
    if value > MAX_MINUTES:  # inf too; a session's timer takes no more than that, either
        raise argparse.ArgumentTypeError(
            f"{text} is more than {MAX_MINUTES} minutes (a week), the most a session takes; "
            "give this session's minutes, e.g. 10"
        )
    return value


def folder_arg(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name is the current folder; name the state "
                                         "folder, e.g. runs/state")  # fmt: skip
    return Path(text)


def processes_arg(text: str) -> int | str:
    """A count, ``auto`` (measured on a GPU, one on a CPU) or ``auto:N`` (measured, at most N)."""
    if text == "auto" or (text.startswith("auto:") and positive(text[5:])):
        return text
    return positive(text)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="a .npz in torchvision's layout, or torchvision's folder")
    source.add_argument("--standin", action="store_true", help="the offline stand-in (smoke runs)")
    parser.add_argument("--download", action="store_true", help="let torchvision download")
    parser.add_argument("--data-note", default="", help="recorded with the data, e.g. its origin")
    parser.add_argument("--plan", choices=list(PLANS), default="next",
                        help="what a state folder (or --plan-only) records: the GPU ladder's "
                             "next recording (next) or the photo ViT on a CPU (cpu)")
    parser.add_argument("--rows", nargs="+", choices=list(ALL_ROWS),
                        help="the rows to train (default: the next ladder; with --state or "
                             "--plan-only, the whole next recording)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int,
                        help="every row's seeds (default: the ladder's plan; 0 1 2 for the "
                             "recorded rows)")  # fmt: skip
    parser.add_argument("--epochs", type=positive, help="override every row's epochs (smoke runs)")
    parser.add_argument("--batch-size", type=positive, help="override the global batch size")
    parser.add_argument("--tiny", action="store_true", help="a tiny ViT (smoke runs)")
    parser.add_argument("--inside", choices=list(ALL_ROWS),
                        help="the row whose seed 0 the chapter looks inside (default: "
                             f"{BEST_ROW}; with --plan cpu, {cpu_photos.ROW})")  # fmt: skip
    parser.add_argument("--out", type=Path, help="results file (default: a new file in runs/)")
    parser.add_argument("--write-assets", action="store_true",
                        help="allow --out (or --save-dir) in vitbook/assets, the shipped files")
    parser.add_argument("--save-dir", type=Path, help="write each run's weights and the read-out")
    parser.add_argument("--teacher-dir", type=Path,
                        help="where a distilled row finds its teacher's weights when the teacher "
                             "row is not in --rows (default runs/weights)")  # fmt: skip
    parser.add_argument("--merge", nargs="+", type=Path, help="join result files into --out")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="join (--merge) or append to --out other data, devices, epochs or "
                             "recipes")  # fmt: skip
    parser.add_argument("--dist-timeout", type=positive, default=DIST_TIMEOUT_S,
                        help="seconds a torchrun worker waits for the others to start and at "
                             "each step's gradient average before it stops with a message "
                             f"(default {DIST_TIMEOUT_S})")  # fmt: skip
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="compile the training step (default: on a GPU, not under torchrun)")
    record = parser.add_argument_group("sessions of any length")
    record.add_argument("--state", type=folder_arg,
                        help="record the plan into this state folder, continuing its unfinished "
                             "runs (results in STATE/results.json)")  # fmt: skip
    record.add_argument("--minutes", type=minutes,
                        help="this session's budget: save and stop before it ends")
    record.add_argument("--processes", type=processes_arg, default="auto",
                        help="runs side by side on the GPU: a number, auto (measured on a GPU, "
                             "up to 8; 1 on a CPU) or auto:N (measured, up to N)")  # fmt: skip
    record.add_argument("--save-every", type=minutes,
                        help="minutes between two saves of a run's state (default 1)")
    record.add_argument("--plan-only", action="store_true",
                        help="print the plan and its cost from the measured compiled epoch, "
                             "train nothing")  # fmt: skip
    for hidden in ("--worker", "--deadline", "--session", "--beside"):  # a session's processes
        record.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.plan_name = args.plan
    if args.inside is None:
        args.inside = cpu_photos.ROW if args.plan_name == "cpu" else BEST_ROW
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))} names a seed twice; one run "
                     "per seed (two would count as two seeds).")  # fmt: skip
    if args.merge:
        ignored = [flag for flag, given in (
            ("--state", args.state is not None), ("--minutes", args.minutes is not None),
            ("--save-every", args.save_every is not None), ("--plan-only", args.plan_only))
            if given]  # fmt: skip
        if ignored:
            flags = " and ".join(ignored)
            parser.error(f"--merge joins result files and trains nothing, so {flags} would be "
                         "ignored; merge in a command of its own (a state folder's "
                         "STATE/results.json merges as any results file).")  # fmt: skip
        return args, parser
    if args.minutes is not None and args.state is None and not args.plan_only:
        parser.error(f"--minutes {args.minutes:g} needs --state DIR: a budget stops the runs, "
                     "and only a state folder keeps what they did for the next session.")
    if args.save_every is not None and args.state is None:
        parser.error(f"--save-every {args.save_every:g} needs --state DIR: it says how often a "
                     "run's state is saved into a state folder, and without one nothing is.")
    if args.state is not None or args.plan_only:
        return state_plan(args, parser), parser
    args.rows = args.rows or list(ROWS)
    args.teacher_dir = args.teacher_dir or Path("runs/weights")
    if len(set(args.rows)) != len(args.rows):
        parser.error(f"--rows {' '.join(args.rows)} names a row twice; name each once.")
    # A teacher's row runs before the rows distilled from it.
    teachers = {ALL_ROWS[name]["teacher"] for name in args.rows if "teacher" in ALL_ROWS[name]}
    rows = sorted(args.rows, key=lambda name: name not in teachers)
    args.plan = [(name, tuple(args.seeds) if args.seeds is not None
                  else PLAN.get(name, (0, 1, 2))) for name in rows]  # fmt: skip
    check_teachers(args, parser, lambda name, seed: teacher_path(args, name, seed).is_file())
    return args, parser


def check_teachers(args, parser: argparse.ArgumentParser, saved) -> None:
    """Every distilled run has its teacher: trained earlier in the plan, or saved."""
    planned = {(name, seed) for name, seeds in args.plan for seed in seeds}
    for name, seeds in args.plan:
        teacher = ALL_ROWS[name].get("teacher")
        if teacher is None:
            continue
        absent = [seed for seed in seeds if (teacher, seed) not in planned
                  and not saved(name, seed)]  # fmt: skip
        if not absent:
            continue
        if args.state is None and args.plan_only:  # a plan is what a new state folder records
            parser.error(f"{name} learns from {teacher}, which is not in --rows for seeds "
                         f"{absent}; add {teacher} to --rows: a state folder trains a teacher "
                         "before the rows distilled from it, and the plan prices both.")
        missing = teacher_path(args, name, absent[0])
        if args.state is not None:
            parser.error(f"{name} learns from {teacher}, which is neither in --rows for seeds "
                         f"{absent} nor saved in the state folder ({missing}); add {teacher} to "
                         "--rows (the session trains it first and keeps its weights in "
                         f"{missing.parent}), or copy its trained weights there as "
                         f"{missing.name}.")  # fmt: skip
        parser.error(f"{name} learns from {teacher}, which is neither in --rows for seeds "
                     f"{absent} nor saved in --teacher-dir ({missing}); add {teacher} to "
                     "--rows (with --save-dir to keep it), or point --teacher-dir at its "
                     "weights.")  # fmt: skip


def state_plan(args, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The runs of a state folder (or of --plan-only), in recording order, checked."""
    if "RANK" in os.environ:
        parser.error("--state records side by side on one GPU, not under torchrun; run it "
                     "with python, or use torchrun without --state.")  # fmt: skip
    for flag, value in (("--out", args.out), ("--save-dir", args.save_dir),
                        ("--teacher-dir", args.teacher_dir)):  # fmt: skip
        if value is not None and args.state is not None:
            parser.error(f"{flag} with --state: the state folder keeps the results "
                         "(results.json), the weights and the teachers (weights/); leave "
                         f"{flag} out, and merge STATE/results.json where it should go.")
    plan_rows, plan_seeds = PLANS[args.plan_name]
    rows = args.rows or list(plan_rows)
    old = [name for name in rows if name not in plan_rows]
    if old:
        parser.error(f"{old} are not rows of --plan {args.plan_name}; a state folder of it "
                     f"records {list(plan_rows)}.")  # fmt: skip
    if len(set(rows)) != len(rows):
        parser.error(f"--rows {' '.join(rows)} names a row twice; name each once.")
    seeds = {name: tuple(args.seeds) if args.seeds is not None
             else plan_seeds[name] for name in rows}  # fmt: skip
    if args.plan_name == "next":
        args.order = recording_order(seeds)
    else:  # one row after another, seed by seed
        args.order = [(name, seed) for name in rows for seed in seeds[name]]
    args.rows = rows
    args.plan = [(name, seeds[name]) for name in dict.fromkeys(r for r, _ in args.order)]
    if args.state is not None:
        try:
            args.folder = StateFolder(args.state)
        except ValueError as error:  # a file, or a folder in vitbook/assets
            parser.error(str(error))
        args.teacher_dir = args.folder.weights
        check_teachers(args, parser, lambda name, seed: teacher_path(args, name, seed).is_file())
    else:
        check_teachers(args, parser, lambda name, seed: False)
    return args


def check_outputs(args, parser: argparse.ArgumentParser) -> dict | None:
    """Every path this run writes, checked before it trains; the --out file's runs, if any."""
    args.out = args.out or _files.new_path(Path("runs"), "cifar10")
    try:
        _files.check_output(args.out, write_assets=args.write_assets)
        existing = None
        if args.out.exists():
            existing = _files.read_json(args.out, remedy="choose another --out.")
            records.check_together([(str(args.out), existing)], allow_mixed=True)
            _files.check_finite(args.out, existing, remedy="choose another --out.")
        if args.save_dir is not None:
            for name, seeds in args.plan:
                for seed in seeds:
                    weights = args.save_dir / f"{name}-seed{seed}.safetensors"
                    _files.check_output(weights, write_assets=args.write_assets, exists_ok=False)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    return existing


# --- sessions of any length: a state folder, a budget, runs side by side ------------------------


def print_plan(args) -> None:
    """The plan in recording order, priced from fit(compile=True)'s measured H100 epoch."""
    if args.plan_name == "cpu":  # priced by the machine it runs on: its sessions measure it
        print(f"The CPU plan: {len(args.order)} run(s), each priced by the epochs a session "
              "measures on its own machine:")
        for row, seed in args.order:
            print(f"  {row} seed {seed}: {args.epochs or ALL_ROWS[row]['epochs']} epochs")
        return
    seconds = H100_COMPILED
    cost = plan_cost(seconds, args.order)
    print(f"The plan: {len(cost)} runs in recording order; minutes at {seconds} s an epoch, "
          "fit(compile=True) on an H100 (crop and flip, no validation; measured at 38c1719):")
    for row, seed, epochs, minutes in cost:
        epochs = args.epochs or epochs
        shown = "not measured" if minutes is None else f"{epochs * seconds / 60:.1f} min"
        print(f"  {row} seed {seed}: {epochs} epochs, {shown}")
    timed = [(args.epochs or e) * seconds / 60 for *_, e, m in cost if m is not None]
    untimed = sorted({row for row, _, _, m in cost if m is None})
    print(f"Timed runs: {len(timed)}, at least {sum(timed):.1f} H100-minutes (their RandAugment, "
          "mixing, erasing and validation add to the measured epoch); never timed on a GPU: "
          f"{len(cost) - len(timed)} runs of {', '.join(untimed) or 'no row'}.")  # fmt: skip
    budget = args.minutes or 10.0
    if not timed:
        print(f"In budgets of {budget:g} minutes: none of these runs has a measured epoch, so no "
              "count; a session of them measures its own (the report after it counts the "
              "budgets left).")  # fmt: skip
        return
    print(f"In budgets of {budget:g} minutes: at least {math.ceil(sum(timed) / budget)} for the "
          "timed runs alone, before each session's start and compiling (51 s cold, on the H100 "
          "above) and the untimed runs.")  # fmt: skip


def folder_identity(args, splits: ImageSplits, device: torch.device) -> dict:
    """What every run of a state folder shares (vitbook.studies.session.StateFolder.claim)."""
    return {
        "data_sha256": splits.sha256,
        "data_photos": [len(splits.train[1]), len(splits.val[1]), len(splits.test[1])],
        "code_version": code_version(__file__),
        "torch": str(torch.__version__),
        "precision": resolve_precision("auto", device),
        "compile": compiles(args, device),
        "model": "tiny" if args.tiny
        else "photo ViT" if args.plan_name == "next" else "CPU photo ViT",
        "epochs_override": args.epochs,
        "batch_size_override": args.batch_size,
    }


def planned_rows(args) -> dict[str, tuple[int, dict]]:
    """Row -> (epochs, recipe) of every row a state folder of this identity records."""
    rows = PLANS[args.plan_name][0]
    return {name: (epochs_of(name, args), recipe(name, args.batch_size)) for name in rows}


def teachers_of(args) -> set[tuple[str, int]]:
    """Runs whose weights a distilled run of the plan needs."""
    return {(ALL_ROWS[name]["teacher"], seed) for name, seed in args.order
            if "teacher" in ALL_ROWS[name]}  # fmt: skip


def record_run(row: str, seed: int, splits: ImageSplits, args, identity: dict,
               device: torch.device, session: int, deadline: float | None,
               stop: StopRequest) -> str:  # fmt: skip
    """Train one run of a state folder from where it stopped, until it ends or must stop.

    Returns what happened: ``"finished"`` (its record is in ``runs/ROW-seedS.done.json``),
    ``"stopped: why"`` (its state is saved) or ``"out of time"`` (the epoch in progress lost).
    """
    folder: StateFolder = args.folder
    state_path = folder.path(row, seed, ".pt")
    run_identity = {**identity, "row": row, "seed": seed, "epochs": epochs_of(row, args),
                    "recipe": recipe(row, args.batch_size)}  # fmt: skip
    resume = None
    if state_path.exists():
        resume = training_state.load_state(state_path)
        saved = resume.get("identity", {})
        differ = [f"{k}: {saved.get(k)!r} there, {run_identity.get(k)!r} here"
                  for k in sorted(set(saved) | set(run_identity))
                  if saved.get(k) != run_identity.get(k)]  # fmt: skip
        if differ:
            raise StateMismatchError(
                f"{state_path} holds another run ({'; '.join(differ)}). Nothing trained. Run "
                f"with what it was started with, or delete {state_path} to train {row} seed "
                f"{seed} again from its start.")  # fmt: skip
    progress = folder.progress(row, seed) or {"row": row, "seed": seed, "timing": []}
    earlier = [t for timing in progress["timing"] for t in timing["seconds"][1:]]
    timing = {"session": session, "side_by_side": args.side_by_side, "seconds": []}
    progress["timing"].append(timing)

    def on_epoch(checkpointer: Checkpointer) -> None:
        timing["seconds"].append(round(checkpointer.epoch_seconds[-1], 4))
        progress["epochs"] = checkpointer.epochs_done
        _files.write_json(folder.path(row, seed, ".json"), progress)

    checkpointer = Checkpointer(
        state_path, extra={"identity": run_identity}, deadline=deadline,
        save_every_s=60 * (args.save_every or 1.0), stop=stop, epochs=epochs_of(row, args),
        on_epoch=on_epoch, typical=max(earlier[-3:], default=None))  # fmt: skip
    try:
        with hard_deadline(deadline):
            result, model = run(row, seed, splits, args, device, 0, resume=resume,
                                after_epoch=checkpointer)  # fmt: skip
            if result is None:
                return f"stopped: {checkpointer.stopped}"
            result.update(process=session, sessions=sorted(
                {t["session"] for t in progress["timing"]}))  # fmt: skip
            if seed == 0 or (row, seed) in teachers_of(args):
                save_weights(model, folder.weights_path(row, seed), result)
                if "inside" in result:
                    _files.write_json(folder.weights / f"{row}-seed{seed}-readout.json",
                                       result["inside"])  # fmt: skip
            _files.write_json(folder.path(row, seed, ".done.json"), result)
    except OutOfTime:
        return "out of time"
    except DivergenceError as error:
        _files.write_json(folder.path(row, seed, ".failed.json"),
                           {"row": row, "seed": seed, "error": str(error)})  # fmt: skip
        return f"failed: {error}"
    return "finished"


def ready(args, key: tuple[str, int]) -> bool:
    """A run can start: a distilled run once its teacher's weights are in the folder."""
    teacher = ALL_ROWS[key[0]].get("teacher")
    return teacher is None or args.folder.weights_path(teacher, key[1]).is_file()


def work(args, parser: argparse.ArgumentParser) -> int:
    """One run of a session, in a process of its own (the session started it)."""
    row, seed = args.worker.rsplit(":", 1)
    args.side_by_side = int(args.beside)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    splits = load_splits(args)
    identity = folder_identity(args, splits, device)
    try:
        args.folder.claim(identity, planned=planned_rows(args))
    except (StateMismatchError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    with StopRequest() as stop:
        what = record_run(row, int(seed), splits, args, identity, device, int(args.session),
                          float(args.deadline) if args.deadline else None, stop)  # fmt: skip
    print(f"{row} seed {seed}: {what}", flush=True)
    return 0


def epoch_times(args, session: int) -> dict[str, float]:
    """Row -> the median epoch of this session's runs, their first epoch (set-up, compiling)
    left out where there are others."""
    found: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    for row, seed in args.order:
        progress = args.folder.progress(row, seed) or {"timing": []}
        for timing in progress["timing"]:
            if timing["session"] == session:
                found.setdefault(row, []).extend(timing["seconds"][1:])
                firsts.setdefault(row, []).extend(timing["seconds"][:1])
    return {row: statistics.median(found.get(row) or firsts[row]) for row in firsts}


class Worker:
    """A run trained by a process of its own, side by side with others."""

    def __init__(self, args, key: tuple[str, int], session: int, deadline: float | None,
                 beside: int) -> None:  # fmt: skip
        self.key, self.started = key, time.monotonic()
        command = [sys.executable, str(Path(__file__).resolve()), *args.argv, "--worker",
                   f"{key[0]}:{key[1]}", "--session", str(session), "--beside", str(beside)]
        if deadline is not None:
            command += ["--deadline", repr(deadline)]
        self.log = args.folder.runs / f"{key[0]}-seed{key[1]}.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def epochs(self, args, session: int) -> list[float]:
        progress = args.folder.progress(*self.key) or {"timing": []}
        return [s for t in progress["timing"] if t["session"] == session for s in t["seconds"]]


def side_by_side(args, todo: list, session: int, deadline: float | None,
                 stop: StopRequest, chooser: Concurrency) -> list[str]:  # fmt: skip
    """Run the plan's unfinished runs in processes of their own, as many at once as measured.

    The first run started is the reference of the measurement (see ``Concurrency``); when it
    ends before it was measured with one more run beside it, the count stays where it is.
    """
    running: list[Worker] = []
    notes: list[str] = []
    reference: Worker | None = None
    measuring: dict[int, int] = {}  # runs at once -> the reference's epochs when measuring began
    while True:
        for worker in [w for w in running if w.process.poll() is not None]:
            running.remove(worker)
            log = worker.log.read_text()
            lines = log.strip().splitlines()
            notes.append(lines[-1] if lines else f"{worker.key}: no output")
            if worker.process.returncode != 0:
                notes.append(f"{worker.key[0]} seed {worker.key[1]} stopped with an error "
                             f"(exit {worker.process.returncode}); see {worker.log}")  # fmt: skip
                if "out of memory" in log:  # too many at once: one fewer, the run goes back
                    chooser.target, chooser.settled = max(1, len(running)), True
                    todo.insert(0, worker.key)
            if worker is reference:
                chooser.settled = True
            args.folder.join_finished()
        left = None if deadline is None else deadline - time.monotonic()
        startable = [key for key in todo if ready(args, key)]
        if stop.requested or (left is not None and left <= 0):
            startable = []
        while len(running) < chooser.target and startable:
            key = startable.pop(0)
            todo.remove(key)
            running.append(Worker(args, key, session, deadline, chooser.target))
            reference = reference or running[0]
        if running and not chooser.settled:
            measure(args, running, session, chooser, measuring)
            while len(running) > chooser.target:  # measured: fewer at once do more
                newest = running.pop()
                newest.process.send_signal(signal.SIGTERM)  # it saves at its epoch's end
                newest.process.wait()
                todo.insert(0, newest.key)
            if chooser.settled:
                print(f"side by side: {chooser.describe()}", flush=True)
        if not running:
            return notes
        if stop.requested:
            for worker in running:
                worker.process.send_signal(signal.SIGTERM)
        if deadline is not None and time.monotonic() > deadline + 2 * EXIT_MARGIN_S:
            for worker in running:  # past its own hard deadline: its last save stands
                worker.process.kill()
        time.sleep(0.2)


def measure(args, running: list[Worker], session: int, chooser: Concurrency,
            measuring: dict[int, int]) -> None:  # fmt: skip
    """Feed the chooser the reference run's epoch time with len(running) runs training."""
    count = len(running)
    if count != chooser.target:
        return
    reference = running[0].epochs(args, session)
    others_train = all(len(w.epochs(args, session)) >= 1 for w in running[1:])
    if count not in measuring:
        if others_train and len(reference) >= 1:  # past compiling, every run in its epochs
            measuring[count] = len(reference)
        return
    since = reference[measuring[count]:]
    if len(since) >= 2:
        chooser.observe(count, statistics.median(since))


def record(args, parser: argparse.ArgumentParser) -> int:
    """One session of a state folder: the runs left, within --minutes, then a report."""
    start = args.started
    budget_s = 60 * args.minutes if args.minutes else None
    deadline = None if budget_s is None else start + budget_s - min(EXIT_MARGIN_S, budget_s / 20)
    folder: StateFolder = args.folder
    for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        os.environ.setdefault(name, str(folder.cache / sub))  # no recompiling next session
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    splits = load_splits(args)
    identity = folder_identity(args, splits, device)
    try:
        new = folder.claim(identity, planned=planned_rows(args))
        folder.join_finished()  # runs an earlier session finished but did not record
    except (StateMismatchError, OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    recorded, failed = folder.recorded(), folder.failed()
    todo = [key for key in args.order if key not in recorded and key not in failed]
    gpu = torch.cuda.is_available()
    if str(args.processes).startswith("auto"):
        most = int(args.processes[5:]) if args.processes != "auto" else 8 if gpu else 1
        chooser = Concurrency(most=most)
    else:
        chooser = Concurrency(most=args.processes)
        chooser.target, chooser.settled = args.processes, True
    args.side_by_side = chooser.target
    entry = {**provenance(args, splits, 1, device), "budget_minutes": args.minutes,
             "timing": SESSION_NOTE}  # fmt: skip
    session = folder.begin_session(entry)
    print(f"Session {session} of {folder.root} ({'new' if new else 'continued'}): "
          f"{sum(key in recorded for key in args.order)} of {len(args.order)} runs recorded, "
          f"{len(todo)} to go"
          + (f", {len(failed)} failed earlier" if failed else "")
          + (f"; {args.minutes:g} minutes" if args.minutes else ""), flush=True)  # fmt: skip
    notes = []
    try:
        with StopRequest() as stop:
            one_session(args, todo, splits, identity, device, session, deadline, stop, chooser,
                        notes)  # fmt: skip
        finished = folder.join_finished()
    except (StateMismatchError, training_state.TrainingStateError) as error:
        end_failed(folder, session, start, str(error))
        parser.exit(2, f"{parser.prog}: {error}\n")
    except BaseException as error:  # whatever stopped it, the session's entry says so
        end_failed(folder, session, start, f"{type(error).__name__}: {error}")
        raise
    used = (time.monotonic() - start) / 60
    folder.end_session(session, minutes=round(used, 3), side_by_side=chooser.target,
                       concurrency=concurrency(args, chooser), ended=now_iso())  # fmt: skip
    report(args, session, used, chooser, notes, finished)
    return 0


def end_failed(folder: StateFolder, session: int, start: float, error: str) -> None:
    """End the provenance entry of a session that stopped with an error, with the error."""
    try:
        folder.end_session(session, minutes=round((time.monotonic() - start) / 60, 3),
                           ended=now_iso(), error=error)  # fmt: skip
    except (OSError, ValueError) as failure:  # a full disk, say: the error above still stands
        print(f"could not end session {session} in {folder.results_path} ({failure})",
              file=sys.stderr)


def concurrency(args, chooser: Concurrency) -> str:
    """How many runs shared the device, and how that was chosen."""
    if not str(args.processes).startswith("auto"):
        return f"{chooser.target} at a time, as --processes asked"
    if args.processes == "auto" and not torch.cuda.is_available():
        return "1 at a time (on a CPU, runs side by side would share its cores)"
    return chooser.describe()


def one_session(args, todo, splits, identity, device, session, deadline, stop, chooser,
                notes) -> None:  # fmt: skip
    """The session's runs: one at a time in this process, or side by side in their own."""
    if not (chooser.settled and chooser.target == 1):
        notes += side_by_side(args, todo, session, deadline, stop, chooser)
        return
    for key in list(todo):  # one at a time, in this process
        left = None if deadline is None else deadline - time.monotonic()
        if stop.requested or (left is not None and left <= 0):
            return
        if not ready(args, key):
            continue
        try:
            what = record_run(*key, splits, args, identity, device, session, deadline, stop)
        except (StateMismatchError, training_state.TrainingStateError):
            raise  # the folder's business: the session stops
        except (ValueError, RuntimeError) as error:  # a bad teacher file, out of memory...
            notes.append(f"{key[0]} seed {key[1]} stopped with an error: {error}")
            continue
        notes.append(f"{key[0]} seed {key[1]}: {what}")
        args.folder.join_finished()
        if not what.startswith(("finished", "failed")):
            return


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def report(args, session: int, used: float, chooser: Concurrency, notes: list[str],
           finished: list[dict]) -> None:  # fmt: skip
    """What the session did, what is left, and how many more budgets it needs."""
    folder: StateFolder = args.folder
    recorded = folder.recorded()
    print(f"Session {session}: {used:.2f} minutes"
          + (f" of {args.minutes:g}" if args.minutes else "")
          + f"; runs side by side: {concurrency(args, chooser)}.")  # fmt: skip
    for note in notes:
        print(f"  {note}")
    failed = {key: error for key, error in folder.failed().items() if key in args.order}
    done = [key for key in args.order if key in recorded]
    left = [(row, seed, epochs_of(row, args) - ((folder.progress(row, seed) or {}).get(
        "epochs", 0))) for row, seed in args.order
        if (row, seed) not in recorded and (row, seed) not in failed]  # fmt: skip
    print(f"Done: {len(done)} of {len(args.order)} runs"
          + (f" ({len(finished)} finished in this session)" if finished else "") + ".")
    for (row, seed), error in failed.items():  # skipped by every session until the file goes
        print(f"Failed, not retried: {row} seed {seed}: {error}; delete "
              f"{folder.path(row, seed, '.failed.json')} to train it again (from its last saved "
              f"state, {folder.path(row, seed, '.pt').name}, if there is one).")  # fmt: skip
    if not left:
        if not failed:
            print(f"All recorded: {folder.results_path}.")
        return
    print("Remaining: " + ", ".join(f"{row} seed {seed} ({epochs} epochs left)"
                                    for row, seed, epochs in left) + ".")  # fmt: skip
    if args.minutes:
        times = epoch_times(args, session)
        first = [t["seconds"][0] for row, seed in args.order
                 for t in (folder.progress(row, seed) or {"timing": []})["timing"]
                 if t["session"] == session and t["seconds"]]  # fmt: skip
        overhead = max(first, default=0.0)
        budgets, words = budgets_left(left, times, processes=chooser.target,
                                      budget_s=60 * args.minutes, overhead_s=overhead)  # fmt: skip
        count = "an unknown number of" if budgets is None else str(budgets)
        print(f"The rest needs {count} more budgets of {args.minutes:g} minutes at this "
              f"session's rate ({words}).")  # fmt: skip
    print("Go on with the same command and the same --state folder.")


def main(argv: list[str] | None = None) -> int:
    started = STARTED if argv is None else time.monotonic()
    args, parser = parse(argv)
    args.started = started
    if args.merge:
        merge(args, parser)
        return 0
    if args.plan_only:
        print_plan(args)
        return 0
    if args.state is not None:
        return work(args, parser) if args.worker else record(args, parser)
    existing = check_outputs(args, parser)
    try:
        rank, local, processes = world(args.dist_timeout)
    except RuntimeError as error:  # torch.distributed.DistError is one
        raise SystemExit(
            f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}: waited for "
            f"the other workers to start, and they did not all start within "
            f"--dist-timeout={args.dist_timeout} s ({error}). Nothing trained; check that every "
            "worker runs (torchrun starts them all)."
        ) from error
    device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    splits = load_splits(args)
    planned = {(name, seed) for name, seeds in args.plan for seed in seeds}
    try:  # every teacher file read before anything trains
        for name, seed in sorted(planned):
            teacher = ALL_ROWS[name].get("teacher")
            if teacher is not None and (teacher, seed) not in planned:
                load_teacher(args, name, seed, splits.num_classes, torch.device("cpu"))
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    here = provenance(args, splits, processes, device)
    before = existing or {"runs": [], "provenance": []}
    planned = [{"row": name, "seed": seed, "epochs": epochs_of(name, args),
                "recipe": recipe(name, args.batch_size)}
               for name, seeds in args.plan for seed in seeds]  # fmt: skip
    this = [("this run", {"runs": planned, "provenance": [here]})]
    try:
        records.check_together([(str(args.out), existing)] * (existing is not None) + this,
                               allow_mixed=args.allow_mixed)  # fmt: skip
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: nothing trained, {args.out} unchanged: {error}\n")
    process = len(before["provenance"])
    results = {**before, "runs": list(before["runs"]), "provenance": [*before["provenance"], here]}
    needed = {ALL_ROWS[name]["teacher"] for name, _ in args.plan if "teacher" in ALL_ROWS[name]}
    args.teachers = {}  # (row, seed) -> a model trained here, for the rows distilled from it
    try:
        for name, seeds in args.plan:
            for seed in seeds:
                result, model = run(name, seed, splits, args, device, rank)
                if name in needed:
                    args.teachers[name, seed] = model
                if rank != 0:
                    continue
                results["runs"].append({**result, "process": process})
                _files.write_json(args.out, results)
                if args.save_dir is not None:
                    save_weights(model, args.save_dir / f"{name}-seed{seed}.safetensors", result)
                    if "inside" in result:
                        _files.write_json(args.save_dir / f"{name}-seed{seed}-readout.json",
                                           result["inside"])  # fmt: skip
                print(f"{name} seed {seed}: val {result['final_val_accuracy']:.4f}, test "
                      f"{result['test_accuracy']:.4f}, {result['wall_clock_minutes']:.1f} min "
                      f"wall-clock; in {args.out}", flush=True)  # fmt: skip
    except RuntimeError as error:
        if processes == 1:
            raise
        finished = len(results["runs"]) - len(before["runs"])
        kept = f"; {finished} finished run(s) are in {args.out}" if rank == 0 and finished else ""
        raise SystemExit(
            f"process {rank} of {processes} stopped: {error}\nIt waited for the other workers "
            "(at a step's gradient average, or for the epoch's sums): another worker stopped, "
            f"failed or did not answer within --dist-timeout={args.dist_timeout} s{kept}. Rerun "
            "the missing rows and seeds (--rows, --seeds) into a new --out and --merge the files."
        ) from error
    if processes > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
