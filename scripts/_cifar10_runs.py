"""One run of ``train_cifar10.py``: a ladder row trained with one seed, its record, its weights.

The script's own module: a run's teacher, its record, the trained model's read-out, its weights
file and a process's provenance; what a row trains with is ``vitbook.studies.ladder.run_parts``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from torch import nn

from vitbook import VisionTransformer, _files
from vitbook.analysis import readout
from vitbook.data.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DataUnavailableError,
    ImageSplits,
    cifar10_standin,
    load_cifar10,
)
from vitbook.studies import cpu_photos, ladder
from vitbook.studies import provenance as provenance_of
from vitbook.studies.ladder import ALL_ROWS, BASE, DEIT_PLAN, DEIT_ROWS, PLAN, ROWS
from vitbook.train import evaluate, fit

NEXT = {**ROWS, **DEIT_ROWS}  # the rows a state folder records by default (--plan next)
# What a state folder can record: --plan next (the GPU ladder) or --plan cpu (the CPU run).
PLANS = {"next": (NEXT, {**PLAN, **DEIT_PLAN}), "cpu": (cpu_photos.ROWS, cpu_photos.PLAN)}
INSIDE_PHOTOS = 8  # test photos whose rollout maps the chapter shows
DISTANCE_PHOTOS = 512  # test photos over which mean attention distance is averaged
TIMING_NOTE = ("wall_clock_minutes: each run's wall-clock time, which includes validation and "
               "is longer than a run alone when runs share the GPU")  # fmt: skip


def epochs_of(name: str, args) -> int:
    return args.epochs or ALL_ROWS[name]["epochs"]


def teacher_path(args, name: str, seed: int) -> Path:
    """Where a distilled row finds its teacher of ``seed`` when it was not trained in this run."""
    return args.teacher_dir / f"{ALL_ROWS[name]['teacher']}-seed{seed}.safetensors"


def load_teacher(args, name: str, seed: int, n_cls: int, device: torch.device) -> nn.Module:
    """A teacher row's saved weights (written by --save-dir), behind the photos' normalisation.

    Raises:
        ValueError: the file is damaged, or holds another model or run, naming the file.
    """
    from vitbook.pretrained.checkpoints import read_weights

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
    teacher = ladder.build(ALL_ROWS[row], n_cls, args.tiny)
    try:
        metadata, tensors = read_weights(path)
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

    A distilled row's teacher comes from ``args.teachers`` (row, seed) or ``--teacher-dir``.
    With ``resume`` and ``after_epoch`` the run continues a saved state and may stop early (the
    record is then ``None``).
    """
    row, teacher = ALL_ROWS[name], None
    if "teacher" in row:  # DeiT: the teacher labels the batch the student sees, in its autocast
        teacher = getattr(args, "teachers", {}).get((row["teacher"], seed))
        if teacher is None:
            teacher = load_teacher(args, name, seed, splits.num_classes, device)
    model, recipe, augment, mix, criterion = ladder.run_parts(
        name, splits.num_classes, seed=seed, epochs=epochs_of(name, args),
        batch_size=args.batch_size, teacher=teacher, tiny=args.tiny)  # fmt: skip
    model = model.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    history = fit(model, splits.train, recipe, augment=augment, mix=mix, criterion=criterion,
                  eval_data=splits.val, progress=rank == 0, compile=compiles(args, device),
                  resume=resume, after_epoch=after_epoch)  # fmt: skip
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
        "recipe": ladder.recipe(name, args.batch_size),
    }
    if name == args.inside and seed == 0 and row["model"] == "vit":
        result["inside"] = inside(model, splits, device)
    return result, model


def compiles(args, device: torch.device) -> bool:
    """Compile the step: by default on a GPU in one process (not under torchrun)."""
    if args.compile is not None:
        return args.compile
    return device.type == "cuda" and "RANK" not in os.environ


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
        "vit": dataclasses.asdict(ladder.TINY_VIT if args.tiny else ladder.PHOTO_VIT)
        if args.plan_name == "next"
        else {row: dataclasses.asdict(ladder.TINY_VIT) if args.tiny else cpu_photos.ROWS[row]["vit"]
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


def load_splits(args) -> ImageSplits:
    if args.standin:
        return cifar10_standin()
    try:
        return load_cifar10(args.data, download=args.download)
    except (DataUnavailableError, ValueError) as error:
        sys.exit(f"no CIFAR-10 here: {error}")
