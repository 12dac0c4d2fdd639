"""Axial attention: attend along the rows of the patch grid, then along its columns.

Each patch attends only to its row (Gw patches) or its column (Gh): O(Gh Gw (Gh + Gw)) per layer
instead of O((Gh Gw)^2); a row layer then a column layer connect every pair in two hops. The other
axis is folded into the batch, so an ordinary :class:`~vitbook.attention.MultiHeadSelfAttention`
runs on many short sequences::

    rows:    (B, Gh*Gw, D) -> (B*Gh, Gw, D)   each row is one sequence
    columns: (B, Gh*Gw, D) -> (B*Gw, Gh, D)   each column is one sequence

Axial layers take patch tokens only (a class token has no row or column) and refuse a prefix
token; an axial ViT classifies the mean of the patch tokens (``pool="mean"``).

See chapter: The cost of attention and axial attention.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from vitbook import _checks
from vitbook.attention import MultiHeadSelfAttention
from vitbook.encoder import MLP
from vitbook.patches import PatchEmbedding
from vitbook.positional import sincos_2d
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = ["AxialAttention", "AxialEncoderBlock", "AxialVisionTransformer", "axial_attention_mask"]

AXES = ("rows", "cols")


def axial_attention_mask(grid_size: int | tuple[int, int], axis: str) -> torch.Tensor:
    """The (N, N) boolean mask, N = Gh * Gw, that allows attention within a row or a column.

    Full attention under this mask equals :class:`AxialAttention`.

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

    ``axis`` is ``"rows"`` or ``"cols"``; ``qkv_bias`` and ``impl`` as for
    :class:`~vitbook.attention.MultiHeadSelfAttention`. Shapes: (B, Gh * Gw, D) -> (B, Gh * Gw, D),
    patch tokens in row-major order, no class token.

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


class AxialVisionTransformer(nn.Module):
    """A ViT whose encoder is a stack of :class:`AxialEncoderBlock`, classifying by mean pooling.

    ::

        z_0 = [x_1 E; ...; x_N E] + E_pos                 (B, Gh*Gw, D), no class token
        z_l = AxialEncoderBlock_l(z_{l-1}),  l = 1 .. L   (B, Gh*Gw, D)
        y   = head(mean_i LayerNorm(z_L)_i)               (B, num_classes)

    Takes a :class:`~vitbook.vit.ViTConfig` with ``class_token=False`` and ``pool="mean"``; each
    of the ``depth`` blocks holds two attention layers and two MLPs, so the parameters are those
    of the ViT with ``depth=2 * L``.

    Raises:
        TypeError: ``config`` is not a ViTConfig.
        ValueError: a class token, ``pool="cls"``, dropout, ``pos_embed="relative"`` or a
            convolutional stem, which axial blocks do not take.

    Example:
        >>> cfg = ViTConfig(img_size=8, patch_size=2, in_chans=1, embed_dim=16, depth=1,
        ...                 num_heads=2, num_classes=10, class_token=False, pool="mean")
        >>> model = AxialVisionTransformer(cfg)
        >>> model(torch.randn(3, 1, 8, 8)).shape
        torch.Size([3, 10])
        >>> from dataclasses import replace
        >>> sum(p.numel() for p in model.parameters()) == replace(cfg, depth=2).num_parameters()
        True

    See chapter: The cost of attention and axial attention.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        if not isinstance(config, ViTConfig):
            raise TypeError(
                f"config must be a ViTConfig, got {type(config).__name__}; build one with "
                "ViTConfig(..., class_token=False, pool='mean')."
            )
        if config.class_token or config.pool != "mean":
            raise ValueError(
                f"an axial ViT has no class token (a class token has no row or column), got "
                f"class_token={config.class_token}, pool={config.pool!r}; "
                "use class_token=False, pool='mean'."
            )
        if config.stem != "patch":
            raise ValueError(
                f"an axial ViT embeds patches with one convolution, got stem={config.stem!r}; "
                "use stem='patch'."
            )
        if config.pos_embed == "relative":
            raise ValueError(
                "pos_embed='relative' adds a bias to full attention's N x N logits, which axial "
                "blocks do not form; use pos_embed='learned', 'sincos2d' or 'none'."
            )
        if config.drop_rate or config.attn_drop_rate:
            raise ValueError(
                f"axial blocks have no dropout, got drop_rate={config.drop_rate}, "
                f"attn_drop_rate={config.attn_drop_rate}; set both to 0.0."
            )
        self.config = cfg = config
        d = cfg.embed_dim
        self.patch_embed = PatchEmbedding(cfg.img_size, cfg.patch_size, cfg.in_chans, d)
        self.cls_token = None  # see the module docstring
        if cfg.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, d))
        elif cfg.pos_embed == "sincos2d":
            table = sincos_2d(cfg.grid_size, d)[None]  # (1, Gh * Gw, D)
            self.register_buffer("pos_embed", table, persistent=False)
        else:
            self.pos_embed = None
        self.blocks = nn.ModuleList(
            AxialEncoderBlock(
                d,
                cfg.num_heads,
                grid_size=cfg.grid_size,
                mlp_ratio=cfg.mlp_ratio,
                qkv_bias=cfg.qkv_bias,
                norm_eps=cfg.norm_eps,
                attn_impl=cfg.attn_impl,
            )
            for _ in range(cfg.depth)
        )
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.head = nn.Linear(d, cfg.num_classes) if cfg.num_classes > 0 else nn.Identity()
        VisionTransformer.reset_parameters(self)  # the ViT's init scheme, on these modules

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)  # (B, Gh * Gw, D)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        for block in self.blocks:
            x = block(x)  # (B, Gh * Gw, D)
        return self.head(self.norm(x).mean(dim=1))  # mean over the patches: (B, num_classes)
