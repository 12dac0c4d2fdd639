"""A small convolutional network for the 8 x 8 digits, the baseline a ViT is measured against.

:class:`DigitsCNN` is the CNN of the training chapter (LeNet's lineage): three 3 x 3
convolutions with ReLU, one 2 x 2 max-pool after the second, global average pooling and a
linear head. With the default widths (32, 64, 160) it has 112,746 parameters, about as many as
the chapter's ViT; narrower widths give a CNN to match a smaller ViT.

See chapter: Training and classification.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DigitsCNN"]


class DigitsCNN(nn.Module):
    """Three 3 x 3 convolutions, one 2 x 2 max-pool, global average pooling, a linear head.

    Args:
        num_classes: K.
        channels: output channels of the three convolutions.
        in_chans: C of the input images.

    Shapes:
        forward: (B, C, H, W) -> (B, K); H and W even (the max-pool halves them).

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
        return self.head(self.features(images).mean(dim=(2, 3)))  # (B, K)
