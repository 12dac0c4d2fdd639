"""The checks of ``fit``'s inputs: arguments, data, weights, and the first augmented batch; and
what a resumed run must repeat of them (the data's checksum, the functions' settings).

Everything here runs before the first step, or at the first step only, so that a mistake is
reported where the data enter, in words about images and labels, and training never pays for it
again (no value is read back from a GPU once training runs).

See chapter: Training and classification.
"""

from __future__ import annotations

import functools
import hashlib
import types
from collections.abc import Callable

import torch
from torch import nn

from vitbook import _checks
from vitbook.optim import OPTIMIZERS, WEIGHT_DECAY_RULES

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def recipe(arguments: dict, world: int) -> None:
    """Types and ranges of ``fit``'s arguments, before anything is touched."""
    a = arguments
    for name in ("epochs", "batch_size"):
        value = a[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int; use e.g. {name}=10.")
    if a["warmup_epochs"] is not None and a["warmup_steps"] is not None:
        raise ValueError(
            f"warmup_epochs={a['warmup_epochs']!r} and warmup_steps={a['warmup_steps']!r} both "
            "set the warm-up; pass one of them (warmup_steps counts optimizer steps)."
        )
    if a["warmup_epochs"] is not None:
        _checks.integer("warmup_epochs", a["warmup_epochs"], fix="use 0 for no warm-up")
    if a["warmup_steps"] is not None:
        _checks.integer("warmup_steps", a["warmup_steps"], fix="the ViT authors use 500")
    _checks.integer("seed", a["seed"], minimum=-(2**63))
    lr = _checks.real("lr", a["lr"], fix="1e-3 is a good start for AdamW")
    if not lr > 0:
        raise ValueError(f"lr={lr!r} must be positive; 1e-3 is a good start for AdamW.")
    _checks.real(
        "weight_decay",
        a["weight_decay"],
        low=0,
        fix="DeiT uses 0.05; the ViT paper 0.3, 0.03 or 0.1, and 0 to fine-tune",
    )
    _checks.real("label_smoothing", a["label_smoothing"], low=0, high=1, open_high=True,
                 fix="DeiT uses 0.1")  # fmt: skip
    for name, form in (
        ("augment", "augment(images, generator) or None, got {}; e.g. random_shift(1)"),
        ("mix", "mix(images, labels, generator) or None, got {}; e.g. a MixUp"),
        ("criterion", "criterion(outputs, targets, images) -> loss or None, got {}"),
    ):
        function = a[name]
        if function is not None and not callable(function):
            raise TypeError(f"{name} must be a function {form.format(type(function).__name__)}.")
    if a["criterion"] is not None and a["label_smoothing"] != 0:
        raise ValueError(
            f"label_smoothing={a['label_smoothing']} with a criterion: the criterion owns its "
            "loss; smooth the labels inside it, or leave label_smoothing=0."
        )
    _checks.choice("optimizer", a["optimizer"], OPTIMIZERS)
    _checks.choice("weight_decay_rule", a["weight_decay_rule"], WEIGHT_DECAY_RULES)
    if a["clip_grad_norm"] is not None:
        _checks.real("clip_grad_norm", a["clip_grad_norm"], low=0, open_low=True,
                     fix="the ViT paper clips at 1.0")  # fmt: skip
    batch_size, accumulate = a["batch_size"], a["accumulate"]
    _checks.integer("accumulate", accumulate, minimum=1, fix="use 1 for no accumulation")
    if batch_size % world:
        raise ValueError(
            f"batch_size={batch_size} is the global batch of {world} processes, so it must be a "
            f"multiple of {world}; use e.g. batch_size={batch_size - batch_size % world or world}."
        )
    if accumulate > batch_size // world:
        raise ValueError(
            f"accumulate={accumulate} micro-batches cannot split a batch of "
            f"{batch_size // world} images{' per process' * (world > 1)}; use accumulate <= "
            f"{batch_size // world}, or a larger batch_size."
        )
    repeats = _checks.integer("repeated_augmentation", a["repeated_augmentation"], minimum=1,
                              fix="use 1 for none, 3 as DeiT")  # fmt: skip
    if repeats > len(a["images"]):
        raise ValueError(
            f"repeated_augmentation={repeats} is more than the {len(a['images'])} training "
            "images; use at most that (DeiT uses 3)."
        )
    if _checks.boolean("compile", a["compile"]) and world > 1:
        raise ValueError(
            "compile=True is not supported under torchrun (DistributedDataParallel); train "
            "with compile=False there, or in one process."
        )
    _checks.boolean("progress", a["progress"])


def data_for(
    augment: Augment | None,
    mix: Mix | None,
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int | None,
) -> None:
    """Values an augmentation or a mix needs, checked once where the data enter."""
    low_high = getattr(augment, "value_range", None)
    if low_high is not None:
        low, high = images.min().item(), images.max().item()
        if low < low_high[0] or high > low_high[1]:
            raise ValueError(
                f"train_data images range from {low:g} to {high:g}, but the augmentation works "
                f"on images in [{low_high[0]:g}, {low_high[1]:g}] (RandAugment's ops act on 256 "
                "levels); augment before normalising (put Normalize in the model), or divide "
                "8-bit images by 255."
            )
    mix_classes = getattr(mix, "num_classes", None)
    if mix_classes is not None:
        if num_classes is not None and mix_classes != num_classes:
            raise ValueError(
                f"the mix makes targets for n_cls={mix_classes} classes but the model has "
                f"num_classes={num_classes}; build the mix with n_cls={num_classes}."
            )
        _checks.labels("train_data labels", labels, mix_classes)


def weights(model: nn.Module, params: list[nn.Parameter]) -> None:
    """Something to train, and weights that are finite before the first step."""
    if not params:
        raise ValueError(
            "the model has no parameter with requires_grad=True, so there is nothing to train; "
            "unfreeze at least the head (model.head.requires_grad_(True))."
        )
    floating = [t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    if not bool(torch.nn.utils.get_total_norm(floating, norm_type="inf").isfinite()):
        bad = [name for name, t in (*model.named_parameters(), *model.named_buffers())
               if t.is_floating_point() and not bool(t.isfinite().all())]  # fmt: skip
        raise ValueError(
            f"the model's {', '.join(bad[:5])} hold NaN or inf before training; load finite "
            "weights or build the model again."
        )


def augmented(out: object, images: torch.Tensor, name: str, first: bool) -> torch.Tensor:
    """An augmentation's images, checked against its input at the first step only."""
    if first:
        if not isinstance(out, torch.Tensor) or not torch.is_floating_point(out):
            got = getattr(out, "dtype", type(out).__name__)
            raise TypeError(
                f"{name} must return the images as a floating-point tensor, got {got}; return "
                "a (B, C, H, W) tensor of the images' dtype."
            )
        if out.shape != images.shape or out.dtype != images.dtype or out.device != images.device:
            raise ValueError(
                f"{name} returned images of shape {tuple(out.shape)}, {out.dtype} on "
                f"{out.device}, for images of shape {tuple(images.shape)}, {images.dtype} on "
                f"{images.device}; it must keep the shape, the dtype and the device."
            )
    return out


def mixed(
    out: object, images: torch.Tensor, name: str, first: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """A mix's (images, targets), checked at the first step only."""
    if first:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                f"{name} must return a pair (images, targets), got {type(out).__name__}."
            )
        targets = out[1]
        if not isinstance(targets, torch.Tensor) or not (
            (targets.ndim == 1 and targets.dtype == torch.int64)
            or (targets.ndim == 2 and torch.is_floating_point(targets))
        ):
            got = getattr(targets, "dtype", type(targets).__name__)
            raise TypeError(
                f"{name} must return targets as (B,) int64 labels or (B, n_cls) float soft "
                f"targets, got {got} of shape {tuple(getattr(targets, 'shape', ()))}."
            )
        if len(targets) != len(images) or targets.device != images.device:
            raise ValueError(
                f"{name} returned {len(targets)} targets on {targets.device} for {len(images)} "
                f"images on {images.device}; return one target per image, on their device."
            )
    return augmented(out[0], images, name, first), out[1]


def fingerprint(images: torch.Tensor, labels: torch.Tensor) -> str:
    """A sha256 of the data's bytes, dtypes and shapes (its first 16 hex digits), read once on
    the host: a resumed run must train on the data it started on, not on others of its size."""
    digest = hashlib.sha256()
    for tensor in (images, labels):
        host = tensor.detach().to("cpu").contiguous()
        digest.update(f"{host.dtype} {tuple(host.shape)}\n".encode())
        digest.update(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()[:16]


def configuration(function: object, depth: int = 0) -> str:
    """A function's name with what it closes over, recursively (``compose`` of
    ``random_shift(1)``: ``random_shift.<locals>.augment(max_shift=1)``), or an object's type
    with its plain attributes: what a resumed run must repeat of an augmentation (its strength),
    a mix or a criterion. Modules and tensors count by type and shape (no weights, no address)."""
    if function is None or isinstance(function, bool | int | float | str):
        return repr(function)
    if depth > 4:
        return "..."
    inner = functools.partial(configuration, depth=depth + 1)
    if isinstance(function, tuple | list):
        items = ", ".join(map(inner, function))
        return f"({items})" if isinstance(function, tuple) else f"[{items}]"
    if isinstance(function, dict):
        return "{" + ", ".join(f"{k!r}: {inner(v)}" for k, v in function.items()) + "}"
    if isinstance(function, torch.Tensor):
        return f"tensor{tuple(function.shape)}"
    if isinstance(function, functools.partial):
        given = (function.args, function.keywords)
        return f"partial({inner(function.func)}, {inner(given[0])}, {inner(given[1])})"
    if isinstance(function, types.FunctionType):
        parts = []
        for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (),
                              strict=True):  # fmt: skip
            try:
                value = cell.cell_contents
            except ValueError:  # a name the enclosing function has not bound (yet)
                continue
            if value is not function:  # a nested function that calls itself
                parts.append(f"{name}={inner(value)}")
        if function.__defaults__:
            parts.append(f"defaults={inner(function.__defaults__)}")
        return f"{function.__qualname__}({', '.join(parts)})"
    settings = {k: v for k, v in getattr(function, "__dict__", {}).items()
                if not k.startswith("_") and k != "training"}  # fmt: skip
    if isinstance(function, nn.Module):  # its settings, not its submodules' weights
        settings = {k: v for k, v in settings.items() if isinstance(v, bool | int | float | str)}
    parts = [f"{k}={inner(v)}" for k, v in sorted(settings.items())]
    return f"{type(function).__qualname__}({', '.join(parts)})"
