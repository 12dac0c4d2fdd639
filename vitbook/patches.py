"""Images as sequences of patches.

An image (B, C, H, W) becomes Gh * Gw patches of P x P pixels (Gh = H / P, Gw = W / P), in
row-major grid order (patch k at row ``k // Gw``, column ``k % Gw``), each laid out
``(c ph pw)``, the order of ``conv.weight.flatten(1)``.

See chapter: Images as sequences of patches.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from vitbook import _checks

__all__ = [
    "LinearPatchEmbedding",
    "PatchEmbedding",
    "conv_weight_from_linear",
    "linear_weight_from_conv",
    "patchify",
    "unpatchify",
]


def patchify(images: torch.Tensor, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """Cut images into non-overlapping patches and flatten each one.

    (B, C, H, W) float -> (B, Gh * Gw, C * ph * pw), row-major, each ``(c ph pw)``;
    ``patch_size`` is P or (ph, pw).

    Raises:
        TypeError: ``images`` is not a floating-point tensor.
        ValueError: ``images`` is not 4-D, or H or W is not a multiple of the patch size.

    Example:
        >>> images = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)
        >>> patchify(images, 2).shape  # Gh, Gw = 2, 3; 3 * 2 * 2 = 12 values per patch
        torch.Size([2, 6, 12])

    See chapter: Images as sequences of patches.
    """
    ph, pw = _checks.pair("patch_size", patch_size)
    _checks.images(images, (ph, pw))
    return rearrange(images, "b c (gh ph) (gw pw) -> b (gh gw) (c ph pw)", ph=ph, pw=pw)


def unpatchify(
    patches: torch.Tensor,
    patch_size: int | tuple[int, int],
    grid_size: int | tuple[int, int],
) -> torch.Tensor:
    """Reassemble images from their patches: the inverse of :func:`patchify`.

    (B, Gh * Gw, C * ph * pw) -> (B, C, Gh * ph, Gw * pw); ``grid_size`` is (Gh, Gw) or G.

    Raises:
        ValueError: the number of patches is not Gh * Gw, or the patch length is not a multiple
            of ph * pw.

    Example:
        >>> images = torch.randn(2, 3, 4, 6)
        >>> torch.equal(unpatchify(patchify(images, 2), 2, (2, 3)), images)
        True

    See chapter: Images as sequences of patches.
    """
    ph, pw = _checks.pair("patch_size", patch_size)
    gh, gw = _checks.pair("grid_size", grid_size)
    _checks.tensor("patches", patches, 3, "(B, Gh * Gw, C * ph * pw)")
    if patches.shape[1] != gh * gw:
        raise ValueError(
            f"patches has {patches.shape[1]} patches but grid_size=({gh}, {gw}) needs {gh * gw}; "
            "pass the grid the patches came from."
        )
    _checks.multiple_of("patch length", patches.shape[2], "ph * pw", ph * pw)
    return rearrange(patches, "b (gh gw) (c ph pw) -> b c (gh ph) (gw pw)", gh=gh, ph=ph, pw=pw)


class PatchEmbedding(nn.Module):
    """Patchify and project each patch to D dimensions with one Conv2d (kernel = stride = P).

    timm's ``PatchEmbed``: ``proj`` is ``nn.Conv2d(in_chans, embed_dim, P, stride=P)``.
    ``img_size`` is (H, W) or one int. Shapes: (B, C, H, W) -> (B, Gh * Gw, D), row-major.
    Values are not checked here (``fit``, ``predict`` and ``evaluate`` do, where data enter).

    Raises:
        ValueError: an image size that is not a multiple of P, a channel count or image size that
            differs from the one the module was built for, or images on another device.
        TypeError: images that are not a floating-point tensor of the weights' dtype (the fix,
            e.g. ``images.float()``, is in the message).

    Example:
        >>> embed = PatchEmbedding(img_size=(32, 48), patch_size=16, in_chans=3, embed_dim=8)
        >>> embed.grid_size, embed.num_patches
        ((2, 3), 6)
        >>> embed(torch.randn(2, 3, 32, 48)).shape
        torch.Size([2, 6, 8])

    See chapter: Images as sequences of patches.
    """

    def __init__(
        self, img_size: int | tuple[int, int], patch_size: int, in_chans: int, embed_dim: int
    ) -> None:
        super().__init__()
        self.img_size = _checks.pair("img_size", img_size)
        self.patch_size = _checks.positive_int("patch_size", patch_size)
        self.in_chans = _checks.positive_int("in_chans", in_chans)
        _checks.positive_int("embed_dim", embed_dim)
        _checks.multiple_of("img_size height", self.img_size[0], "patch_size", patch_size)
        _checks.multiple_of("img_size width", self.img_size[1], "patch_size", patch_size)
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _checks.patch_inputs(images, self.in_chans, self.img_size, self.proj.weight)
        x = self.proj(images)  # (B, D, Gh, Gw)
        return rearrange(x, "b d gh gw -> b (gh gw) d")


class LinearPatchEmbedding(nn.Module):
    """The same map as :class:`PatchEmbedding`, written as patchify followed by ``nn.Linear``.

    ``proj`` is ``nn.Linear(C * P * P, D)``, the ViT paper's E; :func:`linear_weight_from_conv`
    copies a :class:`PatchEmbedding`'s weights. Shapes: (B, C, H, W) -> (B, Gh * Gw, D).

    Raises:
        TypeError / ValueError: as :class:`PatchEmbedding`, for any image size that P tiles.

    Example:
        >>> conv = PatchEmbedding(img_size=8, patch_size=4, in_chans=3, embed_dim=5)
        >>> linear = LinearPatchEmbedding(patch_size=4, in_chans=3, embed_dim=5)
        >>> with torch.no_grad():
        ...     _ = linear.proj.weight.copy_(linear_weight_from_conv(conv.proj.weight))
        ...     _ = linear.proj.bias.copy_(conv.proj.bias)
        >>> images = torch.randn(2, 3, 8, 8)
        >>> torch.allclose(linear(images), conv(images), atol=1e-6)
        True

    See chapter: Images as sequences of patches.
    """

    def __init__(self, patch_size: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.patch_size = _checks.positive_int("patch_size", patch_size)
        self.in_chans = _checks.positive_int("in_chans", in_chans)
        _checks.positive_int("embed_dim", embed_dim)
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _checks.patch_inputs(images, self.in_chans, None, self.proj.weight)
        return self.proj(patchify(images, self.patch_size))  # (B, Gh * Gw, D)


def linear_weight_from_conv(conv_weight: torch.Tensor) -> torch.Tensor:
    """Map a patch-embedding Conv2d weight (D, C, P, P) to the Linear weight (D, C * P * P).

    Example:
        >>> linear_weight_from_conv(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 48])

    See chapter: Images as sequences of patches.
    """
    _checks.tensor("conv_weight", conv_weight, 4, "(D, C, P, P)")
    return rearrange(conv_weight, "d c ph pw -> d (c ph pw)")


def conv_weight_from_linear(
    linear_weight: torch.Tensor, in_chans: int, patch_size: int
) -> torch.Tensor:
    """Map a Linear patch-embedding weight (D, C * P * P) back to the Conv2d weight (D, C, P, P).

    Example:
        >>> weight = torch.randn(8, 3, 4, 4)
        >>> torch.equal(conv_weight_from_linear(linear_weight_from_conv(weight), 3, 4), weight)
        True

    See chapter: Images as sequences of patches.
    """
    _checks.tensor("linear_weight", linear_weight, 2, "(D, C * P * P)")
    _checks.positive_int("in_chans", in_chans)
    _checks.positive_int("patch_size", patch_size)
    if linear_weight.shape[1] != in_chans * patch_size * patch_size:
        raise ValueError(
            f"linear_weight has {linear_weight.shape[1]} input features but in_chans={in_chans} "
            f"and patch_size={patch_size} need {in_chans * patch_size * patch_size}; "
            "pass the in_chans and patch_size the layer was built with."
        )
    return rearrange(
        linear_weight, "d (c ph pw) -> d c ph pw", c=in_chans, ph=patch_size, pw=patch_size
    )
