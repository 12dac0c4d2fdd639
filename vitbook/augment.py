"""Per-sample image augmentation on the device: crop and flip, RandAugment, MixUp and CutMix.

An augmentation is a callable ``augment(images, generator) -> images`` on a batch ``(B, C, H, W)``
of floats in [0, 1], on the CPU or a GPU, with a ``torch.Generator`` on the same device. Each
image gets its own random draws; the work is a fixed number of tensor operations whatever B is
(no Python loop over the batch); no value is read back to the host (no ``.item()``, no
boolean-mask indexing), so the GPU need not wait; the same generator state gives the same batch.
A batch mix ``mix(images, labels, generator) -> (images, targets)`` also returns soft targets
``(B, n_cls)`` for ``F.cross_entropy``. Ops run in float32 and return the input's dtype. Call them
outside ``torch.compile``, which cannot trace a ``torch.Generator`` argument (``apply_ops``,
which takes none, compiles without graph breaks).

torchvision 0.28's ``transforms.v2`` draws once per call: ``RandAugment`` and
``TrivialAugmentWide`` pick one op, magnitude and sign for a whole ``(B, C, H, W)`` tensor, so
the policies here are written out, with its op list and magnitude bins, drawn per image.

See chapter: Real photos on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from vitbook import _checks

__all__ = ["OPS", "apply_ops", "compose", "mixup_cutmix", "rand_augment", "random_crop_flip"]
__all__ += ["trivial_augment_wide"]

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]

# torchvision's RandAugment ops, in its order; ops 1..9 take a random sign.
OPS = (
    "identity", "shear_x", "shear_y", "translate_x", "translate_y", "rotate",
    "brightness", "color", "contrast", "sharpness",
    "posterize", "solarize", "autocontrast", "equalize",
)  # fmt: skip
(IDENTITY, SHEAR_X, SHEAR_Y, TRANSLATE_X, TRANSLATE_Y, ROTATE,
 BRIGHTNESS, COLOR, CONTRAST, SHARPNESS,
 POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE) = range(len(OPS))  # fmt: skip


def _check_call(images: object, generator: object) -> torch.Tensor:
    """Shape, dtype and device checks at call time (no values are read, so no host sync)."""
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

    See chapter: Real photos on a GPU.
    """
    padding = _checks.integer("padding", padding, fix="use 4 for 32 x 32 photos")
    flip = _checks.boolean("flip", flip)

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        images = _check_call(images, generator)
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


