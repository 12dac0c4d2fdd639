#!/usr/bin/env python3
"""Train the recipe ladder of "Real photos on a GPU" on CIFAR-10 and record the results.

    python scripts/train_cifar10.py --data cifar10.npz            # every row, seeds 0 1 2
    python scripts/train_cifar10.py --download --rows vit-crop-flip resnet18 --seeds 0
    torchrun --nproc_per_node=4 scripts/train_cifar10.py --data cifar10.npz   # 4 GPUs, unchanged
    python scripts/train_cifar10.py --standin --tiny --epochs 1 --out /tmp/smoke.json  # a smoke run

Every row trains with ``vitbook.train.fit`` (mixed precision, data and augmentation on the GPU),
choosing nothing on the test set: each run records the validation accuracy after every epoch and
reads the test set once, at the end. The results file (``vitbook/assets/cifar10_results.json`` by
default) holds every run and its provenance: the GPU, torch and CUDA versions, the data's source
and checksum, the seeds, epochs, minutes and the command. For the best ViT row's first seed it also
records what the chapter shows of the trained model: attention rollout from the class token on
eight test photos, and the mean attention distance of every head in every layer.

Under ``torchrun`` each process takes its share of every global batch inside PyTorch's
DistributedDataParallel (see ``fit``); only the first process writes the file. On the CPU,
``torchrun --nproc_per_node=2`` runs with the gloo backend, which is how the tests check that two
processes compute the same losses as one.

Rows run one after the other and every finished run is written at once, so an interrupted ladder
keeps what it finished; ``--rows`` and ``--seeds`` choose a part, ``--merge`` joins result files.
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

from vitbook import VisionTransformer, ViTConfig
from vitbook.augment import compose, mixup_cutmix, rand_augment, random_crop_flip
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
from vitbook.ladder import RESULTS_PATH, readout
from vitbook.train import evaluate, fit

# The photo ViT: 32 px, 4 x 4 patches (64 tokens and the class token), D = 256, 6 blocks.
VIT = ViTConfig(img_size=32, patch_size=4, num_classes=10, embed_dim=256, depth=6, num_heads=8,
                mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
TINY = ViTConfig(img_size=32, patch_size=8, num_classes=10, embed_dim=32, depth=2, num_heads=2,
                 mlp_ratio=2.0, attn_impl="sdpa")  # fmt: skip
BASE = {  # AdamW with DeiT's regularisers, scaled to CIFAR-10
    "lr": 1e-3,
    "weight_decay": 0.05,
    "batch_size": 256,
    "warmup_epochs": 3,
    "label_smoothing": 0.1,
}
# The ladder: each row adds one thing to the row before; the CNN gets the first row's budget.
ROWS: dict[str, dict[str, object]] = {
    "vit-crop-flip": {"model": "vit", "epochs": 30, "augment": "crop-flip"},
    "vit-randaugment": {"model": "vit", "epochs": 30, "augment": "crop-flip+randaugment"},
    "vit-regularised-100": {"model": "vit", "epochs": 100, "augment": "crop-flip+randaugment",
                            "drop_path_rate": 0.1},
    "vit-mix-200": {"model": "vit", "epochs": 200, "augment": "crop-flip+randaugment",
                    "drop_path_rate": 0.1, "mix": True},
    "resnet18": {"model": "resnet18", "epochs": 30, "augment": "crop-flip"},
}  # fmt: skip
INSIDE_PHOTOS = 8  # test photos whose rollout maps the chapter shows
DISTANCE_PHOTOS = 512  # test photos over which mean attention distance is averaged


def augmentation(name: str):
    steps = {"crop-flip": random_crop_flip(padding=4), "randaugment": rand_augment(2, 9)}
    return compose(*(steps[part] for part in name.split("+")))


def build(row: dict[str, object], n_cls: int, tiny: bool) -> nn.Module:
    """The row's model, with the photos' normalisation as its first layer."""
    if row["model"] == "resnet18":
        body: nn.Module = CifarResNet18(n_cls)
    else:
        config = dataclasses.replace(
            TINY if tiny else VIT, num_classes=n_cls, drop_path_rate=row.get("drop_path_rate", 0.0)
        )
        body = VisionTransformer(config)
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), body)


def world() -> tuple[int, int, int]:
    """Set up torch.distributed under torchrun; return (rank, local rank, processes)."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    torch.distributed.init_process_group(backend)
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


