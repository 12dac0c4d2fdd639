"""Per-sample image augmentation on the device: crops and flips, random erasing, RandAugment,
MixUp and CutMix.

An augmentation is ``augment(images (B, C, H, W) in [0, 1], generator) -> images``, a mix
``mix(images, labels, generator) -> (images, targets (B, n_cls))``; the generator is on the
images' device and its state fixes the result. Each image draws its own values, with no host
sync; call them outside ``torch.compile``. Values are checked only on the CPU
(``vitbook.data.image_ops.values_on_host``); ``vitbook.train.fit`` checks a GPU's data once
against ``value_range`` and ``num_classes``.

See chapter: Real photos.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from vitbook import _checks
from vitbook.data.image_ops import ALL_OPS, OPS, apply_ops, check_call
from vitbook.data.mixing import mixup_cutmix
from vitbook.data.randaugment import rand_augment, trivial_augment_wide

__all__ = ["ALL_OPS", "OPS", "apply_ops", "compose", "mixup_cutmix", "rand_augment"]
__all__ += ["random_crop_flip", "random_erasing", "random_resized_crop", "trivial_augment_wide"]

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def random_crop_flip(padding: int = 4, flip: bool = True) -> Augment:
    """Pad with zeros, crop back to H x W at a random offset, and flip half of the images.

    Offsets ``dy, dx`` are uniform in ``0 .. 2 * padding`` per image. With ``flip=False`` it is
    ``vitbook.train.random_shift(padding)``, bit for bit on the CPU.

    Args:
        padding: zeros added on each side; 4 for 32 x 32 photos.
        flip: also mirror each image left-right with probability 1/2.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: a padding that is not an int >= 0 or a flip that is not a bool;
            when called, a padding not below the images' height and width.

    Example:
        >>> images = torch.arange(2 * 1 * 3 * 3.0).reshape(2, 1, 3, 3)
        >>> crop = random_crop_flip(padding=1, flip=False)
        >>> crop(images, torch.Generator().manual_seed(0)).shape
        torch.Size([2, 1, 3, 3])

    See chapter: Real photos.
    """
    padding = _checks.integer("padding", padding, fix="use 4 for 32 x 32 photos")
    flip = _checks.boolean("flip", flip)

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = check_call(images, generator)
        b, c, h, w = images.shape
        device, p = images.device, padding
        if p >= min(h, w):  # a shape, not a value: no host sync
            raise ValueError(
                f"random_crop_flip(padding={p}) on {h} x {w} images: a crop could hold no pixel "
                f"of its image, only the padding's zeros. Use a padding below {min(h, w)} (an "
                f"eighth of the side is usual: 4 for 32 x 32 photos, {max(1, min(h, w) // 8)} "
                "here)."
            )
        padded = F.pad(images, (p, p, p, p))  # (B, C, H + 2p, W + 2p), zeros around
        offsets = torch.randint(0, 2 * p + 1, (b, 2), generator=generator, device=device)
        rows = offsets[:, :1] + torch.arange(h, device=device)  # (B, H)
        cols = offsets[:, 1:] + torch.arange(w, device=device)  # (B, W)
        if flip:
            mirrored = torch.rand(b, generator=generator, device=device) < 0.5  # (B,)
            cols = torch.where(mirrored[:, None], cols.flip(1), cols)  # read right to left
        batch = torch.arange(b, device=device)[:, None, None, None]  # (B, 1, 1, 1)
        channel = torch.arange(c, device=device)[None, :, None, None]  # (1, C, 1, 1)
        return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]

    return augment


ATTEMPTS = 10  # boxes drawn per image, as torchvision's and timm's loops try at most 10


def _interval(name: str, value: object, at_most: float | None, fix: str) -> tuple[float, float]:
    """A pair (low, high) of positive numbers, low <= high (<= ``at_most``)."""
    if not (isinstance(value, tuple | list) and len(value) == 2):
        raise TypeError(f"{name} must be a pair (low, high) of numbers, got {value!r}; {fix}.")
    low, high = (
        _checks.real(f"{name}[{k}]", v, low=0, open_low=True, high=at_most, fix=fix)
        for k, v in enumerate(value)
    )
    if low > high:
        raise ValueError(f"{name}={tuple(value)!r} has low > high; {fix}.")
    return low, high


def _boxes(
    b: int,
    area: float,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sides ``(sqrt(a r), sqrt(a / r))`` of ``ATTEMPTS`` boxes per image, each (B, ATTEMPTS):
    ``a`` uniform in ``scale`` times ``area``, ``r`` log-uniform in ``ratio``, rounded to pixels.
    """
    shape = (b, ATTEMPTS)
    u = torch.rand(shape, generator=generator, device=device)
    v = torch.rand(shape, generator=generator, device=device)
    target = area * (scale[0] + (scale[1] - scale[0]) * u)
    low, high = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(low + (high - low) * v)
    return (target * aspect).sqrt().round(), (target / aspect).sqrt().round()


