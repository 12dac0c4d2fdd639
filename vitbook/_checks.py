"""Input checks shared by the vitbook modules, run before any einops pattern so that errors
speak of images, patches and tokens, not axes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch


def same_kind(err: Exception) -> type[Exception]:
    """TypeError for a TypeError, else ValueError: to re-raise a library error in our words."""
    return TypeError if isinstance(err, TypeError) else ValueError


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


def floating(name: str, value: object, shape_doc: str) -> torch.Tensor:
    """Check that ``value`` is a floating-point tensor (of any number of dimensions)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape_doc}, got {type(value).__name__}."
        )
    if not torch.is_floating_point(value):
        raise TypeError(
            f"{name} has dtype {value.dtype}, but a floating-point tensor is needed; "
            f"convert it first, e.g. {name}.float()."
        )
    return value


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


def integer(name: str, value: object, *, minimum: int = 0, fix: str = "") -> int:
    """Return ``value`` if it is an ``int`` (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an int, got {value!r} of type {type(value).__name__}"
            f"{'; ' + fix if fix else ''}."
        )
    if value < minimum:
        raise ValueError(f"{name}={value} must be an int >= {minimum}{'; ' + fix if fix else ''}.")
    return value


def real(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
    fix: str = "",
) -> float:
    """``value`` as a float if it is a finite real number within the bounds, else a TypeError
    (not a number, or a bool) or a ValueError; ``low`` and ``high`` are included unless open.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number, got {value!r} of type {type(value).__name__}"
            f"{'; ' + fix if fix else ''}."
        )
    below = low is not None and (value <= low if open_low else value < low)
    above = high is not None and (value >= high if open_high else value > high)
    if not math.isfinite(value) or below or above:
        bounds = " and ".join(
            text
            for text in (
                None if low is None else f"{'>' if open_low else '>='} {low}",
                None if high is None else f"{'<' if open_high else '<='} {high}",
            )
            if text
        )
        need = f"a finite number {bounds}" if bounds else "a finite number"
        raise ValueError(f"{name}={value!r} must be {need}{'; ' + fix if fix else ''}.")
    return float(value)


def boolean(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool; strings such as ``"no"`` are refused, not read as True."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False, got {value!r} of type {type(value).__name__}."
        )
    return value


def device(name: str, value: object) -> torch.device:
    """Turn a device name or ``torch.device`` into a ``torch.device``, refusing unknown names."""
    if not isinstance(value, (str, torch.device)):
        raise TypeError(
            f"{name} must be a device such as 'cpu' or 'cuda', got {type(value).__name__}."
        )
    try:
        return torch.device(value)
    except RuntimeError as err:
        raise ValueError(
            f"{name}={value!r} is not a device that torch knows; use 'cpu' or 'cuda'."
        ) from err


def finite(name: str, value: torch.Tensor) -> torch.Tensor:
    """Raise unless every entry of ``value`` is finite (meta tensors have no values to check)."""
    if value.device.type != "meta" and value.numel() and not bool(torch.isfinite(value).all()):
        bad = (~torch.isfinite(value)).sum().item()
        kinds = [
            kind
            for kind, present in (
                ("NaN", value.isnan().any()),
                ("inf", value.isinf().any()),
            )
            if present
        ]
        raise ValueError(
            f"{name} has {bad} non-finite value(s) ({' and '.join(kinds)}) among {value.numel()}; "
            f"find where they come from, or replace them, e.g. with torch.nan_to_num({name})."
        )
    return value


def _autocast_on(device: torch.device) -> bool:
    """Whether mixed precision is on for ``device``: dtypes then legitimately differ."""
    try:
        return torch.is_autocast_enabled(device.type)
    except (TypeError, RuntimeError):  # a device type without autocast (meta, say)
        return False


