"""Position information for a set of patch tokens.

Fixed sine-cosine tables in 1D and 2D, a learned embedding, its resampling to another image size,
and a relative position bias added to the attention logits.

See chapter: Positional encodings.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from vitbook import _checks

__all__ = [
    "LearnedPositionEmbedding",
    "RelativePositionBias",
    "resample_pos_embed",
    "sincos_1d",
    "sincos_2d",
]


def _sincos(positions: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """Interleaved sine-cosine table for arbitrary (float) positions: (N,) -> (N, dim)."""
    # Frequencies base^(-2k/dim) for k = 0 .. dim/2 - 1: wavelengths from 2*pi to base * 2*pi.
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * freqs[None, :]  # (N, dim/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (N, dim/2, 2)
    return rearrange(table, "n k two -> n (k two)").to(torch.float32)


def sincos_1d(num_positions: int, dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The fixed sine-cosine position encoding of *Attention Is All You Need*.

    ``PE[pos, 2k] = sin(pos / base**(2k / dim))`` and
    ``PE[pos, 2k + 1] = cos(pos / base**(2k / dim))``:
    channels come in (sin, cos) pairs, fastest frequency first. Returns (N, D) float32 for
    positions 0 .. N - 1; D must be even.

    Raises:
        ValueError: ``dim`` is odd, or a size is not positive.

    Example:
        >>> table = sincos_1d(4, 6)
        >>> table.shape
        torch.Size([4, 6])
        >>> table[0].tolist()  # position 0: sin 0 = 0, cos 0 = 1
        [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]

    See chapter: Positional encodings.
    """
    _checks.positive_int("num_positions", num_positions)
    _checks.positive_int("dim", dim)
    if dim % 2:
        raise ValueError(
            f"dim={dim} must be even for sine-cosine pairs; use {dim - 1 or 2} or {dim + 1}."
        )
    _checks.real("base", base, fix="the usual value is 10000")
    if not base > 1:
        raise ValueError(f"base={base} must be greater than 1; the usual value is 10000.")
    return _sincos(torch.arange(num_positions), dim, base)


