"""MixUp and CutMix: a batch of images mixed pairwise, with soft targets, as DeiT trains.

A mix is ``mix(images (B, C, H, W), labels (B,), generator) -> (images, targets (B, n_cls))`` on
the images' device; ``F.cross_entropy`` takes the targets as they are. Its ``num_classes``
attribute bounds the labels, which ``vitbook.train.fit`` checks once.

See chapter: Real photos.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vitbook import _checks
from vitbook.data.image_ops import check_call, values_on_host

__all__ = ["mixup_cutmix"]

Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def mixup_cutmix(
    n_cls: int,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    switch_prob: float = 0.5,
    label_smoothing: float = 0.0,
) -> Mix:
    """MixUp (Zhang et al. 2018) or CutMix (Yun et al. 2019) on a batch, as DeiT trains.

    One draw per batch (timm's batch mode): CutMix with probability ``switch_prob``, else MixUp,
    ``lam ~ Beta(alpha, alpha)``; image ``b`` is mixed with image ``B - 1 - b``. MixUp blends
    ``lam x + (1 - lam) x_flipped``; CutMix pastes a box of about ``(1 - lam) H W`` partner
    pixels (uniform centre, clipped) and sets ``lam`` to the share kept. Targets are
    ``lam y + (1 - lam) y_flipped``, ``y`` one-hot smoothed to ``1 - s + s / n_cls`` and
    ``s / n_cls``.

    Args:
        mixup_alpha: Beta parameter of MixUp; 0 turns MixUp off.
        cutmix_alpha: Beta parameter of CutMix; 0 turns CutMix off.
        switch_prob: probability of CutMix when both are on.
        label_smoothing: s in [0, 1).

    Returns:
        ``mix(images (B, C, H, W), labels (B,) int64, generator) -> (images, targets (B, n_cls))``.

    Raises:
        TypeError / ValueError: arguments out of range, or both alphas 0; when called on the CPU,
            labels outside ``0 .. n_cls - 1``.

    Example:
        >>> mix = mixup_cutmix(n_cls=10)
        >>> images, targets = mix(torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 3]),
        ...                       torch.Generator().manual_seed(0))
        >>> images.shape, targets.shape, targets.sum(1)
        (torch.Size([4, 3, 8, 8]), torch.Size([4, 10]), tensor([1., 1., 1., 1.]))

    See chapter: Real photos.
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
        images = check_call(images, generator)
        b, _, h, w = images.shape
        device = images.device
        if not isinstance(labels, torch.Tensor) or labels.dtype != torch.long:
            got = getattr(labels, "dtype", type(labels).__name__)
            raise TypeError(f"labels must be an int64 tensor of class indices, got {got}.")
        if labels.shape != (b,) or labels.device != device:
            got = f"{tuple(labels.shape)} on {labels.device}"
            raise ValueError(f"labels must have shape (B,) = ({b},) on {device}, got {got}.")
        if values_on_host(labels) and b and not 0 <= int(labels.min()) <= int(labels.max()) < n_cls:
            wrong = labels[(labels < 0) | (labels >= n_cls)].unique()[:5].tolist()
            raise ValueError(  # their one-hot row would be zeros: a target summing below 1
                f"labels hold {wrong}, outside the mix's classes 0 .. {n_cls - 1}; build it "
                f"with n_cls above every label (mixup_cutmix(n_cls=...)), or map each class to "
                "an index first."
            )

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

    mix.num_classes = n_cls  # fit checks the labels against it, once
    mix.label_smoothing = smoothing  # and refuses a loss that smooths them again
    return mix
