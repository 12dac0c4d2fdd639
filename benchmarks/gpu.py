"""Training on a GPU: ``fit`` against a plain loop, compiled and not, and vitbook against timm.

Two tables, each timed interleaved in one process (``benchmarks/common.py``), reported as ratios:

* **fit against a plain loop.** The photo ViT of "Real photos on a GPU" (3.2M parameters, 32 px,
  P = 4), CIFAR-10-sized data (45,000 images, random pixels: the time does not depend on them),
  the ladder's first recipe (padded random crop and flip drawn per image on the device, AdamW
  lr 1e-3, weight decay 0.05, label smoothing 0.1, batch 256, warm-up then cosine). One unit of
  work is one epoch. The plain loop is what a careful engineer writes by hand: data on the GPU,
  mixed precision (the same precision ``fit`` picks), fused AdamW, the same augmentation and
  schedule, and no host sync until the epoch's end. ``fit`` adds its one sync per step (the
  finiteness check), its state copy and its bookkeeping. Target: fit / plain <= 1.10. Then
  ``fit(compile=True)`` (the forward pass and the loss compiled, CUDA graphs on a GPU), target
  at most half the plain loop's epoch; and the ladder's CNN, ResNet-18 (11.2M parameters), an
  epoch of ``fit`` eager and compiled, so that each ladder row's cost follows from the table;
  and the data-efficient chapter's distilled row (a distillation token, DeiT's hard loss, a
  ResNet-18 teacher whose forward pass runs in every step), which prices the teacher.
  Each epoch is timed 15 times (5 with ``--quick``); besides each median, the spread of the
  ratio is the interquartile range of the per-round ratios (the rounds are interleaved, so a
  slow round slows both) over their median: the target for fit / plain is a spread under 10%.
* **vitbook against timm.** One bf16 training step of ViT-B/16 (batch 64, 224 px) with the same
  weights (timm's state dict loads into vitbook's model unchanged), eager and under
  ``torch.compile``. Needs timm (and torchvision, which timm imports); the rows are skipped with
  a note where it does not import.

On a machine without CUDA the section runs on the CPU in fp32 (``--quick`` shrinks everything):
that checks the code, its numbers say nothing about GPUs. There the compiled rows are left out
(inductor builds C++ for minutes; ``tests/test_train_step.py`` tests the compiled step). Every
figure names its device. Only torch is needed (timm for the second table): run it with
``python benchmarks/run.py --only gpu``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import MIN_REPEATS, Table, interleaved_times, median, quartile_spread

TARGET = 1.10  # fit / plain loop
COMPILED_TARGET = 0.5  # fit(compile=True) / plain loop
SPREAD_TARGET = 0.10  # of the fit / plain ratio
REPEATS = 15


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(where: torch.device) -> str:
    return torch.cuda.get_device_name(where) if where.type == "cuda" else "CPU"


def synchronize(where: torch.device) -> None:
    if where.type == "cuda":
        torch.cuda.synchronize(where)


def photo_vit(quick: bool, *, distilled: bool = False) -> nn.Module:
    from vitbook import VisionTransformer, ViTConfig
    from vitbook.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize

    size = {"embed_dim": 32, "depth": 2, "num_heads": 2} if quick else {
        "embed_dim": 256, "depth": 6, "num_heads": 8}  # fmt: skip
    config = ViTConfig(img_size=32, patch_size=4, num_classes=10, mlp_ratio=2.0,
                       attn_impl="sdpa", distilled=distilled, **size)  # fmt: skip
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), VisionTransformer(config))


RECIPE = {"lr": 1e-3, "weight_decay": 0.05, "batch_size": 256, "label_smoothing": 0.1}


def plain_epoch(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, precision: str, seed: int
) -> Callable[[], None]:
    """One epoch of a hand-written loop with the recipe of ``fit``, and no host sync."""
    from vitbook.augment import random_crop_flip

    where = images.device
    params = [p for p in model.parameters() if p.requires_grad]
    fused = {"fused": True} if where.type == "cuda" else {}
    optimizer = torch.optim.AdamW(params, lr=RECIPE["lr"], weight_decay=RECIPE["weight_decay"],
                                  **fused)  # fmt: skip
    steps = math.ceil(len(images) / RECIPE["batch_size"])
    scaler = torch.amp.GradScaler(where.type, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    augment = random_crop_flip(padding=4)
    generator = torch.Generator(where).manual_seed(seed)

    def epoch() -> None:
        model.train()
        schedule = torch.optim.lr_scheduler.LambdaLR(  # one cosine over the epoch, as fit's
            optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / steps))
        )
        total = torch.zeros((), device=where)
        order = torch.randperm(len(images), generator=generator, device=where)
        for batch in order.split(RECIPE["batch_size"]):
            x = augment(images[batch], generator)
            with torch.autocast(where.type, dtype=dtype, enabled=precision != "fp32"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), labels[batch],
                                   label_smoothing=RECIPE["label_smoothing"])  # fmt: skip
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            total += loss.detach()
        synchronize(where)

    return epoch


def resnet18() -> nn.Module:
    """The ladder's CNN, behind the same Normalize as the photo ViT."""
    from vitbook.baselines import CifarResNet18
    from vitbook.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize

    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), CifarResNet18())