def like(name: str, value: torch.Tensor, reference: torch.Tensor, owner: str) -> torch.Tensor:
    """Raise unless ``value`` has the dtype and device of ``reference`` (an owner's weight).

    Nothing is converted silently; under ``torch.autocast`` only the device is checked.
    """
    if value.dtype != reference.dtype and not _autocast_on(value.device):
        method = {torch.float32: "float", torch.float64: "double", torch.float16: "half"}.get(
            reference.dtype
        )
        convert = f"{name}.{method}()" if method else f"{name}.to({reference.dtype})"
        raise TypeError(
            f"{name} has dtype {value.dtype} but {owner} computes in {reference.dtype}; convert "
            f"with {convert} (or convert {owner} to {value.dtype})."
        )
    if value.device != reference.device and reference.device.type != "meta":
        raise ValueError(
            f"{name} is on device {value.device} but {owner} is on {reference.device}; move it "
            f"with {name}.to({str(reference.device)!r})."
        )
    return value


def patch_inputs(
    value: object, in_chans: int, img_size: tuple[int, int] | None, weight: torch.Tensor
) -> torch.Tensor:
    """Images for a patch embedding: (B, C, H, W) float, C channels, of the size it was built for.

    Shapes, dtypes and devices only (no GPU sync); ``img_size`` None accepts any size.
    """
    batch = images(value)
    if batch.shape[1] != in_chans:
        raise ValueError(
            f"images have {batch.shape[1]} channels but the model was built for "
            f"in_chans={in_chans}; convert the images or build the model with "
            f"in_chans={batch.shape[1]}."
        )
    size = tuple(batch.shape[-2:])
    if img_size is not None and size != img_size:
        raise ValueError(
            f"images are {size[0]}x{size[1]} pixels but the model was built for "
            f"img_size={img_size}; resize the images, or build a model with "
            f"img_size={size} and move the position embeddings there with "
            "vitbook.resample_pos_embed."
        )
    return like("images", batch, weight, "the model")


def tokens(x: object, embed_dim: int, weight: torch.Tensor, owner: str = "the layer") -> None:
    """Tokens for a layer: a (B, N, D) float tensor of its width, dtype and device."""
    tensor("tokens", x, 3, "(B, N, D)")
    like("tokens", x, weight, owner)
    if x.shape[-1] != embed_dim:
        raise ValueError(
            f"tokens have width {x.shape[-1]} but the layer was built for embed_dim={embed_dim}; "
            "project the tokens to that width or build the layer to match."
        )


def attention_inputs(q: object, k: object, v: object, attn_mask: object) -> None:
    """q (..., N, Dh), k (..., M, Dh), v (..., M, Dv) of one dtype and device; a fitting mask."""
    for name, value in (("q", q), ("k", k), ("v", v)):
        floating(name, value, "(..., tokens, features)")
        if value.ndim < 2:
            raise ValueError(
                f"{name} has shape {tuple(value.shape)}; it needs at least 2 dimensions "
                "(..., tokens, features): add a token dimension with .unsqueeze(0)."
            )
        like(name, value, q, "q")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q has {q.shape[-1]} features per token but k has {k.shape[-1]}; queries and keys "
            "must share the head dimension Dh."
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has {k.shape[-2]} tokens but v has {v.shape[-2]}; each key needs one value."
        )
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"q, k and v have shapes {tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}, "
            "whose leading (batch, head) dimensions do not broadcast; give them the same ones."
        ) from err
    mask(attn_mask, (*batch, q.shape[-2], k.shape[-2]), q)


def mask(value: object, logits_shape: tuple[int, ...], q: torch.Tensor) -> None:
    """A mask is bool (True = may attend) or a float of q's dtype, broadcastable to the logits.

    Values are not checked (no GPU sync): NaN or +inf in a float mask gives NaN weights.
    """
    if value is None:
        return
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"mask must be a bool tensor (True = may attend) or None, got {type(value).__name__}."
        )
    if value.dtype != torch.bool and not value.is_floating_point():
        raise TypeError(
            f"mask has dtype {value.dtype}; an integer 0/1 mask would be added to the logits and "
            "mask nothing. Convert it with mask.bool() (True = may attend), or pass a float mask "
            "of 0 and -inf to be added to the logits."
        )
    if value.is_floating_point():
        like("mask", value, q, "q")
    elif value.device != q.device:
        raise ValueError(
            f"mask is on device {value.device} but the queries are on {q.device}; move it with "
            f"mask.to({str(q.device)!r})."
        )
    try:
        fits = torch.broadcast_shapes(value.shape, logits_shape) == torch.Size(logits_shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask has shape {tuple(value.shape)}, which does not broadcast to the attention "
            f"logits' shape {tuple(logits_shape)} (..., N queries, M keys); pass an (N, M) mask "
            "or one with matching leading dimensions."
        )


