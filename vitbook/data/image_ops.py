"""Image ops on a batch, on the device: the kernels of RandAugment and TrivialAugment.

:func:`apply_ops` applies one op per image; the ops are torchvision's 14 (``OPS``, in its
``RandAugment``'s order) and timm's ``invert`` and ``solarize_add`` (``ALL_OPS``, all 16).
:func:`check_call` checks the calling convention of the augmentations in
:mod:`vitbook.data.augment`.

See chapter: Real photos.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake

from vitbook import _checks

__all__ = ["ALL_OPS", "OPS", "apply_ops", "check_call", "values_on_host"]

# torchvision's RandAugment ops, in its order; ops 1..9 take a random sign.
OPS = (
    "identity", "shear_x", "shear_y", "translate_x", "translate_y", "rotate",
    "brightness", "color", "contrast", "sharpness",
    "posterize", "solarize", "autocontrast", "equalize",
)  # fmt: skip
ALL_OPS = (*OPS, "invert", "solarize_add")  # timm's RandAugment adds these two
(IDENTITY, SHEAR_X, SHEAR_Y, TRANSLATE_X, TRANSLATE_Y, ROTATE,
 BRIGHTNESS, COLOR, CONTRAST, SHARPNESS,
 POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE,
 INVERT, SOLARIZE_ADD) = range(len(ALL_OPS))  # fmt: skip


def check_call(images: object, generator: object) -> torch.Tensor:
    """Check an augmentation's arguments: (B, C, H, W) float images, a generator on their device.

    Shapes, dtypes and devices only (no host sync); returns the images.

    Example:
        >>> check_call(torch.zeros(2, 3, 4, 5), torch.Generator()).shape
        torch.Size([2, 3, 4, 5])

    See chapter: Real photos.
    """
    images_ = _checks.images(images)
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, got {type(generator).__name__}; pass "
            "torch.Generator(device=images.device).manual_seed(seed)."
        )
    if generator.device.type != images_.device.type:
        raise ValueError(
            f"the generator is on {generator.device} but the images are on {images_.device}; "
            f"create it with torch.Generator(device={str(images_.device)!r})."
        )
    return images_


def _affine(ops: torch.Tensor, m: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Per-sample inverse affine matrices ``(B, 2, 3)`` in ``F.affine_grid``'s units."""
    one, zero = torch.ones_like(m), torch.zeros_like(m)
    shift = torch.trunc(m)  # torchvision translates by int(magnitude) pixels
    radians = torch.deg2rad(m)
    cos, sin = radians.cos(), radians.sin()
    rotate = ops == ROTATE
    # In pixels from the image centre, y down, the output pixel (x, y) reads the input at
    # (a x + b y + tx, c x + d y + ty): torchvision's matrices. Shears pivot on the top-left
    # corner (centre=[0, 0] there), rotations on the centre.
    a = torch.where(rotate, cos, one)
    b = torch.where(ops == SHEAR_X, m, torch.where(rotate, -sin, zero))
    c = torch.where(ops == SHEAR_Y, m, torch.where(rotate, sin, zero))
    d = a
    tx = torch.where(ops == SHEAR_X, m * height / 2, torch.where(ops == TRANSLATE_X, -shift, zero))
    ty = torch.where(ops == SHEAR_Y, m * width / 2, torch.where(ops == TRANSLATE_Y, -shift, zero))
    # affine_grid puts the image's edges at -1 and 1: divide x by W / 2 and y by H / 2
    theta = [a, b * height / width, tx * 2 / width, c * width / height, d, ty * 2 / height]
    return torch.stack(theta, dim=-1).view(-1, 2, 3)  # (B, 2, 3)