def fit_epoch(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    seed: int,
    compile: bool = False,
    teacher: nn.Module | None = None,
) -> Callable[[], None]:
    """One epoch of ``fit``; with a ``teacher``, DeiT's hard distillation from it (the
    distillation token's student, the teacher's forward pass under the same autocast)."""
    from vitbook.augment import random_crop_flip
    from vitbook.distill import DistillationLoss
    from vitbook.train import fit

    recipe = dict(RECIPE)
    if teacher is not None:
        recipe["criterion"] = DistillationLoss(
            teacher, "hard", label_smoothing=recipe.pop("label_smoothing")
        )

    def epoch() -> None:
        fit(model, (images, labels), epochs=1, seed=seed, warmup_epochs=0, compile=compile,
            augment=random_crop_flip(padding=4), progress=False, **recipe)  # fmt: skip
        synchronize(images.device)

    return epoch


def fit_table(quick: bool) -> Table:
    from vitbook.train import resolve_precision

    where = device()
    precision = resolve_precision("auto", where)
    compiled = where.type == "cuda"  # on the CPU inductor takes minutes to build its C++
    n = 512 if quick else 45_000
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(n, 3, 32, 32, generator=generator).to(where)
    labels = torch.randint(0, 10, (n,), generator=generator).to(where)
    n_cnn = 4 if quick and where.type == "cpu" else n  # ResNet-18 is slow on a CPU
    torch.manual_seed(0)
    models = {name: photo_vit(quick).to(where) for name in ("fit", "plain", "compiled")}
    for model in models.values():
        model.load_state_dict(models["fit"].state_dict())
    candidates = {
        "plain loop": plain_epoch(models["plain"], images, labels, precision, seed=0),
        "fit": fit_epoch(models["fit"], images, labels, seed=0),
    }
    if compiled:
        candidates["fit, compiled"] = fit_epoch(models["compiled"], images, labels, 0, True)
    cnn = {"fit, ResNet-18": False, **({"fit, compiled, ResNet-18": True} if compiled else {})}
    for name, compile_it in cnn.items():
        torch.manual_seed(0)
        candidates[name] = fit_epoch(resnet18().to(where), images[:n_cnn], labels[:n_cnn],
                                     0, compile_it)  # fmt: skip
    # The data-efficient chapter's distilled row: the teacher's forward pass is part of every
    # step, so the row costs the student's step plus a ResNet-18 inference per batch.
    torch.manual_seed(0)
    teacher = resnet18().to(where)
    candidates["fit, DeiT hard, ResNet-18 teacher"] = fit_epoch(
        photo_vit(quick, distilled=True).to(where), images[:n_cnn], labels[:n_cnn], 0,
        teacher=teacher,
    )
    repeats = MIN_REPEATS if quick else REPEATS
    times = interleaved_times(candidates, warmup=2 if compiled else 1, repeats=repeats)
    table = Table(
        key="gpu-fit",
        title=f"One training epoch: fit against a plain loop ({device_name(where)}, {precision})",
        columns=["loop", "model", "images", "epoch s (median)", "/ plain loop", "ratio spread"],
        formats=["", "", "d", ".2f", ".3f", ".0%"],
    )
    plain = times["plain loop"]
    ratios, spreads = {}, {}
    for name, taken in times.items():
        per_round = [t / p for t, p in zip(taken, plain, strict=True)]
        ratios[name] = median(taken) / median(plain)
        spreads[name] = quartile_spread(per_round)
        if "teacher" in name:
            loop, model, size = "fit, DeiT hard distillation", "distilled photo ViT", n_cnn
        elif "ResNet" in name:
            loop, model, size = name.replace(", ResNet-18", ""), "ResNet-18", n_cnn
        else:
            loop, model, size = name, "photo ViT", n
        table.add(loop, model, size, median(taken), ratios[name],
                  None if name == "plain loop" else spreads[name])  # fmt: skip
    ratio = ratios["fit"]
    compiled_ratio = ratios.get("fit, compiled")
    table.data = {"ratio": ratio, "target": TARGET, "device": device_name(where),
                  "precision": precision, "times": times, "met": ratio <= TARGET,
                  "ratio_spread": spreads["fit"], "spread_target": SPREAD_TARGET,
                  "compiled_ratio": compiled_ratio, "compiled_target": COMPILED_TARGET,
                  "repeats": repeats, "ratios": ratios, "spreads": spreads}  # fmt: skip
    cpu = " CPU: the code path only, not a GPU figure." * (where.type == "cpu")
    table.notes.append(
        f"Target fit / plain <= {TARGET}: {'met' if ratio <= TARGET else 'missed'} "
        f"({ratio:.3f}, ratio spread {spreads['fit']:.0%}: target under {SPREAD_TARGET:.0%})."
        + cpu
    )
    if compiled_ratio is not None:
        table.notes.append(
            f"Target fit(compile=True) / plain <= {COMPILED_TARGET}: "
            f"{'met' if compiled_ratio <= COMPILED_TARGET else 'missed'} ({compiled_ratio:.3f})."
        )
    else:
        table.notes.append("Compiled rows: on a GPU only (on the CPU inductor builds for minutes).")
    table.notes.append(
        f"Medians of {repeats} epochs each, interleaved; ratio spread = interquartile range of "
        "the per-round ratios to the plain loop / their median. ResNet-18 rows: the ladder's "
        f"CNN with fit's recipe on {n_cnn} images. DeiT row: the photo ViT with a distillation "
        f"token, hard distillation from a ResNet-18 teacher (its forward pass in every step), on "
        f"{n_cnn} images. Where every row has the same images (on a GPU), its ratio over the fit "
        "row is the price of the teacher and the second token."
    )
    return table


