"""The Transformer encoder block: attention and an MLP, each inside a residual branch.

Pre-norm (ViT, ``norm_first=True``)::

    x = x + Attention(LayerNorm(x))
    x = x + MLP(LayerNorm(x))

Post-norm (the original Transformer, ``norm_first=False``)::

    x = LayerNorm(x + Attention(x))
    x = LayerNorm(x + MLP(x))

See chapter: The encoder block.
"""

from __future__ import annotations

import torch
from torch import nn

from vitbook import _checks
from vitbook.attention import MultiHeadSelfAttention

__all__ = ["MLP", "EncoderBlock"]


class MLP(nn.Module):
    """The position-wise feed-forward network: Linear, GELU, Linear, applied to every token alone.

    Args:
        in_features: D.
        hidden_features: the inner width (4 D in ViT).
        out_features: defaults to ``in_features``.
        drop: dropout after the activation and after ``fc2`` (training only).

    Shapes:
        forward: (B, N, D) -> (B, N, out_features).

    Raises:
        TypeError / ValueError: sizes that are not positive ints; tokens that are not floating
            point, or not of the weights' dtype and device.

    Example:
        >>> MLP(8, 32)(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])

    See chapter: The encoder block.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        *,
        drop: float = 0.0,
    ) -> None:
        super().__init__()
        _checks.positive_int("in_features", in_features)
        _checks.positive_int("hidden_features", hidden_features)
        out_features = (
            in_features
            if out_features is None
            else _checks.positive_int("out_features", out_features)
        )
        self.fc1 = nn.Linear(in_features, hidden_features)
        # the exact (erf) form, as timm and Hugging Face run the ported weights; the authors'
        # JAX code trained with Flax's default, the tanh approximation (within 5e-4 of it)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.floating("tokens", x, "(B, N, D)")
        _checks.like("tokens", x, self.fc1.weight, "the MLP")
        x = self.drop1(self.act(self.fc1(x)))  # (B, N, hidden)
        return self.drop2(self.fc2(x))  # (B, N, out)


class EncoderBlock(nn.Module):
    """One Transformer encoder layer with the names of timm's ``Block``.

    Args:
        embed_dim: D.
        num_heads: Nh, must divide D.
        mlp_ratio: the MLP's hidden width is ``int(D * mlp_ratio)``.
        qkv_bias: whether the attention's ``qkv`` has a bias.
        norm_first: True for pre-norm (ViT), False for post-norm (original Transformer).
        norm_eps: LayerNorm epsilon (1e-6 in ViT and timm; PyTorch's default is 1e-5).
        attn_impl: ``"explicit"`` or ``"sdpa"``, see :class:`MultiHeadSelfAttention`.
        drop: dropout after attention and inside the MLP.
        attn_drop: dropout on the attention weights.

    Shapes:
        forward: (B, N, D) -> (B, N, D); forward_with_weights also returns (B, Nh, N, N).
        mask: optional, passed to the attention (a relative position bias, for example).

    Raises:
        TypeError / ValueError: a size, ratio, epsilon or flag of the wrong type or range (see
            :class:`vitbook.MultiHeadSelfAttention`); tokens that are not a (B, N, D) float
            tensor of the weights' dtype and device.

    Example:
        >>> block = EncoderBlock(embed_dim=12, num_heads=3)
        >>> out, weights = block.forward_with_weights(torch.randn(2, 5, 12))
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 12]), torch.Size([2, 3, 5, 5]))

    See chapter: The encoder block.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        norm_first: bool = True,
        norm_eps: float = 1e-6,
        attn_impl: str = "explicit",
        drop: float = 0.0,
        attn_drop: float = 0.0,
    ) -> None:
        super().__init__()
        _checks.real("mlp_ratio", mlp_ratio, low=0, open_low=True, fix="ViT uses 4.0")
        _checks.real("norm_eps", norm_eps, low=0, open_low=True, fix="timm uses 1e-6")
        self.norm_first = _checks.boolean("norm_first", norm_first)
        self.norm1 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.attn = MultiHeadSelfAttention(
            embed_dim,
            num_heads,
            qkv_bias=qkv_bias,
            impl=attn_impl,
            attn_drop=attn_drop,
            proj_drop=drop,
        )
        self.norm2 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.mlp = MLP(embed_dim, int(embed_dim * mlp_ratio), drop=drop)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def _check(self, x: torch.Tensor) -> None:
        _checks.tensor("tokens", x, 3, "(B, N, D)")
        _checks.like("tokens", x, self.norm1.weight, "the block")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self._check(x)
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask)
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.mlp(x))

    def forward_with_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(x)
        if self.norm_first:
            out, weights = self.attn.forward_with_weights(self.norm1(x), mask)
            x = x + out
            return x + self.mlp(self.norm2(x)), weights
        out, weights = self.attn.forward_with_weights(x, mask)
        x = self.norm1(x + out)
        return self.norm2(x + self.mlp(x)), weights
