#!/usr/bin/env python3
"""Train the recipe ladder of "Real photos on a GPU" on CIFAR-10 and record the results.

    python scripts/train_cifar10.py --data cifar10.npz      # the ladder, each row's planned seeds
    python scripts/train_cifar10.py --data cifar10.npz --rows vit-50 vit-200 --seeds 0
    torchrun --nproc_per_node=4 scripts/train_cifar10.py --data cifar10.npz   # 4 GPUs
    python scripts/train_cifar10.py --standin --tiny --epochs 1 --rows vit-50 --seeds 0  # smoke
    python scripts/train_cifar10.py --merge runs/a.json runs/b.json --out runs/ladder.json
    python scripts/train_cifar10.py --data cifar10.npz --rows resnet18-200 vit-200-deit-hard \
        vit-200-conv-stem --save-dir runs/weights        # the chapter on data-efficient ViTs

The rows are ``vitbook.ladder.ROWS`` (each changes one thing from the row above; seeds from
``vitbook.ladder.PLAN``), to reproduce the shipped recording ``RECORDED_ROWS``, and the rows of
"Can a ViT beat the CNN that taught it?" (``DEIT_ROWS``): the ladder's best ViT recipe and budget
(``vit-200``) distilled from the ladder's ResNet-18 (``resnet18-200``, same augmentation and
budget) through DeiT's distillation token and hard targets, and the same ViT with a
convolutional stem and one encoder block fewer. A distilled row needs its teacher's trained
weights for each seed: trained earlier in the same command (the teacher's row runs first), or
found in ``--teacher-dir`` as ``<teacher row>-seed<seed>.safetensors``, the file ``--save-dir``
writes; the script checks that it is there before anything trains. Every row
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

Under ``torchrun`` each process takes its share of every global batch inside PyTorch's
DistributedDataParallel (see ``fit``); only the first process writes. A worker that stops or does
not answer within ``--dist-timeout`` seconds stops the others with a message instead of a hang.
On the CPU, ``torchrun --nproc_per_node=2`` runs with the gloo backend, which is how the tests
check that two processes compute the same losses as one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig, augment, records
from vitbook.baselines import CifarResNet18
from vitbook.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DataUnavailableError,
    ImageSplits,
    Normalize,
    cifar10_standin,
    load_cifar10,
)
from vitbook.distill import DistillationLoss
from vitbook.ladder import BASE, BEST_ROW, PLAN, RECORDED_ROWS, ROWS, readout
from vitbook.train import evaluate, fit

# The photo ViT: 32 px, 4 x 4 patches (64 tokens and the class token), D = 256, 6 blocks.
VIT = ViTConfig(img_size=32, patch_size=4, num_classes=10, embed_dim=256, depth=6, num_heads=8,
                mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
TINY = ViTConfig(img_size=32, patch_size=8, num_classes=10, embed_dim=32, depth=2, num_heads=2,
                 mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
# The rows of "Can a ViT beat the CNN that taught it?": one change each from vit-200.
DEIT_ROWS: dict[str, dict[str, object]] = {
    "vit-200-deit-hard": {**ROWS["vit-200"], "distilled": True, "teacher": "resnet18-200",
                          "distillation": "hard"},
    "vit-200-conv-stem": {**ROWS["vit-200"], "stem": "conv", "blocks_removed": 1},
}  # fmt: skip
ALL_ROWS = {**ROWS, **RECORDED_ROWS, **DEIT_ROWS}
INSIDE_PHOTOS = 8  # test photos whose rollout maps the chapter shows
DISTANCE_PHOTOS = 512  # test photos over which mean attention distance is averaged
TIMING_NOTE = ("wall_clock_minutes: each run's wall-clock time, which includes validation and "
               "is longer than a run alone when runs share the GPU")  # fmt: skip
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
        base = TINY if tiny else VIT
        config = dataclasses.replace(
            base, num_classes=n_cls, drop_path_rate=row.get("drop_path_rate", 0.0),
            distilled=row.get("distilled", False), stem=row.get("stem", "patch"),
            depth=base.depth - row.get("blocks_removed", 0),
        )  # fmt: skip
        body = VisionTransformer(config)
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), body)


def world(timeout_s: int) -> tuple[int, int, int]:
    """Set up torch.distributed under torchrun; return (rank, local rank, processes)."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
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
    """A teacher row's saved weights (written by --save-dir), behind the photos' normalisation."""
    from safetensors.torch import load_file

    teacher = build(ALL_ROWS[ALL_ROWS[name]["teacher"]], n_cls, args.tiny)
    teacher[1].load_state_dict(load_file(str(teacher_path(args, name, seed))))
    return teacher.to(device)