def sincos_2d(grid_size: int | tuple[int, int], dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The 2D sine-cosine position encoding (as in MAE and "Better plain ViT baselines").

    Channels ``[ sincos_1d(row, D/2) | sincos_1d(column, D/2) ]``; rows in the row-major patch
    order of :func:`vitbook.patchify`. Returns (Gh * Gw, D) float32 for ``grid_size`` (Gh, Gw)
    or G; D must be a multiple of 4.

    Raises:
        ValueError: ``dim`` is not a multiple of 4, or a size is not positive.

    Example:
        >>> sincos_2d((3, 5), 8).shape
        torch.Size([15, 8])

    See chapter: Positional encodings.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    _checks.positive_int("dim", dim)
    if dim % 4:
        lower, upper = dim - dim % 4, dim - dim % 4 + 4
        options = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(
            f"dim={dim} is not a multiple of 4: sincos_2d gives half of dim to rows and half to "
            f"columns, each as sine-cosine pairs; use dim={options}."
        )
    _checks.real("base", base, fix="the usual value is 10000")
    if not base > 1:
        raise ValueError(f"base={base} must be greater than 1; the usual value is 10000.")
    rows = torch.arange(gh).repeat_interleave(gw)  # (Gh * Gw,) row index of each patch
    cols = torch.arange(gw).repeat(gh)  # (Gh * Gw,) column index of each patch
    return torch.cat([_sincos(rows, dim // 2, base), _sincos(cols, dim // 2, base)], dim=1)


class LearnedPositionEmbedding(nn.Module):
    """One learned D-vector per position, added to the tokens (the original ViT's choice).

    ``weight`` (1, N, D), truncated normal with std 0.02. Shapes: (B, N, D) -> (B, N, D).

    Example:
        >>> embed = LearnedPositionEmbedding(num_positions=5, dim=8)
        >>> embed(torch.zeros(2, 5, 8)).shape
        torch.Size([2, 5, 8])

    See chapter: Positional encodings.
    """

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        _checks.positive_int("num_positions", num_positions)
        _checks.positive_int("dim", dim)
        self.weight = nn.Parameter(torch.zeros(1, num_positions, dim))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _checks.tensor("tokens", tokens, 3, "(B, N, D)")
        if tokens.shape[1:] != self.weight.shape[1:]:
            raise ValueError(
                f"tokens have shape (N, D)={tuple(tokens.shape[1:])} but the embedding has "
                f"{tuple(self.weight.shape[1:])}; build it with the model's token count and width."
            )
        return tokens + self.weight


def resample_pos_embed(
    pos_embed: torch.Tensor,
    new_grid_size: int | tuple[int, int],
    *,
    old_grid_size: int | tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
) -> torch.Tensor:
    """Move learned position embeddings to another patch grid, e.g. to fine-tune at a new size.

    ``pos_embed`` (1, num_prefix_tokens + Gh * Gw, D) -> (1, num_prefix_tokens + Gh' * Gw', D):
    the prefix rows are kept, the patch rows interpolated in 2D (``mode`` ``"bicubic"``,
    ``"bilinear"`` or ``"nearest"``). ``old_grid_size`` defaults to a square.

    Raises:
        ValueError: the row count does not match the grid, or the old grid cannot be inferred.

    Example:
        >>> old = torch.randn(1, 1 + 4 * 4, 8)
        >>> resample_pos_embed(old, (6, 6)).shape
        torch.Size([1, 37, 8])
        >>> torch.equal(resample_pos_embed(old, 4), old)  # same grid: unchanged
        True

    See chapter: Positional encodings.
    """
    _checks.tensor("pos_embed", pos_embed, 3, "(1, num_prefix_tokens + Gh * Gw, D)")
    if (
        isinstance(num_prefix_tokens, bool)
        or not isinstance(num_prefix_tokens, int)
        or num_prefix_tokens < 0
    ):
        raise ValueError(
            f"num_prefix_tokens={num_prefix_tokens!r} must be an int >= 0 (1 with a class token)."
        )
    _checks.choice("mode", mode, ("bicubic", "bilinear", "nearest"))
    new_gh, new_gw = _checks.pair("new_grid_size", new_grid_size)
    num_patches = pos_embed.shape[1] - num_prefix_tokens
    if old_grid_size is None:
        side = math.isqrt(max(num_patches, 0))
        if side * side != num_patches or side == 0:
            raise ValueError(
                f"pos_embed has {num_patches} patch rows (after {num_prefix_tokens} prefix rows), "
                "which is not a square grid; pass old_grid_size=(Gh, Gw)."
            )
        old_grid_size = side
    old_gh, old_gw = _checks.pair("old_grid_size", old_grid_size)
    if old_gh * old_gw != num_patches:
        raise ValueError(
            f"pos_embed has {num_patches} patch rows but old_grid_size=({old_gh}, {old_gw}) has "
            f"{old_gh * old_gw} cells; check old_grid_size and num_prefix_tokens."
        )
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    grid = rearrange(patches, "1 (gh gw) d -> 1 d gh gw", gh=old_gh, gw=old_gw)
    # Interpolate in float32 even for half-precision weights: bicubic on half is not supported
    # everywhere.
    kwargs = {} if mode == "nearest" else {"align_corners": False}
    grid = F.interpolate(grid.float(), size=(new_gh, new_gw), mode=mode, **kwargs).to(
        pos_embed.dtype
    )
    patches = rearrange(grid, "1 d gh gw -> 1 (gh gw) d")
    return torch.cat([prefix, patches], dim=1)


class RelativePositionBias(nn.Module):
    """A learned bias for every head and every 2D offset between two patches, added to the logits.

    ``bias[h, i, j] = table[offset(i, j), h]`` over the (2 Gh - 1)(2 Gw - 1) offsets (Swin, BEiT);
    a float mask for :func:`vitbook.attention.scaled_dot_product_attention`. Prefix tokens get
    no bias. Shapes: forward () -> (Nh, N, N), N = num_prefix_tokens + Gh * Gw.

    Example:
        >>> bias = RelativePositionBias(grid_size=(2, 3), num_heads=4, num_prefix_tokens=1)
        >>> bias().shape
        torch.Size([4, 7, 7])

    See chapter: Positional encodings.
    """

    def __init__(
        self, grid_size: int | tuple[int, int], num_heads: int, *, num_prefix_tokens: int = 0
    ) -> None:
        super().__init__()
        gh, gw = self.grid_size = _checks.pair("grid_size", grid_size)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        if (
            isinstance(num_prefix_tokens, bool)
            or not isinstance(num_prefix_tokens, int)
            or num_prefix_tokens < 0
        ):
            raise ValueError(f"num_prefix_tokens={num_prefix_tokens!r} must be an int >= 0.")
        self.num_prefix_tokens = num_prefix_tokens
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * gh - 1) * (2 * gw - 1), num_heads)
        )
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        rows = torch.arange(gh).repeat_interleave(gw)
        cols = torch.arange(gw).repeat(gh)
        d_row = rows[:, None] - rows[None, :] + gh - 1  # (Gh*Gw, Gh*Gw), in 0 .. 2 Gh - 2
        d_col = cols[:, None] - cols[None, :] + gw - 1
        self.register_buffer(
            "relative_position_index", d_row * (2 * gw - 1) + d_col, persistent=False
        )

    def forward(self) -> torch.Tensor:
        n = self.relative_position_index.shape[0]
        bias = self.relative_position_bias_table[
            self.relative_position_index.flatten()
        ]  # (N*N, Nh)
        bias = rearrange(bias, "(i j) heads -> heads i j", i=n, j=n)
        return F.pad(bias, (self.num_prefix_tokens, 0, self.num_prefix_tokens, 0))