def labelled_data(
    name: str, data: object, num_classes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check an ``(images, labels)`` pair: (B, ...) finite float images, (B,) labels < n_cls."""
    if not (isinstance(data, tuple | list) and len(data) == 2):
        raise TypeError(
            f"{name} must be a pair (images, labels) of tensors, got {type(data).__name__}; "
            f"pass e.g. {name}=(x_train, y_train)."
        )
    images, targets = data
    if not isinstance(images, torch.Tensor) or not torch.is_floating_point(images):
        raise TypeError(
            f"{name} images must be a floating-point tensor (B, C, H, W), got "
            f"{getattr(images, 'dtype', type(images).__name__)}; convert with .float()."
        )
    if not isinstance(targets, torch.Tensor) or targets.dtype != torch.int64 or targets.ndim != 1:
        raise TypeError(
            f"{name} labels must be a 1-D int64 tensor (B,), got "
            f"{getattr(targets, 'dtype', type(targets).__name__)} of shape "
            f"{tuple(getattr(targets, 'shape', ()))}; convert with .long()."
        )
    if len(images) != len(targets) or len(images) == 0:
        raise ValueError(
            f"{name} has {len(images)} images and {len(targets)} labels; "
            "they must be equally many, and at least one."
        )
    finite(f"{name} images", images)
    labels(f"{name} labels", targets, num_classes)
    return images, targets


def labels(name: str, value: torch.Tensor, num_classes: int | None) -> None:
    """Labels are class indices 0 .. n_cls-1 (n_cls unknown: only the lower bound is checked)."""
    low, high = value.min().item(), value.max().item()
    if low < 0 or (num_classes is not None and high >= num_classes):
        classes = "0 .. n_cls-1" if num_classes is None else f"0 .. {num_classes - 1}"
        wrong = value[(value < 0) | (value >= (num_classes or high + 1))].unique()[:5].tolist()
        raise ValueError(
            f"{name} hold {wrong}, outside the class indices {classes}; map each class to an index "
            "first (labels such as -100 that cross-entropy would ignore are not supported here)."
        )


def logits(value: torch.Tensor, targets: torch.Tensor) -> None:
    """The model's first output: (B, n_cls) logits with n_cls above every label."""
    if not isinstance(value, torch.Tensor) or value.ndim != 2:
        raise ValueError(
            f"the model must return (B, n_cls) logits, got "
            f"{tuple(getattr(value, 'shape', ())) or type(value).__name__}; end it with a "
            "Linear layer to n_cls classes."
        )
    labels("labels", targets, value.shape[1])


def indices(name: str, values: object, size: int, what: str, *, most: int) -> object:
    """Check that every value offered is an int index into ``size`` things (0 .. size - 1).

    Returns an iterable's first ``most + 1`` values as a list (an endless iterator is cut), or a
    dict ``{label: index}`` as is.
    """
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}={values!r} must be a list of indices, e.g. {name}=[0, 1].")
    if isinstance(values, Mapping):
        read, given = list(values.values()), values
    else:
        read = given = list(itertools.islice(values, most + 1))
    for value in read:
        if isinstance(value, np.integer) or (isinstance(value, torch.Tensor) and value.ndim == 0):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
            raise ValueError(
                f"{name} offers {value!r}, but there are {size} {what}: use indices "
                f"0 .. {size - 1}."
            )
    return given
