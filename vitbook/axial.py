"""Axial attention: attend along the rows of the patch grid, then along its columns.

Full self-attention over Gh * Gw patches costs O((Gh Gw)^2) per layer. Axial attention (Ho et al.
2019; Wang et al. 2020) lets each patch attend only to the patches in its own row (Gw of them), or
only to those in its own column (Gh): O(Gh Gw (Gh + Gw)). A row layer followed by a column layer
connects every pair of patches in two hops.

The implementation folds the other axis into the batch with einops, so that an ordinary
:class:`~vitbook.attention.MultiHeadSelfAttention` runs on many short sequences at once::

    rows:    (B, Gh*Gw, D) -> (B*Gh, Gw, D)   each row is one sequence
    columns: (B, Gh*Gw, D) -> (B*Gw, Gh, D)   each column is one sequence

**The class token.** A class token has no row and no column, so axial layers take patch tokens
only (N = Gh * Gw) and raise an error if given a prefix token. A ViT built from axial blocks drops
the class token and classifies the mean of the patch tokens (``pool="mean"``), as the axial
variants in the ViT paper's appendix do with global average pooling.

See chapter: The cost of attention and axial attention.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from vitbook import _checks
from vitbook.attention import MultiHeadSelfAttention
from vitbook.encoder import MLP

__all__ = ["AxialAttention", "AxialEncoderBlock", "axial_attention_mask"]

AXES = ("rows", "cols")


def axial_attention_mask(grid_size: int | tuple[int, int], axis: str) -> torch.Tensor:
    """The (N, N) boolean mask, N = Gh * Gw, that allows attention within a row or a column.

    ``mask[i, j]`` is True when patches i and j (row-major order) share a row (``axis="rows"``) or a
    column (``axis="cols"``). Full attention under this mask equals :class:`AxialAttention`.

    Example:
        >>> axial_attention_mask((2, 3), "rows").int()
        tensor([[1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [0, 0, 0, 1, 1, 1],
                [0, 0, 0, 1, 1, 1],
                [0, 0, 0, 1, 1, 1]], dtype=torch.int32)

    See chapter: The cost of attention and axial attention.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    _checks.choice("axis", axis, AXES)
    index = torch.arange(gh * gw)
    line = index // gw if axis == "rows" else index % gw  # the row (or column) of each patch
    return line[:, None] == line[None, :]


class AxialAttention(nn.Module):
    """Multi-head self-attention restricted to one axis of the patch grid.

    Args:
        embed_dim: D.
        num_heads: Nh.
        grid_size: (Gh, Gw) of the patch tokens.
        axis: ``"rows"`` (each patch attends to its row) or ``"cols"`` (to its column).
        qkv_bias, impl: as for :class:`~vitbook.attention.MultiHeadSelfAttention`.

    Shapes:
        forward: (B, Gh * Gw, D) -> (B, Gh * Gw, D): patch tokens in row-major order, no
            class token.

    Example:
        >>> attn = AxialAttention(embed_dim=12, num_heads=3, grid_size=(2, 3), axis="rows")
        >>> attn(torch.randn(4, 6, 12)).shape
        torch.Size([4, 6, 12])

    See chapter: The cost of attention and axial attention.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        grid_size: int | tuple[int, int],
        axis: str = "rows",
        qkv_bias: bool = True,
        impl: str = "explicit",
    ) -> None:
        super().__init__()
        self.grid_size = _checks.pair("grid_size", grid_size)
        self.axis = _checks.choice("axis", axis, AXES)
        self.attn = MultiHeadSelfAttention(embed_dim, num_heads, qkv_bias=qkv_bias, impl=impl)

    def extra_repr(self) -> str:
        return f"axis={self.axis!r}, grid_size={self.grid_size}"

    def _fold(self, x: torch.Tensor) -> torch.Tensor:
        gh, gw = self.grid_size
        _checks.tensor("tokens", x, 3, "(B, Gh * Gw, D)")
        if x.shape[1] != gh * gw:
            raise ValueError(
                f"axial attention got {x.shape[1]} tokens but grid_size=({gh}, {gw}) has {gh * gw} "
                "patches; pass patch tokens only (drop the class token and use pool='mean')."
            )
        if self.axis == "rows":
            return rearrange(x, "b (gh gw) d -> (b gh) gw d", gh=gh, gw=gw)  # one sequence per row
        return rearrange(x, "b (gh gw) d -> (b gw) gh d", gh=gh, gw=gw)  # one sequence per column

    def _unfold(self, x: torch.Tensor) -> torch.Tensor:
        gh, gw = self.grid_size
        if self.axis == "rows":
            return rearrange(x, "(b gh) gw d -> b (gh gw) d", gh=gh, gw=gw)
        return rearrange(x, "(b gw) gh d -> b (gh gw) d", gh=gh, gw=gw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._unfold(self.attn(self._fold(x)))

    def forward_with_weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Output and per-line weights: (B*Gh, Nh, Gw, Gw) for rows, (B*Gw, Nh, Gh, Gh) for cols."""
        out, weights = self.attn.forward_with_weights(self._fold(x))
        return self._unfold(out), weights


class AxialEncoderBlock(nn.Module):
    """An encoder block with row attention + MLP, then column attention + MLP (pre-norm).

    ::

        x = x + RowAttention(LayerNorm(x));     x = x + MLP(LayerNorm(x))
        x = x + ColumnAttention(LayerNorm(x));  x = x + MLP(LayerNorm(x))

    Shapes:
        forward: (B, Gh * Gw, D) -> (B, Gh * Gw, D), patch tokens only.

    Example:
        >>> block = AxialEncoderBlock(embed_dim=12, num_heads=3, grid_size=(2, 3))
        >>> block(torch.randn(2, 6, 12)).shape
        torch.Size([2, 6, 12])

    See chapter: The cost of attention and axial attention.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        grid_size: int | tuple[int, int],
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        norm_eps: float = 1e-6,
        attn_impl: str = "explicit",
    ) -> None:
        super().__init__()
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio={mlp_ratio} must be positive; ViT uses 4.0.")
        hidden = int(embed_dim * mlp_ratio)
        common = {"grid_size": grid_size, "qkv_bias": qkv_bias, "impl": attn_impl}
        self.row_norm1 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.row_attn = AxialAttention(embed_dim, num_heads, axis="rows", **common)
        self.row_norm2 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.row_mlp = MLP(embed_dim, hidden)
        self.col_norm1 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.col_attn = AxialAttention(embed_dim, num_heads, axis="cols", **common)
        self.col_norm2 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.col_mlp = MLP(embed_dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.row_attn(self.row_norm1(x))
        x = x + self.row_mlp(self.row_norm2(x))
        x = x + self.col_attn(self.col_norm1(x))
        return x + self.col_mlp(self.col_norm2(x))
