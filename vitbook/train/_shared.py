"""What training and evaluation share: the model and its device, its classes, and precision.

Imported by :mod:`vitbook.train.step`, :mod:`vitbook.train.evaluation` and the loop above them.

See chapter: Training and classification.
"""

from __future__ import annotations

import torch
from torch import nn

from vitbook import _checks
from vitbook.train.recipe import PRECISIONS

__all__ = ["as_module", "autocast", "device_of", "logits_of", "num_classes_of",
           "resolve_precision"]  # fmt: skip


def as_module(model: object) -> nn.Module:
    """``model``, or a TypeError if it is not an ``nn.Module``."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module mapping images to logits, got {type(model).__name__}."
        )
    return model


def device_of(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """``device`` checked, or by default the device of the model's parameters (else the CPU)."""
    as_module(model)
    if device is not None:
        return _checks.device("device", device)
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def num_classes_of(model: nn.Module) -> int | None:
    """n_cls from a vitbook model's config, or None for another module (read from its logits)."""
    num_classes = getattr(getattr(model, "config", None), "num_classes", None)
    if num_classes == 0:
        raise ValueError(
            "the model has num_classes=0, so no classification head; build it with "
            "num_classes=n_cls to train or evaluate a classifier."
        )
    return num_classes if isinstance(num_classes, int) else None


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision ``fit`` trains in: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

    ``"auto"``: bf16 on a GPU of compute capability 8.0 or more, fp16 (with a gradient scaler) on
    older GPUs, fp32 elsewhere. ``"bf16"`` and ``"fp16"`` work on the CPU too, slowly.

    Example:
        >>> resolve_precision("auto", "cpu"), resolve_precision("bf16", "cpu")
        ('fp32', 'bf16')

    See chapter: Real photos.
    """
    _checks.choice("precision", precision, PRECISIONS)
    device = _checks.device("device", device)
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
    return "fp32"


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """``torch.autocast`` for ``"bf16"`` or ``"fp16"``; a disabled one for ``"fp32"``."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")


def logits_of(outputs: object) -> torch.Tensor:
    """The logits a prediction is read from: the mean of a tuple of heads' logits."""
    if isinstance(outputs, tuple):
        return torch.stack(outputs).mean(dim=0)
    return outputs
