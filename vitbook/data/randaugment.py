"""RandAugment and TrivialAugmentWide, drawn per image on the device, on two magnitude scales.

Each image of a batch draws its own ops and magnitudes (torchvision's ``transforms.v2`` draws
once per call); :func:`vitbook.data.image_ops.apply_ops` applies them. The scales are
torchvision's bins (:func:`torchvision_magnitudes`) and timm's 0-10 ``inc1`` scale
(:func:`timm_magnitudes`, DeiT's ``rand-m9-mstd0.5-inc1``); torchvision's bin 9 of 31 is about
m3 on timm's.

See chapter: Real photos.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from vitbook import _checks
from vitbook.data.image_ops import (
    ALL_OPS,
    BRIGHTNESS,
    IDENTITY,
    OPS,
    POSTERIZE,
    ROTATE,
    SHARPNESS,
    SHEAR_X,
    SHEAR_Y,
    SOLARIZE,
    SOLARIZE_ADD,
    TRANSLATE_X,
    TRANSLATE_Y,
    apply_ops,
    check_call,
    values_on_host,
)

__all__ = ["SCALES", "rand_augment", "timm_magnitudes", "torchvision_magnitudes"]
__all__ += ["trivial_augment_wide"]

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
SCALES = ("torchvision", "timm")
UNIT_RANGE = (0.0, 1.0)  # the values these policies need: fit checks the images once


def _unit_images(images: torch.Tensor) -> None:
    """Refuse images outside [0, 1] where reading them costs no GPU sync (:func:`values_on_host`).

    The ops act on the 256 levels ``round(255 x)``: other ranges would be augmented as nonsense.
    """
    if not values_on_host(images) or images.numel() == 0:
        return
    low, high = images.min().item(), images.max().item()
    if math.isnan(low) or math.isnan(high):
        raise ValueError(
            "images hold NaN; RandAugment and TrivialAugment work on images in [0, 1]: find "
            "where the NaN came from before augmenting (a division by zero when scaling?)."
        )
    if not 0 <= low <= high <= 1:
        raise ValueError(
            f"images range from {low:g} to {high:g}, but RandAugment and TrivialAugment work on "
            "images in [0, 1] (their ops act on 256 levels); divide 8-bit images by 255, or "
            "augment before normalising (put Normalize in the model)."
        )


def torchvision_magnitudes(
    wide: bool, bins: int, height: int, width: int, device: torch.device
) -> torch.Tensor:
    """torchvision's magnitude bins, one row per op of ``OPS``, in ``apply_ops``'s units.

    Returns a ``(len(OPS), bins)`` tensor on ``device``: RandAugment's ranges for ``height`` x
    ``width`` images, or TrivialAugmentWide's with ``wide=True``; column ``m`` is bin ``m``.

    See chapter: The photo recipe ladder, recorded on an H100.
    """
    if wide:  # TrivialAugmentWide's wider ranges
        shear, tx, ty, rotate, enhance, bits_dropped = 0.99, 32.0, 32.0, 135.0, 0.99, 6
    else:
        shear, tx, ty, rotate, enhance = 0.3, 150 / 331 * width, 150 / 331 * height, 30.0, 0.9
        bits_dropped = 4

    def ramp(start: float, end: float) -> torch.Tensor:
        return torch.linspace(start, end, bins, device=device)

    zeros = torch.zeros(bins, device=device)
    bits = (8 - torch.arange(bins, device=device) / ((bins - 1) / bits_dropped)).round()
    rows = [zeros, ramp(0, shear), ramp(0, shear), ramp(0, tx), ramp(0, ty), ramp(0, rotate)]
    rows += [ramp(0, enhance)] * 4 + [bits, ramp(1, 0)]
    return torch.stack(rows + [zeros, zeros])  # (14, bins)


def _policy(num_ops: int, magnitude: int | None, bins: int) -> Augment:
    """Per-sample RandAugment (fixed magnitude bin) or TrivialAugmentWide (``magnitude=None``)."""

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = check_call(images, generator)
        _unit_images(images)
        b, device = images.shape[0], images.device
        shape = (num_ops, b)
        ops = torch.randint(0, len(OPS), shape, generator=generator, device=device)
        if magnitude is None:
            bin_index = torch.randint(0, bins, shape, generator=generator, device=device)
        else:
            bin_index = torch.full(shape, magnitude, device=device)
        negative = torch.rand(shape, generator=generator, device=device) <= 0.5
        table = torchvision_magnitudes(magnitude is None, bins, *images.shape[-2:], device)
        values = table[ops, bin_index]  # (num_ops, B)
        values = torch.where(negative & (ops >= SHEAR_X) & (ops <= SHARPNESS), -values, values)
        for k in range(num_ops):  # a loop over the rounds, not over the images
            images = apply_ops(images, ops[k], values[k])
        return images

    augment.value_range = UNIT_RANGE
    return augment


def timm_magnitudes(
    ops: torch.Tensor, m: torch.Tensor, negative: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """timm's ``LEVEL_TO_ARG`` (``inc1`` set) on the device, in ``apply_ops``'s units.

    ``ops`` index ``ALL_OPS``, ``m`` is each op's magnitude on timm's 0-10 scale (noise and clip
    applied), ``negative`` timm's ``_randomly_negate`` draw; all three and the result share a shape.

    See chapter: The photo recipe ladder, recorded on an H100.
    """
    level = m / 10
    sign = torch.where(negative, -1.0, 1.0)
    enhance = (1 + sign * level * 0.9).clamp(min=0.1) - 1  # factor max(0.1, 1 +- 0.9 level)
    bits = 4 - torch.trunc(level * 4)  # PosterizeIncreasing keeps 4 down to 0 bits
    threshold = (256 - torch.trunc(level * 256)) / 255  # SolarizeIncreasing, as a fraction
    values = torch.zeros_like(m)
    for op, value in (
        (ROTATE, sign * level * 30),  # degrees
        (SHEAR_X, sign * level * 0.3),
        (SHEAR_Y, sign * level * 0.3),
        (TRANSLATE_X, sign * level * 0.45 * width),  # TranslateXRel: 0.45 of the width
        (TRANSLATE_Y, sign * level * 0.45 * height),
        (POSTERIZE, bits),
        (SOLARIZE, threshold),
        (SOLARIZE_ADD, torch.trunc(level * 110)),  # levels added below 128
    ):
        values = torch.where(ops == op, value, values)
    enhanced = (ops >= BRIGHTNESS) & (ops <= SHARPNESS)
    return torch.where(enhanced, enhance, values)


def _timm_policy(num_ops: int, magnitude: float, magnitude_std: float) -> Augment:
    """timm's RandAugment, ``inc1`` op set, drawn per image (see :func:`rand_augment`)."""

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = check_call(images, generator)
        _unit_images(images)
        b, device = images.shape[0], images.device
        shape = (num_ops, b)
        # timm's 15 ops are ALL_OPS without identity: 1 .. 15
        ops = torch.randint(IDENTITY + 1, len(ALL_OPS), shape, generator=generator, device=device)
        applied = torch.rand(shape, generator=generator, device=device) < 0.5
        noise = torch.randn(shape, generator=generator, device=device)
        negative = torch.rand(shape, generator=generator, device=device) > 0.5
        m = (magnitude + magnitude_std * noise).clamp(0, 10)  # (num_ops, B)
        values = timm_magnitudes(ops, m, negative, *images.shape[-2:])
        ops = torch.where(applied, ops, IDENTITY)
        for k in range(num_ops):  # a loop over the rounds, not over the images
            images = apply_ops(images, ops[k], values[k])
        return images

    augment.value_range = UNIT_RANGE
    return augment


