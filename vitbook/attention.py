"""Scaled dot-product attention, one head and many.

``Attention(Q, K, V) = softmax(Q K^T / sqrt(Dh)) V``. :func:`scaled_dot_product_attention` is
written out and returns the weights; ``impl="sdpa"`` calls PyTorch's fused
``torch.nn.functional.scaled_dot_product_attention``, which returns only the output. Modules
choose with an explicit ``impl`` (shown in their ``repr``); ``forward_with_weights`` always takes
the explicit path. Masks follow PyTorch: bool is True where attention is allowed, float is added
to the logits; an integer mask is refused.

See chapters: Attention (one head, masks) and Multi-head attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from vitbook import _checks

__all__ = ["MultiHeadSelfAttention", "SingleHeadAttention", "scaled_dot_product_attention"]

ATTENTION_IMPLS = ("explicit", "sdpa")


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out: logits, mask, softmax over keys, weighted sum of values.

    Args:
        q, k, v: (..., N, Dh) queries, (..., M, Dh) keys, (..., M, Dv) values.
        mask: broadcastable to (..., N, M); bool (True = may attend) or float of q's dtype
            (added to the logits). A query whose keys are all masked gets NaN weights.

    Returns:
        ``(out, weights)``: (..., N, Dv) and (..., N, M); each row of ``weights`` sums to 1.

    Raises:
        TypeError: q, k, v not floating point of one dtype; a mask neither bool nor of q's
            dtype (an integer 0/1 mask: convert with ``mask.bool()``).
        ValueError: shapes or devices that do not fit together. Values are not checked.

    Example:
        >>> q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
        >>> out, weights = scaled_dot_product_attention(q, k, v)
        >>> out.shape, weights.shape
        (torch.Size([2, 4, 3]), torch.Size([2, 4, 6]))
        >>> torch.allclose(weights.sum(-1), torch.ones(2, 4))
        True

    See chapter: Attention.
    """
    _checks.attention_inputs(q, k, v, mask)
    # Scale by Dh**-0.5 so that logits of unit-variance q and k keep unit variance and the
    # softmax does not saturate as Dh grows.
    logits = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5  # (..., N, M)
    if mask is not None:
        if mask.dtype == torch.bool:
            logits = logits.masked_fill(~mask, float("-inf"))
        else:
            logits = logits + mask
    weights = logits.softmax(dim=-1)  # (..., N, M)
    return weights @ v, weights  # (..., N, Dv), (..., N, M)


class SingleHeadAttention(nn.Module):
    """One head of self-attention: project tokens to queries, keys and values, then attend.

    ``head_dim`` Dh defaults to D. Shapes: (B, N, D) -> (B, N, Dh); ``forward_with_weights``
    also returns (B, N, N).

    Example:
        >>> head = SingleHeadAttention(embed_dim=8, head_dim=4)
        >>> out, weights = head.forward_with_weights(torch.randn(2, 5, 8))
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 4]), torch.Size([2, 5, 5]))

    See chapter: Attention.
    """

    def __init__(self, embed_dim: int, head_dim: int | None = None, *, bias: bool = True) -> None:
        super().__init__()
        self.embed_dim = _checks.positive_int("embed_dim", embed_dim)
        self.head_dim = _checks.positive_int(
            "head_dim", embed_dim if head_dim is None else head_dim
        )
        self.q = nn.Linear(embed_dim, self.head_dim, bias=bias)
        self.k = nn.Linear(embed_dim, self.head_dim, bias=bias)
        self.v = nn.Linear(embed_dim, self.head_dim, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_with_weights(x, mask)[0]

    def forward_with_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _checks.tokens(x, self.embed_dim, self.q.weight)
        return scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), mask)


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention as in ViT and timm's ``Attention``.

    One Linear ``qkv`` (D -> 3D, ordered q, k, v, each Nh heads of Dh = D / Nh), then ``proj``
    (D -> D); the layout of ``torch.nn.MultiheadAttention`` (``in_proj_weight``, ``out_proj``).
    ``impl``: ``"explicit"`` or ``"sdpa"`` for ``forward``. Dropouts act in training only.

    Shapes:
        forward: (B, N, D) -> (B, N, D); forward_with_weights also returns (B, Nh, N, N).
        mask: optional, broadcastable to (B, Nh, N, N), bool (True = may attend) or float.

    Raises:
        ValueError: D not divisible by Nh, unknown ``impl``, tokens of the wrong width.

    Example:
        >>> attn = MultiHeadSelfAttention(embed_dim=12, num_heads=3)
        >>> out, weights = attn.forward_with_weights(torch.randn(2, 7, 12))
        >>> out.shape, weights.shape
        (torch.Size([2, 7, 12]), torch.Size([2, 3, 7, 7]))

    See chapter: Multi-head attention.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        qkv_bias: bool = True,
        impl: str = "explicit",
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        self.embed_dim = _checks.positive_int("embed_dim", embed_dim)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        _checks.divisible("embed_dim", embed_dim, "num_heads", num_heads)
        self.impl = _checks.choice("impl", impl, ATTENTION_IMPLS)
        self.head_dim = embed_dim // num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, impl={self.impl!r}"

    def _split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _checks.tokens(x, self.embed_dim, self.qkv.weight)
        qkv = self.qkv(x)  # (B, N, 3D)
        q, k, v = rearrange(
            qkv, "b n (three heads dh) -> three b heads n dh", three=3, heads=self.num_heads
        )
        return q, k, v  # each (B, Nh, N, Dh)

    def _merge_heads(self, out: torch.Tensor) -> torch.Tensor:
        out = rearrange(out, "b heads n dh -> b n (heads dh)")  # concatenate the heads: (B, N, D)
        return self.proj_drop(self.proj(out))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.impl == "explicit":
            return self.forward_with_weights(x, mask)[0]
        q, k, v = self._split_heads(x)
        _checks.mask(mask, (*q.shape[:-1], k.shape[-2]), q)
        dropout_p = self.attn_drop.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return self._merge_heads(out)

    def forward_with_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self._split_heads(x)
        out, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, Nh, N, Dh), (B, Nh, N, N)
        if self.training and self.attn_drop.p > 0:
            out = self.attn_drop(weights) @ v  # dropout acts on the weights, not on the output
        return self._merge_heads(out), weights
