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
from vitbook.train.recipe import Recipe, check_names

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def recipe_of(recipe: Recipe | None, fields: dict[str, object]) -> Recipe:
    """``fit``'s recipe: ``recipe``, with the keyword ``fields`` as changes, or made of them."""
    if recipe is not None and not isinstance(recipe, Recipe):
        raise TypeError(
            f"recipe must be a vitbook.train.Recipe, got {type(recipe).__name__}; for a dict "
            "of fields write fit(model, data, Recipe(**fields)) or fit(model, data, **fields)."
        )
    check_names(fields, unknown="fit() got an unexpected keyword argument",
                missing="fit()" if recipe is None else None)  # fmt: skip
    if recipe is None:
        return Recipe(**fields)
    return recipe.replace(**fields) if fields else recipe


def run(
    recipe: Recipe,
    images: torch.Tensor,
    world: int,
    *,
    augment: object,
    mix: object,
    criterion: object,
    compile: object,
    progress: object,
) -> None:
    """What the recipe cannot check alone: the functions, the recipe against the data and the
    processes, and the run's switches; before anything is touched."""
    for name, function, form in (
        ("augment", augment, "augment(images, generator) or None, got {}; e.g. random_shift(1)"),
        ("mix", mix, "mix(images, labels, generator) or None, got {}; e.g. a MixUp"),
        ("criterion", criterion, "criterion(outputs, targets, images) -> loss or None, got {}"),
    ):
        if function is not None and not callable(function):
            raise TypeError(f"{name} must be a function {form.format(type(function).__name__)}.")
    if criterion is not None and recipe.label_smoothing != 0:
        raise ValueError(
            f"label_smoothing={recipe.label_smoothing} with a criterion: the criterion owns its "
            "loss; smooth the labels inside it, or leave label_smoothing=0."
        )
    batch_size, accumulate = recipe.batch_size, recipe.accumulate
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
    repeats = recipe.repeated_augmentation
    if repeats > len(images):
        raise ValueError(
            f"repeated_augmentation={repeats} is more than the {len(images)} training "
            "images; use at most that (DeiT uses 3)."
        )
    if _checks.boolean("compile", compile) and world > 1:
        raise ValueError(
            "compile=True is not supported under torchrun (DistributedDataParallel); train "
            "with compile=False there, or in one process."
        )
    _checks.boolean("progress", progress)


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
