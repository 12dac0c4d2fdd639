"""A convolutional stem: a few strided 3 x 3 convolutions in place of the patch embedding.

After Xiao et al. (2021): log2(P) stride-2 3 x 3 convolutions, widths doubling up to D (timm's
``ConvStem``), then a 1 x 1 convolution, ending on the same Gh x Gw grid of tokens::

    (B, C, H, W) -> [3x3 conv, stride 2, LayerNorm, GELU] x log2(P) -> 1x1 conv -> (B, Gh*Gw, D)

A ``depth`` above log2(P) adds stride-1 convolutions in front. The norm is a LayerNorm over the
channels (no running statistics, the same in train and eval mode) and the non-linearity GELU,
where the paper uses BatchNorm and ReLU. :func:`embedding_cost` counts parameters and MACs.

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from vitbook import _checks
from vitbook.patches import PatchEmbedding

__all__ = ["ConvPatchEmbedding", "conv_stem_layers", "embedding_cost"]


def conv_stem_layers(
    patch_size: int, embed_dim: int, depth: int | None = None
) -> list[tuple[int, int]]:
    """The stem's 3 x 3 convolutions as ``(out_channels, stride)``, first to last.

    Raises:
        ValueError: P not a power of 2 (at least 2), ``depth`` below log2(P), or D too narrow
            to halve log2(P) - 1 times or not a multiple of 2**(log2(P) - 1) (``D = 12`` with
            P = 16 would give widths 1, 3, 6, 12).

    Example:
        >>> conv_stem_layers(16, 192)
        [(24, 2), (48, 2), (96, 2), (192, 2)]
        >>> conv_stem_layers(2, 32, depth=2)
        [(32, 1), (32, 2)]

    See chapter: Can a ViT beat the CNN that taught it?
    """
    _checks.positive_int("patch_size", patch_size)
    _checks.positive_int("embed_dim", embed_dim)
    if patch_size < 2 or patch_size & (patch_size - 1):
        raise ValueError(
            f"a convolutional stem halves the image log2(P) times with stride-2 convolutions, "
            f"so patch_size must be a power of 2 (2, 4, 8, 16, ...), got {patch_size}; "
            "use stem='patch' for other patch sizes."
        )
    halvings = int(math.log2(patch_size))
    if depth is None:
        depth = halvings
    _checks.integer("stem_depth", depth, minimum=halvings,
                    fix=f"a stem for patch_size={patch_size} needs {halvings} stride-2 "
                        "convolutions; use None for exactly that many")  # fmt: skip
    step = 2 ** (halvings - 1)  # the first width is D / step
    if embed_dim < step:
        raise ValueError(
            f"embed_dim={embed_dim} is too narrow for a stem whose widths double "
            f"{halvings - 1} times up to it; use embed_dim >= {step}."
        )
    if embed_dim % step:
        floored = [embed_dim // 2 ** (halvings - 1 - i) for i in range(halvings)]
        below, above = embed_dim // step * step, (embed_dim // step + 1) * step
        raise ValueError(
            f"embed_dim={embed_dim} is not a multiple of {step}, so the stem's widths cannot "
            f"double {halvings - 1} times up to it (they would be {floored}); use embed_dim="
            f"{below} or {above}, or a smaller patch_size."
        )
    widths = [embed_dim // 2 ** (halvings - 1 - i) for i in range(halvings)]
    return [(widths[0], 1)] * (depth - halvings) + [(w, 2) for w in widths]


class _ConvNormAct(nn.Module):
    """3 x 3 convolution (no bias: the norm follows), LayerNorm over channels, GELU."""

    def __init__(self, in_chans: int, out_chans: int, stride: int, norm_eps: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chans, 3, stride=stride, padding=1, bias=False)
        self.norm = nn.LayerNorm(out_chans, eps=norm_eps)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = rearrange(self.conv(x), "b c h w -> b h w c")  # channels last, for the LayerNorm
        return rearrange(self.act(self.norm(x)), "b h w c -> b c h w")


class ConvPatchEmbedding(nn.Module):
    """A convolutional stem with the interface of :class:`vitbook.PatchEmbedding`.

    ``patch_size`` P is a power of 2; ``depth`` as :func:`conv_stem_layers`. Names:
    ``stem.{i}.conv`` / ``stem.{i}.norm``, and ``proj`` for the final 1 x 1 convolution.
    Shapes: (B, C, H, W) -> (B, Gh * Gw, D), row-major.

    Raises:
        ValueError / TypeError: as :class:`vitbook.PatchEmbedding` (sizes, channels, dtype,
            device; values are not checked here), and a P that is not a power of 2.

    Example:
        >>> stem = ConvPatchEmbedding(img_size=(32, 48), patch_size=4, in_chans=3, embed_dim=16)
        >>> [tuple(layer.conv.weight.shape) for layer in stem.stem]
        [(8, 3, 3, 3), (16, 8, 3, 3)]
        >>> stem.grid_size, stem(torch.randn(2, 3, 32, 48)).shape
        ((8, 12), torch.Size([2, 96, 16]))

    See chapter: Can a ViT beat the CNN that taught it?
    """

    def __init__(
        self,
        img_size: int | tuple[int, int],
        patch_size: int,
        in_chans: int,
        embed_dim: int,
        *,
        depth: int | None = None,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.img_size = _checks.pair("img_size", img_size)
        self.patch_size = _checks.positive_int("patch_size", patch_size)
        self.in_chans = _checks.positive_int("in_chans", in_chans)
        layers = conv_stem_layers(patch_size, embed_dim, depth)
        _checks.multiple_of("img_size height", self.img_size[0], "patch_size", patch_size)
        _checks.multiple_of("img_size width", self.img_size[1], "patch_size", patch_size)
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        widths = [in_chans] + [width for width, _ in layers]
        self.stem = nn.Sequential(
            *(
                _ConvNormAct(c_in, c_out, stride, norm_eps)
                for c_in, (c_out, stride) in zip(widths[:-1], layers, strict=True)
            )
        )
        self.proj = nn.Conv2d(widths[-1], embed_dim, kernel_size=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _checks.patch_inputs(images, self.in_chans, self.img_size, self.proj.weight)
        x = self.stem(images)  # (B, C', Gh, Gw): log2(P) halvings
        x = self.proj(x)  # (B, D, Gh, Gw)
        return rearrange(x, "b d gh gw -> b (gh gw) d")


def embedding_cost(module: nn.Module, img_size: int | tuple[int, int]) -> dict[str, int]:
    """Parameters and multiply-accumulates of one image through a patch embedding or stem.

    MACs are ``FlopCounterMode``'s count halved; ``module`` is e.g. ``model.patch_embed``.

    Example:
        >>> embed = PatchEmbedding(img_size=8, patch_size=2, in_chans=1, embed_dim=32)
        >>> embedding_cost(embed, 8)  # 16 patches x 4 pixels x 32 outputs
        {'parameters': 160, 'macs': 2048}

    See chapter: Can a ViT beat the CNN that taught it?
    """
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(module, (PatchEmbedding, ConvPatchEmbedding)):
        raise TypeError(
            f"module must be a PatchEmbedding or ConvPatchEmbedding, got "
            f"{type(module).__name__}; pass model.patch_embed."
        )
    h, w = _checks.pair("img_size", img_size)
    weight = module.proj.weight
    image = torch.zeros(1, module.in_chans, h, w, dtype=weight.dtype, device=weight.device)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(image)
    return {
        "parameters": sum(p.numel() for p in module.parameters()),
        "macs": counter.get_total_flops() // 2,
    }
