"""Per-sample image augmentation on the device: crops and flips, random erasing, RandAugment,
MixUp and CutMix.

An augmentation is a callable ``augment(images, generator) -> images`` on a batch ``(B, C, H, W)``
of floats in [0, 1], on the CPU or a GPU, with a ``torch.Generator`` on the same device. Each
image gets its own random draws; the work is a fixed number of tensor operations whatever B is
(no Python loop over the batch); no value is read back to the host (no ``.item()``, no
boolean-mask indexing), so the GPU need not wait; the same generator state gives the same batch.
A batch mix ``mix(images, labels, generator) -> (images, targets)`` also returns soft targets
``(B, n_cls)`` for ``F.cross_entropy``. Ops run in float32 and return the input's dtype. Call them
outside ``torch.compile``, which cannot trace a ``torch.Generator`` argument (``apply_ops``,
which takes none, compiles without graph breaks).

Values on a GPU are never read per batch (that would be a host sync): an augmentation that needs
images in [0, 1] (RandAugment's ops act on 256 levels) says so in its ``value_range`` attribute, a
mix its class count in ``num_classes``, and ``vitbook.train.fit`` checks the training data against
them once. Called on the CPU, where reading a value costs no sync, RandAugment and TrivialAugment
refuse images outside [0, 1], a mix labels outside its classes and ``apply_ops`` an op index
outside ``ALL_OPS`` (``vitbook.data.image_ops.values_on_host``). RandAugment and TrivialAugmentWide
live in :mod:`vitbook.data.randaugment`, their ops in :mod:`vitbook.data.image_ops`; both are
imported here too.

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
from vitbook.data.randaugment import _magnitude_table, rand_augment, trivial_augment_wide

__all__ = ["ALL_OPS", "OPS", "apply_ops", "compose", "mixup_cutmix", "rand_augment"]
__all__ += ["random_crop_flip", "random_erasing", "random_resized_crop", "trivial_augment_wide"]
__all__ += ["_magnitude_table"]  # torchvision's bins, for the tests that compare them

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def random_crop_flip(padding: int = 4, flip: bool = True) -> Augment:
    """Pad with zeros, crop back to H x W at a random offset, and flip half of the images.

    Each image draws offsets ``dy, dx`` uniform in ``0 .. 2 * padding`` (one
    ``torch.randint(0, 2 * padding + 1, (B, 2))``, then ``torch.rand(B) < 0.5`` for the flips);
    the crop reads ``padded[b, c, dy + i, dx + j]`` by index arithmetic. With ``flip=False`` it
    is ``vitbook.train.random_shift(padding)``, bit for bit on the CPU.

    Args:
        padding: zeros added on each side; 4 for 32 x 32 photos, as in the ResNet and ViT recipes.
        flip: also mirror each image left-right with probability 1/2.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: for a padding that is not an int >= 0 or a flip that is not a bool.

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
    """Sides of ``ATTEMPTS`` boxes per image: ``(sqrt(a r), sqrt(a / r))``, each (B, ATTEMPTS).

    The area ``a`` is uniform in ``scale`` times ``area``, the ratio ``r`` log-uniform in
    ``ratio``; both are rounded to whole pixels.
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

    The ViT authors train with it (``inception_crop`` in vit_jax's ``input_pipeline.py``,
    crop area 5% to 100%, then a flip); torchvision's ``RandomResizedCrop`` is the same idea.
    A box covers a fraction of the image's area uniform in ``scale`` with a width / height
    ratio log-uniform in ``ratio``, sides rounded to whole pixels, at a uniform position; it
    is resized to H x W bilinearly (one ``F.grid_sample`` with per-image matrices, sampling
    only inside the box, as cropping and then ``F.interpolate(..., align_corners=False)``).

    How the box is drawn: torchvision tries up to 10 boxes one after another until one fits
    inside the image, then falls back to the central crop of the largest box with a ratio in
    ``ratio`` (the whole image when its own ratio is in range). Here every image draws all 10
    boxes at once (``rand(B, 10)`` for the areas, then for the ratios) and takes the first
    that fits, or that fallback: the same distribution, with no loop and no host sync, and the
    generator always advances by the same amount. vit_jax's TensorFlow sampler differs a little
    more: up to 100 attempts, a ratio uniform (not log-uniform) in [3/4, 4/3], and the whole
    image as the fallback. Then ``rand(B)`` twice for the offsets (rows, columns) and, with
    ``flip``, ``rand(B) < 0.5`` for the mirrored images.

    Args:
        scale: (low, high) fraction of the image's area, in (0, 1]; (0.05, 1) as vit_jax,
            torchvision's default is (0.08, 1).
        ratio: (low, high) width / height of the box.
        flip: also mirror each image left-right with probability 1/2.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: for a scale or ratio that is not a pair of positive numbers
            with low <= high (scale at most 1), or a flip that is not a bool.

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

    timm's ``RandomErasing(probability=0.25, mode="pixel", max_count=1)``, DeiT's setting: with
    probability ``p`` an image gets one box of a fraction of its area uniform in ``scale``, with
    a height / width ratio log-uniform in ``ratio``, at a uniform position; timm tries up to 10
    boxes for one that fits strictly inside the image (else the image stays as it is), and here
    all 10 are drawn at once per image and the first that fits is taken (no loop, no host sync).

    timm's "pixel" mode fills the box with "per-pixel random (normal) color", drawn after the
    images are normalised: N(0, 1) in the model's input units. Here the images are still in
    [0, 1] before the model's ``Normalize``, so the box gets ``mean + std * N(0, 1)`` per pixel
    and channel, with the batch's per-channel mean and standard deviation: after a ``Normalize``
    with the data's statistics it is close to timm's N(0, 1). The box is not clipped to [0, 1],
    as timm's is not: apply random erasing last (``compose(..., random_erasing())``), as timm
    applies it after everything else.

    The draws, in order: ``rand(B) < p`` (which images), ``rand(B, 10)`` for the areas and for
    the ratios, ``rand(B)`` for the rows and the columns, ``randn(B, C, H, W)`` for the noise.

    Args:
        p: the probability that an image gets a box; 0.25 in DeiT.
        scale: (low, high) fraction of the image's area, in (0, 1].
        ratio: (low, high) height / width of the box; timm's default is (0.3, 1 / 0.3).

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: for a p outside [0, 1], or a scale or ratio that is not a pair
            of positive numbers with low <= high (scale at most 1).

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
        TypeError: if an argument is not callable.

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