def rand_augment(
    num_ops: int = 2,
    magnitude: float = 9,
    num_magnitude_bins: int = 31,
    *,
    scale: str = "torchvision",
    magnitude_std: float = 0.0,
) -> Augment:
    """RandAugment (Cubuk et al. 2020), drawn per image: ``num_ops`` ops, one after another.

    ``scale="torchvision"`` is torchvision's ``RandAugment``: ops uniform from the 14 of ``OPS``
    (identity included), random signs, all at bin ``magnitude`` of ``num_magnitude_bins``.
    ``scale="timm"`` is timm's ``rand-m{magnitude}-mstd{magnitude_std}-inc1`` (DeiT:
    ``rand-m9-mstd0.5-inc1``): ops uniform from timm's 15 (no identity), each applied with
    probability 1/2 at a magnitude from N(``magnitude``, ``magnitude_std``) clipped to [0, 10]
    (:func:`timm_magnitudes`). Unlike timm's, geometric ops sample the nearest pixel, translate by
    whole pixels and fill with zeros.

    Draws, in order: torchvision ``randint(0, 14, (num_ops, B))`` for the ops, then
    ``rand((num_ops, B)) <= 0.5`` for the signs; timm ``randint(1, 16, ...)`` into ``ALL_OPS``,
    ``rand < 0.5`` for applying them, ``randn`` for the magnitude noise, ``rand > 0.5`` for signs.

    Args:
        num_ops: ops applied one after another (2 in the paper, timm and DeiT).
        magnitude: torchvision: the bin, an int 0 .. ``num_magnitude_bins - 1`` (default 9 of 31);
            timm: a number in [0, 10] (DeiT: 9).
        num_magnitude_bins: torchvision's number of magnitude steps, at least 2; leave it at 31 on
            the timm scale.
        scale: ``"torchvision"`` or ``"timm"``.
        magnitude_std: timm's magnitude noise (``mstd``; DeiT: 0.5); 0 on the torchvision scale.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``, for images in [0, 1] (its
        ``value_range``, which ``fit`` checks once).

    Raises:
        TypeError / ValueError: arguments that are not numbers in range, or a setting of one scale
            given to the other; when called on the CPU, images outside [0, 1].

    Example:
        >>> augment = rand_augment(num_ops=2, magnitude=9)
        >>> augment(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])
        >>> deit = rand_augment(2, 9, scale="timm", magnitude_std=0.5)
        >>> deit(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Real photos.
    """
    _checks.integer("num_ops", num_ops, minimum=0, fix="use 2, as in the paper")
    bins = _checks.integer("num_magnitude_bins", num_magnitude_bins, minimum=2, fix="use 31")
    _checks.choice("scale", scale, SCALES)
    std = _checks.real("magnitude_std", magnitude_std, low=0.0, fix="DeiT uses 0.5 (timm's scale)")
    if scale == "timm":
        if bins != 31:
            raise ValueError(
                f"num_magnitude_bins={bins} is torchvision's scale; timm's magnitude is a number "
                "in [0, 10] without bins: leave num_magnitude_bins at 31."
            )
        m = _checks.real("magnitude", magnitude, low=0.0, high=10.0, fix="DeiT uses 9")
        return _timm_policy(num_ops, m, std)
    if std != 0:
        raise ValueError(
            f"magnitude_std={magnitude_std} is timm's magnitude noise; use scale='timm' "
            "(DeiT: rand_augment(2, 9, scale='timm', magnitude_std=0.5)), or 0 here."
        )
    _checks.integer("magnitude", magnitude, minimum=0, fix="use 9 (a bin of 31)")
    if magnitude >= bins:
        raise ValueError(
            f"magnitude={magnitude} must be below num_magnitude_bins={bins}; use 0 .. {bins - 1}."
        )
    return _policy(num_ops, magnitude, bins)


def trivial_augment_wide(num_magnitude_bins: int = 31) -> Augment:
    """TrivialAugmentWide (Müller and Hutter 2021), drawn per image: one op, a random magnitude.

    Each image draws one of ``OPS``, a bin uniform in ``0 .. num_magnitude_bins - 1`` and a sign,
    over torchvision's wide bins.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``, for images in [0, 1].

    Raises:
        TypeError / ValueError: a number of bins that is not an int >= 2; when called on the CPU,
            images outside [0, 1].

    Example:
        >>> augment = trivial_augment_wide()
        >>> augment(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Real photos.
    """
    bins = _checks.integer("num_magnitude_bins", num_magnitude_bins, minimum=2, fix="use 31")
    return _policy(1, None, bins)