def _first_fit(fits: torch.Tensor, *sides: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Whether any attempt fits (B,), and each side of the first that does (B,)."""
    first = fits.int().argmax(dim=1, keepdim=True)  # (B, 1): the first True (0 if none)
    return fits.any(dim=1), *(side.gather(1, first).squeeze(1) for side in sides)


def _offset(size: int, side: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A uniform offset in 0 .. size - side for each image (B,), as ``randint`` draws it."""
    u = torch.rand(side.shape, generator=generator, device=side.device)
    return torch.minimum(torch.floor(u * (size - side + 1)), size - side)


def random_resized_crop(
    scale: tuple[float, float] = (0.05, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = False,
) -> Augment:
    """The Inception crop: a random box of the image, resized back to H x W, drawn per image.

    As torchvision's ``RandomResizedCrop``: the box's area fraction is uniform in ``scale``, its
    width / height log-uniform in ``ratio``, its position uniform; the first of 10 boxes that fits,
    else the largest central box with a ratio in range; resized bilinearly. Draws: ``rand(B, 10)``
    for the areas, then the ratios; ``rand(B)`` for the rows, then the columns; with ``flip``,
    ``rand(B) < 0.5``.

    Args:
        scale: (low, high) fraction of the image's area, in (0, 1]; (0.05, 1) as vit_jax,
            torchvision's default is (0.08, 1).
        ratio: (low, high) width / height of the box.
        flip: also mirror each image left-right with probability 1/2.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: a scale or ratio that is not a pair of positive numbers with
            low <= high (scale at most 1), or a flip that is not a bool.

    Example:
        >>> crop = random_resized_crop(flip=True)
        >>> crop(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Fine-tuning a pretrained ViT.
    """
    scale = _interval("scale", scale, 1.0, "use (0.05, 1.0), as the ViT authors")
    ratio = _interval("ratio", ratio, None, "use (3 / 4, 4 / 3)")
    flip = _checks.boolean("flip", flip)

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = check_call(images, generator)
        b, c, h, w = images.shape
        if b == 0:
            return images.clone()
        device = images.device
        box_w, box_h = _boxes(b, h * w, scale, ratio, generator, device)  # (B, 10) each
        fits = (box_w > 0) & (box_w <= w) & (box_h > 0) & (box_h <= h)
        found, box_w, box_h = _first_fit(fits, box_w, box_h)  # (B,) each
        fall_w, fall_h = _fallback(h, w, ratio)
        box_w = torch.where(found, box_w, fall_w)
        box_h = torch.where(found, box_h, fall_h)
        top = torch.where(found, _offset(h, box_h, generator), (h - fall_h) // 2)
        left = torch.where(found, _offset(w, box_w, generator), (w - fall_w) // 2)
        sign = torch.ones(b, device=device)
        if flip:
            sign = torch.where(torch.rand(b, generator=generator, device=device) < 0.5, -1.0, 1.0)
        # affine_grid's units put the image's edges at -1 and 1: the box's centre and half-sides
        zero = torch.zeros(b, device=device)
        theta = [sign * box_w / w, zero, (2 * left + box_w) / w - 1,
                 zero, box_h / h, (2 * top + box_h) / h - 1]  # fmt: skip
        theta = torch.stack(theta, dim=-1).view(b, 2, 3)
        grid = F.affine_grid(theta, [b, c, h, w], align_corners=False)  # (B, H, W, 2)
        # sample only between the box's outer pixel centres, as cropping first would
        grid = torch.stack([_inside(grid[..., 0], left, box_w, w),
                            _inside(grid[..., 1], top, box_h, h)], dim=-1)  # fmt: skip
        out = F.grid_sample(images.float(), grid, mode="bilinear", align_corners=False)
        return out.to(images.dtype)

    return augment


def _inside(
    coords: torch.Tensor, start: torch.Tensor, side: torch.Tensor, size: int
) -> torch.Tensor:
    """Grid coordinates (B, H, W) clamped to a box's first and last pixel centres, per image."""
    low = (2 * start + 1) / size - 1  # (B,) in affine_grid's units
    high = (2 * (start + side) - 1) / size - 1
    return coords.clamp(low[:, None, None], high[:, None, None])


def _fallback(h: int, w: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """torchvision's fallback box (width, height): the largest central one with a ratio in range."""
    if w / h < ratio[0]:
        return w, int(round(w / ratio[0]))
    if w / h > ratio[1]:
        return int(round(h * ratio[1])), h
    return w, h


def random_erasing(
    p: float = 0.25,
    scale: tuple[float, float] = (0.02, 1 / 3),
    ratio: tuple[float, float] = (0.3, 3.3),
) -> Augment:
    """Random erasing (Zhong et al. 2020) as timm and DeiT apply it: a box of noise, per image.

    As timm's ``RandomErasing(probability=0.25, mode="pixel", max_count=1)``, before ``Normalize``:
    with probability ``p`` one box (drawn as in :func:`random_resized_crop`, the first of 10
    that fits, else none) of ``mean + std * N(0, 1)`` with the batch's channel statistics, not
    clipped: apply it last. Draws: ``rand(B) < p``, ``rand(B, 10)`` for the areas, then the
    ratios, ``rand(B)`` for the rows, then the columns, ``randn(B, C, H, W)`` for the noise.

    Args:
        p: the probability that an image gets a box; 0.25 in DeiT.
        scale: (low, high) fraction of the image's area, in (0, 1].
        ratio: (low, high) height / width of the box; timm's default is (0.3, 1 / 0.3).

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: a p outside [0, 1], or a scale or ratio that is not a pair of
            positive numbers with low <= high (scale at most 1).

    Example:
        >>> erase = random_erasing(p=1.0)
        >>> images = torch.rand(4, 3, 8, 8)
        >>> erased = erase(images, torch.Generator().manual_seed(0)) != images  # (B, C, H, W)
        >>> erased.flatten(1).any(dim=1).tolist()  # every image got a box
        [True, True, True, True]

    See chapter: Real photos.
    """
    p = _checks.real("p", p, low=0.0, high=1.0, fix="DeiT uses 0.25")
    scale = _interval("scale", scale, 1.0, "use (0.02, 1 / 3), as timm")
    ratio = _interval("ratio", ratio, None, "use (0.3, 3.3)")

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = check_call(images, generator)
        b, c, h, w = images.shape
        if b == 0:
            return images.clone()
        device = images.device
        erased = torch.rand(b, generator=generator, device=device) < p  # (B,)
        box_h, box_w = _boxes(b, h * w, scale, ratio, generator, device)  # (B, 10) each
        found, box_h, box_w = _first_fit((box_w < w) & (box_h < h), box_h, box_w)  # (B,) each
        top, left = _offset(h, box_h, generator), _offset(w, box_w, generator)
        rows = torch.arange(h, device=device)  # (H,)
        cols = torch.arange(w, device=device)
        in_rows = (rows >= top[:, None]) & (rows < (top + box_h)[:, None])  # (B, H)
        in_cols = (cols >= left[:, None]) & (cols < (left + box_w)[:, None])  # (B, W)
        box = in_rows[:, None, :, None] & in_cols[:, None, None, :]  # (B, 1, H, W)
        box &= (erased & found)[:, None, None, None]
        x = images.float()
        mean = x.mean(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1), the batch's statistics
        std = x.std(dim=(0, 2, 3), keepdim=True, correction=0)
        noise = mean + std * torch.randn(x.shape, generator=generator, device=device)
        return torch.where(box, noise, x).to(images.dtype)

    return augment


def compose(*augments: Augment) -> Augment:
    """Chain augmentations: each one's output is the next one's input, with the same generator.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError: an argument is not callable.

    Example:
        >>> augment = compose(random_crop_flip(4), rand_augment(2, 9))
        >>> augment(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Real photos.
    """
    for k, step in enumerate(augments):
        if not callable(step):
            raise TypeError(
                f"augments[{k}] is a {type(step).__name__}, not an augmentation; pass callables "
                "such as random_crop_flip(4) or rand_augment(2, 9)."
            )

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        for step in augments:
            images = step(images, generator)
        return images

    ranges = [step.value_range for step in augments if hasattr(step, "value_range")]
    if ranges:  # the composition needs what its steps need
        augment.value_range = (max(r[0] for r in ranges), min(r[1] for r in ranges))
    return augment


def random_shift(max_shift: int = 1) -> Augment:
    """An augmentation that moves each image by up to ``max_shift`` pixels, filling with zeros.

    Every image in the batch gets its own shift (dy, dx), each uniform in
    ``-max_shift .. max_shift``, drawn from the generator that ``fit`` passes in (on the images'
    device). The crop is done by indexing, for the whole batch at once, so it runs on a GPU
    without a Python loop and without waiting for the host.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Example:
        >>> augment = random_shift(1)
        >>> images = torch.ones(4, 1, 8, 8)
        >>> augment(images, torch.Generator().manual_seed(0)).shape
        torch.Size([4, 1, 8, 8])

    See chapter: Training and classification.
    """
    if isinstance(max_shift, bool) or not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(f"max_shift={max_shift!r} must be an int >= 0; use 1 for 8x8 digits.")

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, c, h, w = images.shape
        m, device = max_shift, images.device
        padded = F.pad(images, (m, m, m, m))  # (B, C, H + 2m, W + 2m), zeros around
        offsets = torch.randint(0, 2 * m + 1, (b, 2), generator=generator, device=device)
        rows = offsets[:, :1] + torch.arange(h, device=device)  # (B, H) rows of padded to keep
        cols = offsets[:, 1:] + torch.arange(w, device=device)  # (B, W)
        return padded[  # one index per output axis, broadcast to (B, C, H, W)
            torch.arange(b, device=device)[:, None, None, None],
            torch.arange(c, device=device)[None, :, None, None],
            rows[:, None, :, None],
            cols[:, None, None, :],
        ]

    return augment


__all__ += ["random_shift"]  # fit's one-pixel shifts of the digits (vitbook.train too)
