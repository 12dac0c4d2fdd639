"""Input checks shared by the vitbook modules.

Every public function validates its arguments here, before any einops pattern runs, so that a
mistake is reported in terms of images, patches and tokens rather than anonymous axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is a positive ``int``, else raise a helpful error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}.")
    if value <= 0:
        raise ValueError(f"{name}={value} must be a positive integer; use a value >= 1.")
    return value


def pair(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    """Turn an int or a pair of ints into a ``(height, width)`` tuple of positive ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        positive_int(name, value)
        return (value, value)
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        return (positive_int(f"{name}[0]", value[0]), positive_int(f"{name}[1]", value[1]))
    raise TypeError(f"{name} must be an int or a (height, width) pair of ints, got {value!r}.")


def multiple_of(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raise unless ``value`` is a multiple of ``divisor``, suggesting the nearest legal values."""
    if value % divisor:
        lower = value - value % divisor
        upper = lower + divisor
        options = f"{lower} or {upper}" if lower > 0 else f"{upper}"
        raise ValueError(
            f"{name}={value} is not a multiple of {divisor_name}={divisor}; "
            f"use {options}, or change {divisor_name}."
        )


def tensor(name: str, value: object, ndim: int, shape_doc: str) -> torch.Tensor:
    """Check that ``value`` is a floating-point tensor with ``ndim`` dimensions."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape_doc}, got {type(value).__name__}."
        )
    if not torch.is_floating_point(value):
        raise TypeError(
            f"{name} has dtype {value.dtype}, but a floating-point tensor is needed; "
            f"convert it first, e.g. {name}.float() / 255 for 8-bit images."
        )
    if value.ndim != ndim:
        fix = "add a batch dimension with .unsqueeze(0)" if value.ndim == ndim - 1 else "reshape it"
        raise ValueError(
            f"{name} must have {ndim} dimensions {shape_doc}, "
            f"got shape {tuple(value.shape)}; {fix}."
        )
    return value


def images(value: object, patch_size: tuple[int, int] | None = None) -> torch.Tensor:
    """Check a (B, C, H, W) float image batch, and that H, W are multiples of the patch size."""
    images_ = tensor("images", value, 4, "(B, C, H, W)")
    if patch_size is not None:
        height, width = images_.shape[-2:]
        multiple_of("image height", height, "patch_size", patch_size[0])
        multiple_of("image width", width, "patch_size", patch_size[1])
    return images_


def choice(name: str, value: object, options: Sequence[str]) -> str:
    """Check that ``value`` is one of ``options``."""
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name}={value!r} is not supported; choose one of {listed}.")
    return value  # type: ignore[return-value]


def divisible(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raise unless ``divisor`` divides ``value`` (used for embed_dim and num_heads)."""
    if value % divisor:
        raise ValueError(
            f"{name}={value} is not divisible by {divisor_name}={divisor}; choose {name} as a "
            f"multiple of {divisor} (e.g. {value - value % divisor or divisor} or "
            f"{value - value % divisor + divisor}), or another {divisor_name}."
        )