def run(name: str, seed: int, splits: ImageSplits, args, device: torch.device, rank: int) -> tuple:
    """Train one row with one seed; return (the run's record, the trained model).

    A distilled row takes its teacher from ``args.teachers`` (the models trained earlier in this
    command, by row and seed), or else from ``--teacher-dir``.
    """
    row = ALL_ROWS[name]
    torch.manual_seed(seed)
    model = build(row, splits.num_classes, args.tiny).to(device)
    settings = {k: row.get(k, v) for k, v in BASE.items()}
    mix = None
    if row.get("mix"):  # MixUp/CutMix carry the label smoothing in their soft targets
        mix = augment.mixup_cutmix(splits.num_classes, label_smoothing=settings["label_smoothing"])
        settings["label_smoothing"] = 0.0
    criterion = {}
    if "teacher" in row:  # DeiT: the teacher labels the batch the student sees, in its autocast
        teacher = getattr(args, "teachers", {}).get((row["teacher"], seed))
        if teacher is None:
            teacher = load_teacher(args, name, seed, splits.num_classes, device)
        criterion["criterion"] = DistillationLoss(
            teacher, row["distillation"], label_smoothing=settings["label_smoothing"]
        )
        settings["label_smoothing"] = 0.0  # the criterion smooths the true labels
    if args.batch_size:
        settings["batch_size"] = args.batch_size
    # the next ladder's rows name these; the recorded rows train with fit's defaults
    newer = {k: row[k] for k in ("weight_decay_rule", "repeated_augmentation") if k in row}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    history = fit(model, splits.train, epochs=epochs_of(name, args), seed=seed,
                  augment=augmentation(row), mix=mix, eval_data=splits.val,
                  progress=rank == 0, **settings, **newer, **criterion)  # fmt: skip
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    result = {
        "row": name,
        "seed": seed,
        "epochs": epochs_of(name, args),
        "parameters": sum(p.numel() for p in model.parameters()),
        "precision": history.precision,
        "train_loss": history.train_loss,
        "val_accuracy": history.eval_accuracy,
        "final_val_accuracy": history.eval_accuracy[-1],
        # The test set, read once, for the number the chapter reports.
        "test_accuracy": evaluate(model, splits.test, precision="auto"),
        "wall_clock_minutes": seconds / 60,
        "peak_gpu_memory_mb": peak,
        "recipe": recipe(name, args.batch_size),
    }
    if name == args.inside and seed == 0 and row["model"] == "vit":
        result["inside"] = inside(model, splits, device)
    return result, model


def provenance(args, splits: ImageSplits, processes: int, device: torch.device) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, cwd=Path(__file__).parent).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "processes": processes,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "device": gpu or f"CPU ({platform.processor() or platform.machine()})",
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "data": {"source": splits.source, "sha256": splits.sha256,
                 "train": len(splits.train[1]), "val": len(splits.val[1]),
                 "test": len(splits.test[1]), "note": args.data_note},  # fmt: skip
        "seeds": sorted({seed for _, seeds in args.plan for seed in seeds}),
        "base_recipe": BASE,
        "vit": dataclasses.asdict(TINY if args.tiny else VIT),
        "timing": TIMING_NOTE,
    }


def save_weights(model: nn.Sequential, path: Path, result: dict) -> None:
    """The trained body's weights (Normalize has none) as safetensors, with the run's numbers."""
    notes = {"row": result["row"], "seed": str(result["seed"]),
             "test_accuracy": str(result["test_accuracy"]), "recipe": json.dumps(result["recipe"]),
             "normalize": json.dumps({"mean": CIFAR10_MEAN, "std": CIFAR10_STD})}  # fmt: skip
    body = model[1]
    if isinstance(body, VisionTransformer):  # vitbook's model file: load_model rebuilds it
        from vitbook.checkpoints import save_model

        records.write_with(path, lambda temporary: save_model(body, temporary, overwrite=True,
                                                              **notes))  # fmt: skip
    else:
        from safetensors.torch import save

        tensors = {k: v.detach().cpu().contiguous() for k, v in body.state_dict().items()}
        records.write_bytes(path, save(tensors, metadata=notes))


