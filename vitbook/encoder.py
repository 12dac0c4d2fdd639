"""The Transformer encoder block: attention and an MLP, each inside a residual branch.

Pre-norm (ViT, ``norm_first=True``) and post-norm (the original Transformer)::

    x = x + Attention(LayerNorm(x))          x = LayerNorm(x + Attention(x))
    x = x + MLP(LayerNorm(x))                x = LayerNorm(x + MLP(x))

See chapter: The encoder block.
"""

from __future__ import annotations

import torch
from torch import nn

from vitbook import _checks
from vitbook.attention import MultiHeadSelfAttention

__all__ = ["MLP", "DropPath", "EncoderBlock"]


class DropPath(nn.Module):
    """Stochastic depth (Huang et al., 2016): zero a residual branch for random whole samples.

    In training each sample is kept with probability 1 - p and divided by 1 - p; eval mode passes
    it unchanged. Shapes: (B, ...) -> (B, ...).

    Example:
        >>> drop = DropPath(0.5).train()
        >>> _ = torch.manual_seed(0)
        >>> out = drop(torch.ones(6, 2, 3))
        >>> sorted(set(out.flatten().tolist()))  # whole samples are 0 or 1 / (1 - p)
        [0.0, 2.0]

    See chapter: Real photos.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = _checks.real("p", p, low=0, high=1, open_high=True, fix="timm uses 0.1 for ViT-B")

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        kept = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)  # (B, 1, ...)
        return x * kept / keep


class MLP(nn.Module):
    """The position-wise feed-forward network: Linear, GELU, Linear, applied to every token alone.

    ``hidden_features`` is 4 D in ViT; ``drop`` acts after the GELU and ``fc2`` in training.
    Shapes: (B, N, D) -> (B, N, out_features).

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
        # The exact (erf) form, in which timm and Hugging Face run the released ViT weights; the
        # authors' JAX code used Flax's default, the tanh approximation (at most ~5e-4 apart).
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
        mlp_ratio: the MLP's hidden width is ``int(D * mlp_ratio)``.
        norm_first: True for pre-norm (ViT), False for post-norm.
        norm_eps: LayerNorm epsilon (1e-6 in ViT and timm; PyTorch's default is 1e-5).
        attn_impl: ``"explicit"`` or ``"sdpa"``, see :class:`MultiHeadSelfAttention`.
        drop_path: the probability of dropping each residual branch (:class:`DropPath`).

    Shapes:
        forward: (B, N, D) -> (B, N, D); forward_with_weights also returns (B, Nh, N, N).
        mask: optional, passed to the attention (a relative position bias, for example).

    Raises:
        TypeError / ValueError: an argument of the wrong type or range; tokens that are not a
            (B, N, D) float tensor of the weights' dtype and device.

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
        drop_path: float = 0.0,
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
        self.drop_path1 = DropPath(drop_path)
        self.drop_path2 = DropPath(drop_path)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        _checks.tokens(x, self.attn.embed_dim, self.norm1.weight, "the block")
        if self.norm_first:
            x = x + self.drop_path1(self.attn(self.norm1(x), mask))
            return x + self.drop_path2(self.mlp(self.norm2(x)))
        x = self.norm1(x + self.drop_path1(self.attn(x, mask)))
        return self.norm2(x + self.drop_path2(self.mlp(x)))

    def forward_with_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _checks.tokens(x, self.attn.embed_dim, self.norm1.weight, "the block")
        if self.norm_first:
            out, weights = self.attn.forward_with_weights(self.norm1(x), mask)
            x = x + self.drop_path1(out)
            return x + self.drop_path2(self.mlp(self.norm2(x))), weights
        out, weights = self.attn.forward_with_weights(x, mask)
        x = self.norm1(x + self.drop_path1(out))
        return self.norm2(x + self.drop_path2(self.mlp(x))), weights