def apply_ops(images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    """Apply op ``OPS[ops[b]]`` at magnitude ``magnitudes[b]`` to each image ``b``.

    Magnitudes are in torchvision's units: shear factor (``x + m y``), pixels (cut to an int),
    degrees (counter-clockwise), enhancement ``m`` for the factor ``1 + m``, bits kept, and the
    solarize threshold in [0, 1]; identity, autocontrast and equalize ignore it. Geometric ops
    sample the nearest pixel through one ``F.grid_sample`` with per-image matrices, zeros
    outside; brightness, color, contrast and sharpness blend with their degenerate image in float
    (torchvision's float path); posterize, autocontrast and equalize act on the 256 levels
    ``round(255 x)`` as on uint8 images (torchvision's uint8 path and PIL), with integer
    arithmetic. Differences from torchvision: blends are not truncated to integer levels, and
    float posterize keeps ``round(255 x)``'s top bits (torchvision's float path floors
    ``x * 2**bits`` instead); otherwise the same formulas.

    Args:
        images: ``(B, C, H, W)`` floats in [0, 1], C = 1 or 3.
        ops: ``(B,)`` int64 indices into ``OPS``, on the images' device.
        magnitudes: ``(B,)`` floats, signed where the op takes a sign.

    Returns:
        ``(B, C, H, W)``, the images' dtype.

    Example:
        >>> images = torch.rand(2, 3, 4, 5)
        >>> ops = torch.tensor([OPS.index("rotate"), OPS.index("posterize")])
        >>> apply_ops(images, ops, torch.tensor([9.0, 7.0])).shape
        torch.Size([2, 3, 4, 5])

    See chapter: Real photos on a GPU.
    """
    images = _checks.images(images)
    b, c, h, w = images.shape
    for name, value in (("ops", ops), ("magnitudes", magnitudes)):
        if not isinstance(value, torch.Tensor) or value.shape != (b,):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{name} must be a tensor of shape (B,) = ({b},), got {shape}.")
    if ops.is_floating_point():
        raise TypeError(f"ops must hold integer indices into OPS, got dtype {ops.dtype}.")
    if c not in (1, 3):
        raise ValueError(f"images have C={c} channels; these ops need 1 (grey) or 3 (RGB).")
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

    level = (x * 255).round().long()  # the 256 levels of an 8-bit image
    drop = (8 - torch.trunc(m4)).clamp(0, 8).long()  # posterize keeps the top bits
    posterized = torch.where(drop > 0, (level >> drop << drop) / 255, x)
    out = torch.where(op == POSTERIZE, posterized, out)
    out = torch.where(op == SOLARIZE, torch.where(x >= m4, 1 - x, x), out)
    low = level.amin((-2, -1), keepdim=True)  # (B, C, 1, 1)
    high = level.amax((-2, -1), keepdim=True)
    stretched = (level - low) * 255 // (high - low).clamp(min=1)  # PIL's lut, exact
    out = torch.where(op == AUTOCONTRAST, torch.where(high > low, stretched, level) / 255, out)
    out = torch.where(op == EQUALIZE, _equalize(level) / 255, out)
    return out.to(images.dtype)


def _magnitude_table(
    wide: bool, bins: int, height: int, width: int, device: torch.device
) -> torch.Tensor:
    """``(len(OPS), bins)``: torchvision's magnitude bins per op, built on the device."""
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
        images = _check_call(images, generator)
        b, device = images.shape[0], images.device
        shape = (num_ops, b)
        ops = torch.randint(0, len(OPS), shape, generator=generator, device=device)
        if magnitude is None:
            bin_index = torch.randint(0, bins, shape, generator=generator, device=device)
        else:
            bin_index = torch.full(shape, magnitude, device=device)
        negative = torch.rand(shape, generator=generator, device=device) <= 0.5
        table = _magnitude_table(magnitude is None, bins, *images.shape[-2:], device)
        values = table[ops, bin_index]  # (num_ops, B)
        values = torch.where(negative & (ops >= SHEAR_X) & (ops <= SHARPNESS), -values, values)
        for k in range(num_ops):  # a loop over the rounds, not over the images
            images = apply_ops(images, ops[k], values[k])
        return images

    return augment


def rand_augment(num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31) -> Augment:
    """RandAugment (Cubuk et al. 2020), drawn per image: ``num_ops`` ops, each one of ``OPS``.

    Each image draws its own ops (uniform over the 14 of torchvision's ``RandAugment``, identity
    included) and signs; all use magnitude bin ``magnitude`` of ``num_magnitude_bins``, with
    torchvision's bins (rotate up to 30 degrees, translate up to 150/331 of the size, ...).
    See ``apply_ops`` for the ops and how they differ from torchvision's.

    Args:
        num_ops: ops applied one after another (2 in the paper's CIFAR-10 recipe).
        magnitude: the bin, 0 .. ``num_magnitude_bins - 1``; 9 of 31 is torchvision's default.
        num_magnitude_bins: number of magnitude steps, at least 2.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: for arguments that are not ints in range.

    Example:
        >>> augment = rand_augment(num_ops=2, magnitude=9)
        >>> augment(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Real photos on a GPU.
    """
    _checks.integer("num_ops", num_ops, minimum=0, fix="use 2, as in the paper")
    bins = _checks.integer("num_magnitude_bins", num_magnitude_bins, minimum=2, fix="use 31")
    _checks.integer("magnitude", magnitude, minimum=0, fix="use 9")
    if magnitude >= bins:
        raise ValueError(
            f"magnitude={magnitude} must be below num_magnitude_bins={bins}; use 0 .. {bins - 1}."
        )
    return _policy(num_ops, magnitude, bins)


def trivial_augment_wide(num_magnitude_bins: int = 31) -> Augment:
    """TrivialAugmentWide (Müller and Hutter 2021), drawn per image: one op, a random magnitude.

    Each image draws one of ``OPS``, a magnitude bin uniform in ``0 .. num_magnitude_bins - 1``
    and a sign, over torchvision's wide bins (rotate up to 135 degrees, translate up to 32
    pixels, posterize down to 2 bits, ...). See ``apply_ops`` for the ops.

    Args:
        num_magnitude_bins: number of magnitude steps, at least 2; 31 as in torchvision.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Raises:
        TypeError / ValueError: for a number of bins that is not an int >= 2.

    Example:
        >>> augment = trivial_augment_wide()
        >>> augment(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])

    See chapter: Real photos on a GPU.
    """
    bins = _checks.integer("num_magnitude_bins", num_magnitude_bins, minimum=2, fix="use 31")
    return _policy(1, None, bins)


def mixup_cutmix(
    n_cls: int,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    switch_prob: float = 0.5,
    label_smoothing: float = 0.0,
) -> Mix:
    """MixUp (Zhang et al. 2018) or CutMix (Yun et al. 2019) on a batch, as DeiT trains.

    One draw per batch, as in DeiT and timm's batch mode: CutMix with probability
    ``switch_prob``, else MixUp, with ``lam ~ Beta(alpha, alpha)``; image ``b`` is mixed with
    image ``B - 1 - b`` (the batch flipped). MixUp returns ``lam x + (1 - lam) x_flipped``;
    CutMix pastes a box of about ``(1 - lam) H W`` pixels from the partner, centred uniformly and
    clipped at the edges, and sets ``lam`` to the share of pixels kept. The targets are
    ``lam y + (1 - lam) y_flipped``, where ``y`` is one-hot, smoothed to ``1 - s + s / n_cls`` and
    ``s / n_cls``. Every draw stays on the device: no host sync.

    Args:
        n_cls: number of classes.
        mixup_alpha: Beta parameter of MixUp; 0 turns MixUp off.
        cutmix_alpha: Beta parameter of CutMix; 0 turns CutMix off.
        switch_prob: probability of CutMix when both are on.
        label_smoothing: s in [0, 1).

    Returns:
        ``mix(images (B, C, H, W), labels (B,) int64, generator) -> (images, targets (B, n_cls))``.

    Raises:
        TypeError / ValueError: for arguments out of range, or both alphas 0.

    Example:
        >>> mix = mixup_cutmix(n_cls=10)
        >>> images, targets = mix(torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 3]),
        ...                       torch.Generator().manual_seed(0))
        >>> images.shape, targets.shape, targets.sum(1)
        (torch.Size([4, 3, 8, 8]), torch.Size([4, 10]), tensor([1., 1., 1., 1.]))

    See chapter: Real photos on a GPU.
    """
    n_cls = _checks.integer("n_cls", n_cls, minimum=2, fix="use 10 for CIFAR-10")
    mixup_alpha = _checks.real("mixup_alpha", mixup_alpha, low=0.0, fix="use 0.8 (DeiT)")
    cutmix_alpha = _checks.real("cutmix_alpha", cutmix_alpha, low=0.0, fix="use 1.0 (DeiT)")
    switch_prob = _checks.real("switch_prob", switch_prob, low=0.0, high=1.0, fix="use 0.5")
    smoothing = _checks.real("label_smoothing", label_smoothing, low=0.0, high=1.0, open_high=True)
    if mixup_alpha == 0 and cutmix_alpha == 0:
        raise ValueError(
            "mixup_alpha=0 and cutmix_alpha=0 turn both mixes off; set one of them above 0 "
            "(DeiT: 0.8 and 1.0), or train without a mix."
        )
    off = smoothing / n_cls
    on = 1.0 - smoothing + off

    def mix(
        images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        images = _check_call(images, generator)
        b, _, h, w = images.shape
        device = images.device
        if not isinstance(labels, torch.Tensor) or labels.dtype != torch.long:
            got = getattr(labels, "dtype", type(labels).__name__)
            raise TypeError(f"labels must be an int64 tensor of class indices, got {got}.")
        if labels.shape != (b,) or labels.device != device:
            got = f"{tuple(labels.shape)} on {labels.device}"
            raise ValueError(f"labels must have shape (B,) = ({b},) on {device}, got {got}.")

        def beta(alpha: float) -> torch.Tensor:  # one Beta(alpha, alpha) draw, on the device
            if alpha == 0:
                return torch.ones((), device=device)
            pair = torch.full((2,), alpha, device=device)
            return torch._sample_dirichlet(pair, generator=generator)[0]  # as torch's Beta does

        if mixup_alpha > 0 and cutmix_alpha > 0:
            use_cutmix = torch.rand((), generator=generator, device=device) < switch_prob
        else:
            use_cutmix = torch.full((), cutmix_alpha > 0, device=device)
        lam_mixup, lam_cutmix = beta(mixup_alpha), beta(cutmix_alpha)

        def span(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            """The box's rows (or columns): a uniform centre, +-n sqrt(1 - lam) / 2, clipped."""
            centre = torch.randint(0, n, (), generator=generator, device=device)
            half = (n * (1 - lam_cutmix).sqrt()).floor().long() // 2
            start, end = (centre - half).clamp(0, n), (centre + half).clamp(0, n)
            index = torch.arange(n, device=device)
            return (index >= start) & (index < end), end - start

        rows, box_h = span(h)  # (H,)
        cols, box_w = span(w)  # (W,)
        box = rows[:, None] & cols[None, :]  # (H, W), True where the partner shows
        kept = 1 - box_h * box_w / (h * w)  # CutMix's lam: the share of pixels kept

        partner = images.flip(0)
        cut = torch.where(box, partner, images)
        blend = lam_mixup * images + (1 - lam_mixup) * partner
        mixed = torch.where(use_cutmix, cut, blend)
        lam = torch.where(use_cutmix, kept, lam_mixup).float()
        classes = torch.arange(n_cls, device=device)
        onehot = off + (on - off) * (labels[:, None] == classes).float()  # (B, n_cls), smoothed
        return mixed, lam * onehot + (1 - lam) * onehot.flip(0)

    return mix


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

    See chapter: Real photos on a GPU.
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

    return augment