def merge(args, parser: argparse.ArgumentParser) -> None:
    """Join result files into a new one: their runs, and every provenance entry."""
    out = args.out or records.new_path(Path("runs"), "cifar10-merged")
    inputs = {path.expanduser().resolve() for path in args.merge}
    try:
        if out.exists() and out.expanduser().resolve() not in inputs:
            raise FileExistsError(
                f"{out} exists and is not among the files to merge, so its runs would be lost; "
                f"add it to --merge, or choose a new --out."
            )
        records.check_output(out, write_assets=args.write_assets)
        parts = [(str(path), records.read_json(path, remedy="pass a file written by this "
                                               "script.")) for path in args.merge]  # fmt: skip
        note = {"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "files": [str(path) for path in args.merge]}  # fmt: skip
        joined = records.join(parts, allow_mixed=args.allow_mixed, note=note)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: not merged: {error}\n")
    records.write_json(out, joined)
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


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="a .npz in torchvision's layout, or torchvision's folder")
    source.add_argument("--standin", action="store_true", help="the offline stand-in (smoke runs)")
    parser.add_argument("--download", action="store_true", help="let torchvision download")
    parser.add_argument("--data-note", default="", help="recorded with the data, e.g. its origin")
    parser.add_argument("--rows", nargs="+", choices=list(ALL_ROWS), default=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int,
                        help="every row's seeds (default: the ladder's plan; 0 1 2 for the "
                             "recorded rows)")  # fmt: skip
    parser.add_argument("--epochs", type=positive, help="override every row's epochs (smoke runs)")
    parser.add_argument("--batch-size", type=positive, help="override the global batch size")
    parser.add_argument("--tiny", action="store_true", help="a tiny ViT (smoke runs)")
    parser.add_argument("--inside", default=BEST_ROW, choices=list(ALL_ROWS),
                        help="the row whose seed 0 the chapter looks inside")  # fmt: skip
    parser.add_argument("--out", type=Path, help="results file (default: a new file in runs/)")
    parser.add_argument("--write-assets", action="store_true",
                        help="allow --out (or --save-dir) in vitbook/assets, the shipped files")
    parser.add_argument("--save-dir", type=Path, help="write each run's weights and the read-out")
    parser.add_argument("--teacher-dir", type=Path, default=Path("runs/weights"),
                        help="where a distilled row finds its teacher's weights when the teacher "
                             "row is not in --rows (default runs/weights)")  # fmt: skip
    parser.add_argument("--merge", nargs="+", type=Path, help="join result files into --out")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="join (--merge) or append to --out other data, devices, epochs or "
                             "recipes")  # fmt: skip
    parser.add_argument("--dist-timeout", type=positive, default=1800,
                        help="seconds a torchrun worker waits for the others (default 1800)")
    args = parser.parse_args(argv)
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))} names a seed twice; one run "
                     "per seed (two would count as two seeds).")  # fmt: skip
    if args.merge:
        return args, parser
    if len(set(args.rows)) != len(args.rows):
        parser.error(f"--rows {' '.join(args.rows)} names a row twice; name each once.")
    # A teacher's row runs before the rows distilled from it.
    teachers = {ALL_ROWS[name]["teacher"] for name in args.rows if "teacher" in ALL_ROWS[name]}
    rows = sorted(args.rows, key=lambda name: name not in teachers)
    args.plan = [(name, tuple(args.seeds) if args.seeds is not None
                  else PLAN.get(name, (0, 1, 2))) for name in rows]  # fmt: skip
    for name, seeds in args.plan:
        teacher = ALL_ROWS[name].get("teacher")
        if teacher is None:
            continue
        taught = dict(args.plan).get(teacher, ())
        absent = [seed for seed in seeds if seed not in taught
                  and not teacher_path(args, name, seed).is_file()]  # fmt: skip
        if absent:
            missing = teacher_path(args, name, absent[0])
            parser.error(f"{name} learns from {teacher}, which is neither in --rows for seeds "
                         f"{absent} nor saved in --teacher-dir ({missing}); add {teacher} to "
                         "--rows (with --save-dir to keep it), or point --teacher-dir at its "
                         "weights.")  # fmt: skip
    return args, parser


def check_outputs(args, parser: argparse.ArgumentParser) -> dict | None:
    """Every path this run writes, checked before it trains; the --out file's runs, if any."""
    args.out = args.out or records.new_path(Path("runs"), "cifar10")
    try:
        records.check_output(args.out, write_assets=args.write_assets)
        existing = None
        if args.out.exists():
            existing = records.read_json(args.out, remedy="choose another --out.")
            records.check_together([(str(args.out), existing)], allow_mixed=True)
        if args.save_dir is not None:
            for name, seeds in args.plan:
                for seed in seeds:
                    weights = args.save_dir / f"{name}-seed{seed}.safetensors"
                    records.check_output(weights, write_assets=args.write_assets, exists_ok=False)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    return existing


def main(argv: list[str] | None = None) -> int:
    args, parser = parse(argv)
    if args.merge:
        merge(args, parser)
        return 0
    existing = check_outputs(args, parser)
    try:
        rank, local, processes = world(args.dist_timeout)
    except RuntimeError as error:  # torch.distributed.DistError is one
        raise SystemExit(
            f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}: the workers "
            f"did not all start within --dist-timeout={args.dist_timeout} s ({error}). Nothing "
            "trained; check that every worker runs (torchrun starts them all)."
        ) from error
    device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    splits = load_splits(args)
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
                records.write_json(args.out, results)
                if args.save_dir is not None:
                    save_weights(model, args.save_dir / f"{name}-seed{seed}.safetensors", result)
                    if "inside" in result:
                        records.write_json(args.save_dir / f"{name}-seed{seed}-readout.json",
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
            f"process {rank} of {processes} stopped: {error}\nAnother worker stopped, failed or "
            f"did not answer within --dist-timeout={args.dist_timeout} s{kept}. Rerun the "
            "missing rows and seeds (--rows, --seeds) into a new --out and --merge the files."
        ) from error
    if processes > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
