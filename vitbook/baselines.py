"""Convolutional networks, the baselines a ViT is measured against.

:class:`DigitsCNN`, the training chapter's CNN for the 8 x 8 digits (112,746 parameters at its
default widths, about the chapter's ViT), and :class:`CifarResNet18`, ResNet-18 (He et al.,
2016) with the usual 32 x 32 stem (11,173,962 parameters for 10 classes).

See chapters: Training and classification; Real photos.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["CifarResNet18", "DigitsCNN"]


class DigitsCNN(nn.Module):
    """Three 3 x 3 convolutions, one 2 x 2 max-pool, global average pooling, a linear head.

    Args:
        channels: output channels of the three convolutions; narrower ones match a smaller ViT.
        in_chans: C of the input images.

    Shapes:
        forward: (B, C, H, W) -> (B, n_cls); H and W even (the max-pool halves them).

    Raises:
        ValueError: ``channels`` is not three positive ints.

    Example:
        >>> cnn = DigitsCNN()
        >>> sum(p.numel() for p in cnn.parameters())
        112746
        >>> DigitsCNN(channels=(16, 32, 48))(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])

    See chapter: Training and classification.
    """

    def __init__(
        self,
        num_classes: int = 10,
        *,
        channels: tuple[int, int, int] = (32, 64, 160),
        in_chans: int = 1,
    ) -> None:
        super().__init__()
        channels = tuple(channels)
        if len(channels) != 3 or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels
        ):
            raise ValueError(
                f"channels={channels!r} must be three positive ints, one per convolution; "
                "the training chapter uses (32, 64, 160)."
            )
        c1, c2, c3 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_chans, c1, kernel_size=3, padding=1),
            nn.ReLU(),  # (B, c1, H, W)
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),  # (B, c2, H, W)
            nn.MaxPool2d(2),  # (B, c2, H/2, W/2)
            nn.Conv2d(c2, c3, kernel_size=3, padding=1),
            nn.ReLU(),  # (B, c3, H/2, W/2)
        )
        self.head = nn.Linear(c3, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).mean(dim=(2, 3)))  # (B, n_cls)


class _BasicBlock(nn.Module):
    """Two 3 x 3 convolutions with batch norm, added to a shortcut (1 x 1 if the shape changes)."""

    def __init__(self, in_chans: int, out_chans: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, out_chans, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_chans)
        self.conv2 = nn.Conv2d(out_chans, out_chans, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_chans)
        self.shortcut = nn.Identity()
        if stride != 1 or in_chans != out_chans:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_chans, out_chans, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_chans),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet18(nn.Module):
    """ResNet-18 for 32 x 32 photos: a 3 x 3 stem, four stages of two residual blocks each.

    The stem is one 3 x 3 convolution without max-pool (ImageNet's is 7 x 7, stride 2, then a
    max-pool); stages of 64, 128, 256 and 512 channels, the last three halving the resolution.

    Shapes:
        forward: (B, C, H, W) -> (B, n_cls).

    Example:
        >>> model = CifarResNet18()
        >>> sum(p.numel() for p in model.parameters())
        11173962
        >>> model(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 10])

    See chapter: Real photos.
    """

    def __init__(self, num_classes: int = 10, *, in_chans: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_chans, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()
        )
        stages, width = [], 64
        for out_chans, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages += [_BasicBlock(width, out_chans, stride), _BasicBlock(out_chans, out_chans, 1)]
            width = out_chans
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(512, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(images))  # (B, 512, H / 8, W / 8)
        return self.head(x.mean(dim=(2, 3)))  # (B, n_cls)