def timm_table(quick: bool) -> Table:
    where = device()
    table = Table(
        key="gpu-timm",
        title=f"One ViT-B/16 training step, vitbook against timm ({device_name(where)})",
        columns=["mode", "batch", "vitbook s", "timm s", "vitbook / timm"],
        formats=["", "d", ".4f", ".4f", ".3f"],
    )
    try:
        import timm
    except Exception as error:  # timm imports torchvision, which may not import either
        table.notes.append(f"timm did not import here ({type(error).__name__}: {error}).")
        return table
    from vitbook import VisionTransformer, ViTConfig

    name = "vit_tiny_patch16_224" if quick else "vit_base_patch16_224"
    preset = "ViT-Ti/16" if quick else "ViT-B/16"
    batch = 2 if quick else 64
    theirs = timm.create_model(name, pretrained=False).to(where)
    ours = VisionTransformer(ViTConfig.from_name(preset, attn_impl="sdpa")).to(where)
    ours.load_state_dict(theirs.state_dict())
    dtype = torch.bfloat16 if where.type == "cuda" else torch.float32
    images = torch.randn(batch, 3, 224, 224, device=where)
    labels = torch.randint(0, 1000, (batch,), device=where)

    def step(model: nn.Module) -> Callable[[], None]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def one() -> None:
            with torch.autocast(where.type, dtype=dtype, enabled=dtype != torch.float32):
                loss = F.cross_entropy(model(images).float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            synchronize(where)

        return one

    ratios = {}
    for mode in ("eager", "compiled"):
        models = {"vitbook": ours, "timm": theirs}
        if mode == "compiled":
            models = {key: torch.compile(model) for key, model in models.items()}
        start = time.perf_counter()
        times = interleaved_times({key: step(model) for key, model in models.items()},
                                  warmup=3, repeats=MIN_REPEATS if quick else 20)  # fmt: skip
        ratios[mode] = median(times["vitbook"]) / median(times["timm"])
        table.add(mode, batch, median(times["vitbook"]), median(times["timm"]), ratios[mode])
        table.notes.append(f"{mode}: {time.perf_counter() - start:.0f} s including compilation")
    table.data = {"ratios": ratios, "device": device_name(where), "model": name}
    return table


def run(*, quick: bool = False) -> list[Table]:
    return [fit_table(quick), timm_table(quick)]
