"""The checks of ``fit``'s inputs (arguments, data, weights, the first augmented batch) and what
a resumed run must repeat of them; all run before or at the first step.

See chapter: Training and classification.
"""

from __future__ import annotations

import enum
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
    """Check the functions, the recipe against the data and processes, and the switches."""
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
        if targets.ndim == 2:
            soft_targets(targets, name)
    return augmented(out[0], images, name, first), out[1]


def soft_targets(targets: torch.Tensor, name: str) -> None:
    """Check (B, n_cls) soft targets: each row finite, in [0, 1], summing to 1 (to 1e-2, bf16)."""
    rows = targets.detach().float()
    sums = rows.sum(dim=1)
    bad = ~(rows.isfinite().all(dim=1) & (rows >= 0).all(dim=1) & (rows <= 1).all(dim=1)
            & ((sums - 1).abs() <= 1e-2))  # fmt: skip
    if bad.any():
        first = int(bad.nonzero()[0])
        raise ValueError(
            f"{name} returned soft targets whose row {first} sums to {float(sums[first]):.4g} "
            f"({int(bad.sum())} of {len(rows)} rows are not distributions: entries in [0, 1] "
            "summing to 1); cross-entropy against them would train on a scaled or negative "
            "loss. Mix one-hot rows (lam * y_a + (1 - lam) * y_b), or normalise "
            "(targets / targets.sum(1, keepdim=True))."
        )


def loss_smoothing(recipe: Recipe, criterion: object) -> tuple[float, str]:
    """The label smoothing of the loss, and whose it is: the recipe's, or the criterion's."""
    if criterion is None:
        return recipe.label_smoothing, "the recipe's"
    return float(getattr(criterion, "label_smoothing", 0.0) or 0.0), "the criterion's"


def smoothed_once(mix: object, targets: torch.Tensor | None, smoothing: float, whose: str) -> None:
    """Refuse labels smoothed by the mix and again by the loss: the mix's ``label_smoothing``
    says so, or else its first targets (no class at 0 in any row, with n_cls >= 3)."""
    if not smoothing:
        return
    declared = getattr(mix, "label_smoothing", None)
    if declared is None:
        if targets is None or targets.ndim != 2 or targets.shape[1] < 3:
            return
        if not bool(targets.min() > 0):
            return
        how = "no class of its first targets is at 0"
    elif not declared:
        return
    else:
        how = f"its label_smoothing={declared}"
    owner = "recipe" if whose == "the recipe's" else "criterion"
    raise ValueError(
        f"the labels are smoothed twice: the mix smooths its targets ({how}) and {whose} "
        f"label_smoothing={smoothing} smooths them again. Keep "
        f"one: mixup_cutmix(..., label_smoothing={smoothing}) with label_smoothing=0 in the "
        f"{owner} (as DeiT and timm do), or {whose} with mixup_cutmix(..., label_smoothing=0)."
    )


def fingerprint(images: torch.Tensor, labels: torch.Tensor) -> str:
    """16 hex digits of a sha256 of the data's bytes, dtypes and shapes (read on the host)."""
    digest = hashlib.sha256()
    for tensor in (images, labels):
        host = tensor.detach().to("cpu").contiguous()
        digest.update(f"{host.dtype} {tuple(host.shape)}\n".encode())
        digest.update(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()[:16]


def configuration(function: object, name: str = "augment") -> str:
    """A function's name with what it closes over, recursively (``random_shift(1)``:
    ``random_shift.<locals>.augment(max_shift=1)``), or an object's type with its attributes:
    what a resumed run must repeat (``name``, for the error). Tensors count by dtype, shape and
    checksum; a module by its settings and checksums of its ``repr`` and weights.

    Raises:
        TypeError: a setting that cannot be compared, or one nested more than 100 deep.
    """
    return _setting(function, name, ())


_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(...))
_BY_NAME = (types.BuiltinFunctionType, types.ModuleType, type, torch.dtype, torch.device)


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]


def _tensor(tensor: torch.Tensor) -> str:
    host = tensor.detach().to("cpu").contiguous()
    values = host.reshape(-1).view(torch.uint8).numpy() if host.numel() else b""
    return f"tensor({host.dtype}, {tuple(host.shape)}, sha256={_digest(memoryview(values))})"


def _setting(value: object, name: str, path: tuple[int, ...]) -> str:
    if isinstance(value, _PLAIN):
        return repr(value)
    if id(value) in path:  # a structure that holds itself: say so, once
        return "<itself>"
    if len(path) >= 100:
        raise TypeError(f"{name} holds settings nested more than 100 deep; fit cannot compare "
                        "them for resume: flatten them, or train without resume/after_epoch.")
    inner = functools.partial(_setting, name=name, path=(*path, id(value)))
    if isinstance(value, tuple | list):
        items = ", ".join(map(inner, value))
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted(map(inner, value))) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{inner(k)}: {inner(v)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tobytes"):  # an array, a scalar
        return _tensor(torch.as_tensor(value))
    if isinstance(value, _BY_NAME) or isinstance(value, enum.Enum):
        qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        module = getattr(value, "__module__", None)
        return f"{module}.{qualname}" if qualname and module else repr(value)
    if isinstance(value, functools.partial):
        return f"partial({inner(value.func)}, {inner(value.args)}, {inner(value.keywords)})"
    if isinstance(value, types.MethodType):
        return f"{inner(value.__self__)}.{value.__func__.__name__}"
    if isinstance(value, types.FunctionType):
        parts = []
        for free, cell in zip(value.__code__.co_freevars, value.__closure__ or (), strict=True):
            try:
                held = cell.cell_contents
            except ValueError:  # a name the enclosing function has not bound (yet)
                continue
            if held is not value:  # a nested function that calls itself
                parts.append(f"{free}={inner(held)}")
        if value.__defaults__:
            parts.append(f"defaults={inner(value.__defaults__)}")
        if value.__kwdefaults__:
            parts.append(f"kwdefaults={inner(value.__kwdefaults__)}")
        parts += [f"{k}={inner(v)}" for k, v in sorted(value.__dict__.items())]  # value_range...
        return f"{value.__qualname__}({', '.join(parts)})"
    kind = type(value).__qualname__
    if isinstance(value, nn.Module):  # public settings, architecture, weights and buffers
        settings = {k: v for k, v in vars(value).items()
                    if not k.startswith("_") and k != "training"}  # fmt: skip
        state = value.state_dict()
        weights = _digest(*(f"{k} {_tensor(t)}".encode() for k, t in state.items()))
        parts = [f"{k}={inner(v)}" for k, v in sorted(settings.items())]
        parts += [f"architecture={_digest(repr(value).encode())}", f"weights={weights}"]
        return f"{kind}({', '.join(parts)})"
    if hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
        settings = dict(getattr(value, "__dict__", {}))
        for slot in _slots(type(value)):
            if hasattr(value, slot):
                settings[slot] = getattr(value, slot)
        return f"{kind}({', '.join(f'{k}={inner(v)}' for k, v in sorted(settings.items()))})"
    module = type(value).__module__
    shown = f"{module}.{kind}" if module not in ("builtins", None) else kind
    shown = "torch.Generator" if isinstance(value, torch.Generator) else shown
    raise TypeError(
        f"{name} holds a {shown}, which fit cannot compare, so a resumed run could not tell "
        "whether it was given the same one; hold plain values (numbers, strings, tensors) "
        "instead, or train without resume and after_epoch."
    )


def _slots(cls: type) -> list[str]:
    """Every ``__slots__`` name of ``cls`` and its bases."""
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [s for s in slots if s != "__dict__"]
    return names
