"""Training on a GPU: ``fit`` against a plain loop, compiled and not, and vitbook against timm.

Two tables, each timed interleaved in one process (``benchmarks/common.py``), reported as ratios:

* **fit against a plain loop.** The photo ViT of "Real photos" (3.2M parameters, 32 px,
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
  ResNet-18 teacher whose forward pass runs in every step), which prices the teacher. Last, the
  floor: what the GPU needs for the photo ViT's arithmetic, the forward pass and the loss
  compiled under CUDA graphs, fused AdamW, no host sync and no augmentation (only the random
  order), at batch 256 and at 1024. Target on an H100: ``fit(compile=True)`` within 1.2 times the
  floor at batch 256. Every row also gives its TFLOP/s: the FLOPs of its epoch counted by
  ``torch.utils.flop_counter`` (one training step's forward and backward at a small batch, on the
  meta device, scaled to the epoch's images; attention counted as its two products, as the
  explicit path computes them: a fused kernel's backward also recomputes QKᵀ, 0.6% more for the
  photo ViT) over the median epoch.
  Each epoch is timed 15 times (5 with ``--quick``); besides each median, the spread of the
  ratio is the interquartile range of the per-round ratios (the rounds are interleaved, so a
  slow round slows both) over their median: the target for fit / plain is a spread under 10%.
* **vitbook against timm.** One bf16 training step of ViT-B/16 (batch 64, 224 px) with the same
  weights (timm's state dict loads into vitbook's model unchanged), eager and under
  ``torch.compile``. Needs timm (and torchvision, which timm imports); the rows are skipped with
  a note where it does not import.

On a machine without CUDA the section runs on the CPU in fp32 (``--quick`` shrinks everything):
that checks the code, its numbers say nothing about GPUs. There the compiled rows are left out
(inductor builds C++ for minutes; ``tests/test_train_step.py`` tests the compiled step) and the
floor runs eagerly, at batch 256 only. Every figure names its device. Only torch is needed (timm
for the second table): run it with ``python benchmarks/run.py --only gpu``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import MIN_REPEATS, Table, interleaved_times, median, quartile_spread
from vitbook.train.recipe import Recipe

TARGET = 1.10  # fit / plain loop
COMPILED_TARGET = 0.5  # fit(compile=True) / plain loop
FLOOR_TARGET = 1.2  # fit(compile=True) / the floor at batch 256
SPREAD_TARGET = 0.10  # of the fit / plain ratio
REPEATS = 15


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(where: torch.device) -> str:
    return torch.cuda.get_device_name(where) if where.type == "cuda" else "CPU"


def synchronize(where: torch.device) -> None:
    if where.type == "cuda":
        torch.cuda.synchronize(where)


def photo_vit(quick: bool, *, distilled: bool = False, attn_impl: str = "sdpa") -> nn.Module:
    from vitbook import VisionTransformer, ViTConfig
    from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize

    size = {"embed_dim": 32, "depth": 2, "num_heads": 2} if quick else {
        "embed_dim": 256, "depth": 6, "num_heads": 8}  # fmt: skip
    config = ViTConfig(img_size=32, patch_size=4, num_classes=10, mlp_ratio=2.0,
                       attn_impl=attn_impl, distilled=distilled, **size)  # fmt: skip
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), VisionTransformer(config))


RECIPE = Recipe(epochs=1, lr=1e-3, weight_decay=0.05, batch_size=256, warmup_epochs=0,
                label_smoothing=0.1)  # one epoch of the photo chapter's recipe


def plain_epoch(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, precision: str, seed: int
) -> Callable[[], None]:
    """One epoch of a hand-written loop with the recipe of ``fit``, and no host sync."""
    from vitbook.data.augment import random_crop_flip

    where = images.device
    params = [p for p in model.parameters() if p.requires_grad]
    fused = {"fused": True} if where.type == "cuda" else {}
    optimizer = torch.optim.AdamW(params, lr=RECIPE.lr, weight_decay=RECIPE.weight_decay,
                                  **fused)  # fmt: skip
    steps = math.ceil(len(images) / RECIPE.batch_size)
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
        for batch in order.split(RECIPE.batch_size):
            x = augment(images[batch], generator)
            with torch.autocast(where.type, dtype=dtype, enabled=precision != "fp32"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), labels[batch],
                                   label_smoothing=RECIPE.label_smoothing)  # fmt: skip
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            total += loss.detach()
        synchronize(where)

    return epoch


def floor_epoch(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    precision: str,
    seed: int,
    batch_size: int = 256,
    compiled: bool = True,
) -> Callable[[], None]:
    """One epoch at the floor: the forward pass and the loss compiled under CUDA graphs
    (``mode="reduce-overhead"``; eager with ``compiled=False``), fused AdamW, no augmentation
    (the random order only) and no host sync until the epoch's end.

    The gradients live in buffers of their own, zeroed in place: a CUDA graph's outputs are
    overwritten by its next replay, so ``.grad`` must never be one of them.
    """
    where = images.device
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    fused = {"fused": True} if where.type == "cuda" else {}
    optimizer = torch.optim.AdamW(params, lr=RECIPE.lr, weight_decay=RECIPE.weight_decay,
                                  **fused)  # fmt: skip
    scaler = torch.amp.GradScaler(where.type, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    generator = torch.Generator(where).manual_seed(seed)

    def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(where.type, dtype=dtype, enabled=precision != "fp32"):
            logits = model(x)
        return F.cross_entropy(logits.float(), y, label_smoothing=RECIPE.label_smoothing)

    step = forward_loss
    if compiled:
        mode = "reduce-overhead" if where.type == "cuda" else None
        step = torch.compile(forward_loss, fullgraph=True, dynamic=False, mode=mode)

    def epoch() -> None:
        model.train()
        order = torch.randperm(len(images), generator=generator, device=where)
        for batch in order.split(batch_size):
            if compiled and where.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            loss = step(images[batch], labels[batch])
            optimizer.zero_grad(set_to_none=False)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        synchronize(where)

    return epoch


def training_flops(build: Callable[[], nn.Module], *, teacher: Callable[[], nn.Module] | None
                   = None, batch: int = 8) -> float:  # fmt: skip
    """FLOPs of one image in a training step, counted by ``torch.utils.flop_counter`` on the
    meta device (nothing is computed): forward and backward of ``build()``'s model, plus the
    forward pass of ``teacher()`` where there is one. Exact per image: the counted ops (matrix
    products, convolutions) scale with the batch."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = build().train()
        images, labels = torch.rand(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
        judge = teacher().eval() if teacher is not None else None
    with FlopCounterMode(display=False) as counter:
        outputs = model(images)
        logits = outputs[0] if isinstance(outputs, tuple) else outputs
        F.cross_entropy(logits, labels).backward()
        if judge is not None:
            with torch.no_grad():
                judge(images)
    return counter.get_total_flops() / batch


def resnet18() -> nn.Module:
    """The ladder's CNN, behind the same Normalize as the photo ViT."""
    from vitbook.baselines import CifarResNet18
    from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize

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
    from vitbook.data.augment import random_crop_flip
    from vitbook.train import fit
    from vitbook.train.distill import DistillationLoss

    recipe, criterion = RECIPE.replace(seed=seed), None
    if teacher is not None:  # the criterion smooths the true labels itself
        criterion = DistillationLoss(
            teacher, "hard", label_smoothing=recipe.label_smoothing
        )
        recipe = recipe.replace(label_smoothing=0.0)

    def epoch() -> None:
        fit(model, (images, labels), recipe, compile=compile,
            augment=random_crop_flip(padding=4), progress=False, criterion=criterion)  # fmt: skip
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
    # The floor: compiled under CUDA graphs on a GPU, eager on the CPU (the code path only).
    floors = {256: "floor, batch 256", **({1024: "floor, batch 1024"} if compiled else {})}
    for batch, name in floors.items():
        torch.manual_seed(0)
        model = photo_vit(quick).to(where)
        model.load_state_dict(models["fit"].state_dict())
        candidates[name] = floor_epoch(model, images, labels, precision, 0, batch, compiled)
    # FLOPs of an epoch of each row, counted, for its TFLOP/s
    vit_flops = training_flops(lambda: photo_vit(quick, attn_impl="explicit"))
    flops = {name: vit_flops * n for name in candidates}
    for name in cnn:
        flops[name] = training_flops(resnet18) * n_cnn
    flops["fit, DeiT hard, ResNet-18 teacher"] = n_cnn * training_flops(
        lambda: photo_vit(quick, distilled=True, attn_impl="explicit"), teacher=resnet18)
    repeats = MIN_REPEATS if quick else REPEATS
    times = interleaved_times(candidates, warmup=2 if compiled else 1, repeats=repeats)
    table = Table(
        key="gpu-fit",
        title=f"One training epoch: fit against a plain loop ({device_name(where)}, {precision})",
        columns=["loop", "model", "images", "epoch s (median)", "/ plain loop", "ratio spread",
                 "TFLOP/s"],
        formats=["", "", "d", ".2f", ".3f", ".0%", ".3g"],
    )
    plain = times["plain loop"]
    ratios, spreads, tflops = {}, {}, {}
    for name, taken in times.items():
        per_round = [t / p for t, p in zip(taken, plain, strict=True)]
        ratios[name] = median(taken) / median(plain)
        spreads[name] = quartile_spread(per_round)
        if name.startswith("floor"):
            loop, model, size = name, "photo ViT", n
        elif "teacher" in name:
            loop, model, size = "fit, DeiT hard distillation", "distilled photo ViT", n_cnn
        elif "ResNet" in name:
            loop, model, size = name.replace(", ResNet-18", ""), "ResNet-18", n_cnn
        else:
            loop, model, size = name, "photo ViT", n
        tflops[name] = flops[name] / median(taken) / 1e12
        table.add(loop, model, size, median(taken), ratios[name],
                  None if name == "plain loop" else spreads[name], tflops[name])  # fmt: skip
    ratio = ratios["fit"]
    compiled_ratio = ratios.get("fit, compiled")
    floor_ratio = (median(times["fit, compiled"]) / median(times["floor, batch 256"])
                   if compiled else None)  # fmt: skip
    table.data = {"ratio": ratio, "target": TARGET, "device": device_name(where),
                  "precision": precision, "times": times, "met": ratio <= TARGET,
                  "ratio_spread": spreads["fit"], "spread_target": SPREAD_TARGET,
                  "compiled_ratio": compiled_ratio, "compiled_target": COMPILED_TARGET,
                  "floor_ratio": floor_ratio, "floor_target": FLOOR_TARGET,
                  "flops": flops, "tflops": tflops, "repeats": repeats, "ratios": ratios,
                  "spreads": spreads}  # fmt: skip
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
        table.notes.append(
            f"Target fit(compile=True) / floor at batch 256 <= {FLOOR_TARGET}: "
            f"{'met' if floor_ratio <= FLOOR_TARGET else 'missed'} ({floor_ratio:.3f})."
        )
    else:
        table.notes.append("Compiled rows: on a GPU only (on the CPU inductor builds for minutes); "
                           "the floor runs eagerly there, at batch 256 only.")  # fmt: skip
    table.notes.append(
        f"Medians of {repeats} epochs each, interleaved; ratio spread = interquartile range of "
        "the per-round ratios to the plain loop / their median. ResNet-18 rows: the ladder's "
        f"CNN with fit's recipe on {n_cnn} images. DeiT row: the photo ViT with a distillation "
        f"token, hard distillation from a ResNet-18 teacher (its forward pass in every step), on "
        f"{n_cnn} images. Where every row has the same images (on a GPU), its ratio over the fit "
        "row is the price of the teacher and the second token."
    )
    table.notes.append(
        f"Floor: the forward pass and the loss compiled under CUDA graphs, fused AdamW, no host "
        f"sync, no augmentation (the order only). TFLOP/s: the epoch's FLOPs counted by "
        f"torch.utils.flop_counter ({vit_flops * n / 1e12:.4g} TFLOP an epoch of the photo ViT "
        f"on {n} images, attention as its two products) over the median epoch."
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
