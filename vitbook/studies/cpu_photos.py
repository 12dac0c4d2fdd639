"""The photo ViT trained on a CPU: its size, its recipe, its recorded run and its time to accuracy.

A ViT of the book's own code trained from scratch on CIFAR-10's 45,000 training photos on two
CPU cores within two hours, recorded by ``scripts/train_cifar10.py --plan cpu`` (every epoch's
validation accuracy and seconds, the test accuracy once) in :data:`RESULTS_PATH`. Why this size
and recipe: the chapter.

See chapter: Real photos.
"""

from __future__ import annotations

from pathlib import Path

from vitbook import _files
from vitbook._files import ASSETS
from vitbook.studies.progress import Progress, progress_of

__all__ = ["CPU_VIT", "MEASURED_STEP", "PLAN", "RESULTS_PATH", "ROW", "ROWS", "STEP_CHANGES",
           "load_progress", "load_results", "planned_recipe", "time_to_accuracy"]  # fmt: skip

RESULTS_PATH = ASSETS / "cifar10_cpu_results.json"
# DeiT-Ti's width (D = 192, 3 heads of 64) at half its depth with half its MLP: 1.81 M
# parameters, 4 x 4 patches of a 32 x 32 photo (64 tokens and the class token). The explicit
# attention path: on a CPU, bf16 runs its matrix products on the matrix units where a CPU has
# them, and PyTorch's fused CPU attention kernel is slower in bf16 than in fp32.
CPU_VIT = {"img_size": 32, "patch_size": 4, "num_classes": 10, "embed_dim": 192, "depth": 6,
           "num_heads": 3, "mlp_ratio": 2.0, "attn_impl": "explicit"}  # fmt: skip
ROW = "vit-cpu"
ROWS: dict[str, dict[str, object]] = {
    ROW: {"model": "vit", "vit": CPU_VIT, "epochs": 70, "lr": 1e-3, "weight_decay": 0.05,
          "batch_size": 256, "warmup_epochs": 3, "label_smoothing": 0.1, "augment": "crop-flip",
          "precision": "bf16"},
}  # fmt: skip
PLAN: dict[str, tuple[int, ...]] = {ROW: (0,)}

# What each change to the training step bought, measured by benchmarks/photos_cpu.py before the
# run was recorded, on its machine (2-core Intel Xeon with AMX, torch 2.13.0+cpu, 2 threads),
# every step timed interleaved with the others in one process, medians of 8 rounds (the run of
# 01:45 UTC; one of 01:28 gave the same order, the compiled step at 566 photos/s).
STEP_CHANGES = {
    "plain": "fp32, fused attention, batch 128",
    "1 thread": "one thread instead of two",
    "channels-last": "photos in channels-last order",
    "batch 256": "batch 256",
    "batch 512": "batch 512",
    "bf16": "bf16, fused attention",
    "bf16 explicit": "bf16, explicit attention",
    "bf16 explicit b256": "bf16, explicit, batch 256",
    "bf16 explicit b256 uint8": "... photos kept as uint8",
    "bf16 explicit b256 compiled": "... and torch.compile",
}
MEASURED_STEP = {
    "images_per_s": {"plain": 234.3, "1 thread": 123.6, "channels-last": 235.2,
                     "batch 256": 239.8, "batch 512": 205.6, "bf16": 229.3,
                     "bf16 explicit": 462.8, "bf16 explicit b256": 495.7,
                     "bf16 explicit b256 uint8": 506.6, "bf16 explicit b256 compiled": 522.3},
    "matmul_gflops": {"matmul fp32": 327.6, "matmul bf16": 1643.8},
    "train_mflop_per_photo": 752.1,
    # the same two steps in a process with oneDNN capped at AVX512_CORE, below this CPU's bf16
    # instructions: the arithmetic of a CPU without bf16 units
    "no_bf16_units": {"plain": 245.7, "bf16 explicit b256": 77.2},
    "validation_share_of_epoch": 0.038,
    "cpu_matrix_features": ["amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2"],
    "date": "2026-12-07",
}  # fmt: skip


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """The recorded CPU run: ``{"runs": [...], "provenance": [...]}``.

    Raises:
        FileNotFoundError: nothing recorded at ``path``, with the command that records it.
        vitbook._files.ResultsFileError: a damaged file or one without runs, named.

    See chapter: Real photos.
    """
    remedy = ("record it with `python scripts/train_cifar10.py --plan cpu --data cifar10.npz "
              "--state DIR --minutes M`.")  # fmt: skip
    results = _files.read_json(path, remedy=remedy)
    if not results.get("runs") or not results.get("provenance"):
        raise _files.ResultsFileError(f"{path} holds no runs or no provenance; {remedy}")
    return results


def load_progress(path: str | Path = RESULTS_PATH) -> Progress:
    """The CPU plan's :class:`vitbook.studies.progress.Progress` in the file at ``path``."""
    path = Path(path)
    order = [(row, seed) for row, seeds in PLAN.items() for seed in seeds]
    planned = {row: (ROWS[row]["epochs"], planned_recipe(row)) for row in PLAN}
    if not path.exists():
        return progress_of(None, order, planned, source=f"nothing recorded yet: no file at {path}")
    return progress_of(_files.read_json(path, remedy="record it again."), order, planned,
                       source=str(path))  # fmt: skip


def planned_recipe(row: str) -> dict[str, object]:
    """What a run of the CPU plan records as its recipe: the row's fields but epochs."""
    if row not in ROWS:
        raise ValueError(f"{row!r} is not a row of the CPU plan; choose from {list(ROWS)}.")
    return {k: v for k, v in ROWS[row].items() if k != "epochs"}


def time_to_accuracy(run: dict, levels: tuple[float, ...]) -> dict[float, float | None]:
    """``{level: minutes}`` of ``run``'s summed ``epoch_seconds`` at which its ``val_accuracy``
    first reached each of ``levels`` (fractions); ``None`` where never.

    Raises:
        ValueError: a run without one time per epoch, or a level outside [0, 1].

    Example:
        >>> run = {"val_accuracy": [0.4, 0.6, 0.7], "epoch_seconds": [60.0, 60.0, 90.0]}
        >>> time_to_accuracy(run, (0.5, 0.7, 0.9))
        {0.5: 2.0, 0.7: 3.5, 0.9: None}

    See chapter: Real photos.
    """
    accuracy, seconds = run.get("val_accuracy"), run.get("epoch_seconds")
    if not accuracy or seconds is None or len(seconds) != len(accuracy):
        raise ValueError(
            "the run needs val_accuracy and epoch_seconds of the same length (one per epoch), "
            f"got {len(accuracy or [])} and {len(seconds or [])}; record it with "
            "scripts/train_cifar10.py, which writes both."
        )
    bad = [level for level in levels if not 0 <= level <= 1]
    if bad:
        raise ValueError(f"levels {bad} are not fractions in [0, 1]; 75% is 0.75.")
    found: dict[float, float | None] = {}
    for level in levels:
        elapsed, found[level] = 0.0, None
        for value, spent in zip(accuracy, seconds, strict=True):
            elapsed += spent
            if value >= level:
                found[level] = round(elapsed / 60, 2)
                break
    return found