def _equalize(level: torch.Tensor) -> torch.Tensor:
    """Histogram equalisation of integer levels 0..255, per image and channel, as PIL does."""
    flat = level.flatten(-2).long()  # (B, C, H*W)
    hist = torch.zeros(*flat.shape[:-1], 256, dtype=torch.long, device=level.device)
    hist.scatter_add_(-1, flat, torch.ones_like(flat))  # (B, C, 256)
    cum = hist.cumsum(-1)
    brightest = hist.gather(-1, cum.argmax(-1, keepdim=True))  # count of the top level present
    step = (flat.shape[-1] - brightest) // 255  # (B, C, 1); PIL leaves the image alone at 0
    lut = ((cum[..., :-1] + step // 2) // step.clamp(min=1)).clamp(0, 255)
    lut = torch.cat([torch.zeros_like(lut[..., :1]), lut], dim=-1)  # (B, C, 256), lut[0] = 0
    equalized = lut.gather(-1, flat).view_as(level)
    return torch.where(step[..., None] > 0, equalized, level.long())


def values_on_host(tensor: torch.Tensor) -> bool:
    """Whether reading ``tensor``'s values costs no GPU sync: a real CPU tensor, not traced.

    The augmentations check values only then; :func:`vitbook.train.fit` checks the training data
    once instead.

    Example:
        >>> values_on_host(torch.zeros(2)), values_on_host(torch.zeros(2, device="meta"))
        (True, False)

    See chapter: Real photos.
    """
    return (
        tensor.device.type == "cpu" and not torch.compiler.is_compiling() and not is_fake(tensor)
    )


def apply_ops(images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    """Apply op ``ALL_OPS[ops[b]]`` at magnitude ``magnitudes[b]`` to each image ``b``.

    Magnitudes are in torchvision's units: shear factor (``x + m y``), pixels (cut to an int),
    degrees (counter-clockwise), ``m`` for the enhancement factor ``1 + m``, bits kept, the
    solarize threshold in [0, 1], levels that solarize_add adds below level 128; identity,
    autocontrast, equalize and invert ignore it. Geometric ops sample the nearest pixel, zeros
    outside; blends compute in float; posterize, autocontrast and equalize act on the levels
    ``round(255 x)``. Unlike torchvision, blends are not truncated to integer levels, and float
    posterize keeps ``round(255 x)``'s top bits.

    Args:
        images: ``(B, C, H, W)`` floats in [0, 1], C = 1 or 3.
        ops: ``(B,)`` integer indices into ``ALL_OPS``, on the images' device.
        magnitudes: ``(B,)`` floats, signed where the op takes a sign; posterize keeps 0 .. 8 bits.

    Returns:
        ``(B, C, H, W)``, the images' dtype.

    Raises:
        TypeError / ValueError: images that are not (B, C, H, W) floats with C = 1 or 3; ops or
            magnitudes not of shape (B,); ops that are not integers, or (read only where
            :func:`values_on_host`) name no op or keep posterize bits outside 0 .. 8.

    Example:
        >>> images = torch.rand(2, 3, 4, 5)
        >>> ops = torch.tensor([OPS.index("rotate"), OPS.index("posterize")])
        >>> apply_ops(images, ops, torch.tensor([9.0, 7.0])).shape
        torch.Size([2, 3, 4, 5])

    See chapter: Real photos.
    """
    images = _checks.images(images)
    b, c, h, w = images.shape
    for name, value in (("ops", ops), ("magnitudes", magnitudes)):
        if not isinstance(value, torch.Tensor) or value.shape != (b,):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{name} must be a tensor of shape (B,) = ({b},), got {shape}.")
    if ops.is_floating_point() or ops.dtype == torch.bool:
        raise TypeError(f"ops must hold integer indices into ALL_OPS, got dtype {ops.dtype}.")
    if values_on_host(ops) and b and not 0 <= int(ops.min()) <= int(ops.max()) < len(ALL_OPS):
        wrong = ops[(ops < 0) | (ops >= len(ALL_OPS))].unique()[:5].tolist()
        raise ValueError(
            f"ops holds {wrong}, which name no op: ALL_OPS has {len(ALL_OPS)} (indices 0 .. "
            f"{len(ALL_OPS) - 1}); pick them with OPS.index('rotate') and the like."
        )
    if values_on_host(magnitudes) and b:
        bits = magnitudes[ops == POSTERIZE]
        wrong = bits[(bits < 0) | (bits >= 9) | bits.isnan()].unique()[:5].tolist()
        if wrong:
            raise ValueError(
                f"magnitudes hold {wrong} for posterize, which keeps 0 .. 8 bits of each 8-bit "
                "level (8 leaves the image as it is, 0 makes it black; -5 would drop all 8 "
                "without a word); give bits in 0 .. 8."
            )
    if c not in (1, 3):
        raise ValueError(f"images have C={c} channels; these ops need 1 (grey) or 3 (RGB).")
    if b == 0:  # nothing to do (and affine_grid refuses an empty batch)
        return images.clone()
    x = images.float()
    m = magnitudes.float()
    op = ops[:, None, None, None]  # (B, 1, 1, 1), to select per image
    m4 = m[:, None, None, None]

    theta = _affine(ops, m, h, w)  # (B, 2, 3)
    grid = F.affine_grid(theta, [b, c, h, w], align_corners=False)  # (B, H, W, 2)
    warped = F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    out = torch.where((op >= SHEAR_X) & (op <= ROTATE), warped, x)

    # constants as Python numbers: a tensor made from a list would be a host-to-device copy
    gray = x if c == 1 else 0.2989 * x[:, :1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:]  # (B, 1, H, W)
    blurred = x.clone()  # PIL's SMOOTH filter (1 1 1, 1 5 1, 1 1 1) / 13, borders left alone
    if h > 2 and w > 2:  # (sum over the 3 x 3 neighbourhood + 4 x centre) / 13
        box_sum = 9 * F.avg_pool2d(x, 3, stride=1)  # (B, C, H - 2, W - 2)
        blurred[..., 1:-1, 1:-1] = (box_sum + 4 * x[..., 1:-1, 1:-1]) / 13
    degenerate = torch.where(op == BRIGHTNESS, 0.0, torch.where(op == COLOR, gray, blurred))
    degenerate = torch.where(op == CONTRAST, gray.mean((-3, -2, -1), keepdim=True), degenerate)
    factor = 1 + m4  # x f + degenerate (1 - f), written so that borders stay exact
    blended = (x + (1 - factor) * (degenerate - x)).clamp(0, 1)
    out = torch.where((op >= BRIGHTNESS) & (op <= SHARPNESS), blended, out)

    # The 256 levels of an 8-bit image; clamped, so that an image outside [0, 1] cannot index
    # outside equalize's histogram (fit refuses such images for RandAugment).
    level = (x.clamp(0, 1) * 255).round().long()
    drop = (8 - torch.trunc(m4)).clamp(0, 8).long()  # posterize keeps the top bits
    posterized = torch.where(drop > 0, (level >> drop << drop) / 255, x)
    out = torch.where(op == POSTERIZE, posterized, out)
    out = torch.where(op == SOLARIZE, torch.where(x >= m4, 1 - x, x), out)
    low = level.amin((-2, -1), keepdim=True)  # (B, C, 1, 1)
    high = level.amax((-2, -1), keepdim=True)
    stretched = (level - low) * 255 // (high - low).clamp(min=1)  # PIL's lut, exact
    out = torch.where(op == AUTOCONTRAST, torch.where(high > low, stretched, level) / 255, out)
    out = torch.where(op == EQUALIZE, _equalize(level) / 255, out)
    out = torch.where(op == INVERT, 1 - x, out)
    added = torch.where(level < 128, (x + m4 / 255).clamp(max=1), x)  # timm's solarize_add
    return torch.where(op == SOLARIZE_ADD, added, out).to(images.dtype)