def run(name: str, seed: int, splits: ImageSplits, args, device: torch.device, rank: int) -> dict:
    row = ROWS[name]
    epochs = args.epochs or row["epochs"]
    torch.manual_seed(seed)
    model = build(row, splits.num_classes, args.tiny).to(device)
    recipe = dict(BASE)
    mix = None
    if row.get("mix"):  # MixUp/CutMix carry the label smoothing in their soft targets
        mix = mixup_cutmix(splits.num_classes, label_smoothing=recipe.pop("label_smoothing"))
    if args.batch_size:
        recipe["batch_size"] = args.batch_size
    start = time.perf_counter()
    history = fit(model, splits.train, epochs=epochs, seed=seed, augment=augmentation(
        row["augment"]), mix=mix, eval_data=splits.val, progress=rank == 0, **recipe)
    seconds = time.perf_counter() - start
    result = {
        "row": name,
        "seed": seed,
        "epochs": epochs,
        "parameters": sum(p.numel() for p in model.parameters()),
        "precision": history.precision,
        "train_loss": history.train_loss,
        "val_accuracy": history.eval_accuracy,
        "final_val_accuracy": history.eval_accuracy[-1],
        # The test set, read once, for the number the chapter reports.
        "test_accuracy": evaluate(model, splits.test, precision="auto"),
        "minutes": seconds / 60,
        "recipe": {**recipe, **{k: v for k, v in row.items() if k != "epochs"}},
    }
    if name == args.inside and seed == args.seeds[0] and row["model"] == "vit":
        result["inside"] = inside(model, splits, device)
    return result


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
        "seeds": args.seeds,
        "base_recipe": BASE,
        "vit": dataclasses.asdict(TINY if args.tiny else VIT),
    }


def save(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)


def merge(paths: list[Path], out: Path) -> None:
    """Join result files: their runs, and the provenance of each."""
    merged: dict = {"runs": [], "provenance": []}
    for path in paths:
        part = json.loads(path.read_text(encoding="utf-8"))
        seen = {(r["row"], r["seed"]) for r in merged["runs"]}
        twice = [(r["row"], r["seed"]) for r in part["runs"] if (r["row"], r["seed"]) in seen]
        if twice:
            sys.exit(f"{path} repeats runs already merged: {twice}")
        merged["runs"] += part["runs"]
        merged["provenance"] += part["provenance"]
    save(out, merged)
    print(f"merged {len(merged['runs'])} runs into {out}")


def load_splits(args) -> ImageSplits:
    if args.standin:
        return cifar10_standin()
    try:
        return load_cifar10(args.data, download=args.download)
    except DataUnavailableError as error:
        sys.exit(f"no CIFAR-10 here: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="a .npz in torchvision's layout, or torchvision's folder")
    source.add_argument("--standin", action="store_true", help="the offline stand-in (smoke runs)")
    parser.add_argument("--download", action="store_true", help="let torchvision download")
    parser.add_argument("--data-note", default="", help="recorded with the data, e.g. its origin")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="override every row's epochs (smoke runs)")
    parser.add_argument("--batch-size", type=int, help="override the global batch size")
    parser.add_argument("--tiny", action="store_true", help="a tiny ViT (smoke runs)")
    parser.add_argument("--inside", default="vit-mix-200", choices=list(ROWS),
                        help="the row whose first seed's model the chapter looks inside")
    parser.add_argument("--out", type=Path, default=RESULTS_PATH)
    parser.add_argument("--merge", nargs="+", type=Path, help="join result files into --out")
    args = parser.parse_args(argv)
    if args.merge:
        merge(args.merge, args.out)
        return 0
    rank, local, processes = world()
    device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    splits = load_splits(args)
    results = {"runs": [], "provenance": [provenance(args, splits, processes, device)]}
    for name in args.rows:
        for seed in args.seeds:
            result = run(name, seed, splits, args, device, rank)
            if rank == 0:
                results["runs"].append(result)
                save(args.out, results)
                print(f"{name} seed {seed}: val {result['final_val_accuracy']:.4f}, test "
                      f"{result['test_accuracy']:.4f}, {result['minutes']:.1f} min", flush=True)
    if processes > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
