"""The Vision Transformer: patch embedding, class token, position embeddings, encoder, head.

::

    z_0 = [x_class; x_1 E; ...; x_N E] + E_pos            (B, 1 + Gh*Gw, D)
    z_l = EncoderBlock_l(z_{l-1}),   l = 1 .. L           (B, N, D)
    y   = head(LayerNorm(z_L)[:, 0])                      (B, num_classes)

Names are timm's (``patch_embed.proj``, ``cls_token``, ``pos_embed``, ``blocks.{i}.norm1`` /
``attn.qkv`` / ``attn.proj`` / ``norm2`` / ``mlp.fc1`` / ``mlp.fc2``, ``norm``, ``head``), so
state dicts move between the two. ``distilled=True`` is DeiT's distilled ViT (a ``dist_token``
after the class token and a ``head_dist``, as timm's ``VisionTransformerDistilled``);
``stem="conv"`` uses :class:`vitbook.stem.ConvPatchEmbedding`. Why: the chapter *Can a ViT beat
the CNN that taught it?*

See chapter: The full model.
"""

from __future__ import annotations

import dataclasses

import torch
from einops import repeat
from torch import nn

from vitbook import _checks
from vitbook.config import PRESETS, ViTConfig, check_fields
from vitbook.encoder import EncoderBlock
from vitbook.patches import PatchEmbedding
from vitbook.positional import RelativePositionBias, sincos_2d
from vitbook.stem import ConvPatchEmbedding

__all__ = ["PRESETS", "ViTConfig", "VisionTransformer", "check_fields"]  # config re-exported


class VisionTransformer(nn.Module):
    """The ViT of Dosovitskiy et al. (2021), state-dict compatible with timm.

    Initialised as timm: Linear weights, ``pos_embed``, ``dist_token`` and relative bias tables
    truncated normal 0.02 with zero biases, ``cls_token`` normal 1e-6, LayerNorms (1, 0), convs
    at PyTorch's default. A sine-cosine table is a non-persistent buffer; prefix tokens get
    zero rows of it and no relative bias.

    Shapes:
        forward: (B, C, H, W) -> (B, num_classes) logits; with ``distilled=True`` in train
            mode, a tuple of two (B, num_classes): the class head's and the distillation
            head's logits.
        forward_features: (B, C, H, W) -> (B, N, D), after the final LayerNorm.
        forward_heads: (B, N, D) features -> both heads' logits (distilled models only).
        forward_with_attention: (B, C, H, W) -> (logits, [(B, Nh, N, N)] * depth).

    Raises:
        TypeError: ``config`` is not a ViTConfig; images that are not float, or not of the
            weights' dtype (convert with ``images.float()``).
        ValueError: images not 4-D, of another channel count or size than the config (see
            :func:`vitbook.resample_pos_embed` to change size), or on another device than the
            model.

    Example:
        >>> cfg = ViTConfig(img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
        ...                 num_classes=10)
        >>> model = VisionTransformer(cfg)
        >>> logits, attn = model.forward_with_attention(torch.randn(2, 3, 32, 32))
        >>> logits.shape, len(attn), attn[0].shape
        (torch.Size([2, 10]), 2, torch.Size([2, 3, 17, 17]))
        >>> sum(p.numel() for p in model.parameters()) == cfg.num_parameters()
        True

    See chapter: The full model.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        if not isinstance(config, ViTConfig):
            raise TypeError(
                f"config must be a ViTConfig, got {type(config).__name__}; "
                "build one with ViTConfig(...) or ViTConfig.from_name('ViT-B/16')."
            )
        self.config = cfg = config
        d = cfg.embed_dim
        if cfg.stem == "conv":
            self.patch_embed = ConvPatchEmbedding(
                cfg.img_size, cfg.patch_size, cfg.in_chans, d, depth=cfg.stem_depth,
                norm_eps=cfg.norm_eps,
            )  # fmt: skip
        else:
            self.patch_embed = PatchEmbedding(cfg.img_size, cfg.patch_size, cfg.in_chans, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if cfg.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, d)) if cfg.distilled else None
        if cfg.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_tokens, d))
        elif cfg.pos_embed == "sincos2d":
            table = sincos_2d(cfg.grid_size, d)  # (Gh * Gw, D)
            table = torch.cat([torch.zeros(cfg.num_prefix_tokens, d), table])[None]  # (1, N, D)
            self.register_buffer("pos_embed", table, persistent=False)
        else:
            self.pos_embed = None
        self.rel_pos_bias = None
        if cfg.pos_embed == "relative":  # one table per block, as in Swin
            self.rel_pos_bias = nn.ModuleList(
                RelativePositionBias(
                    cfg.grid_size, cfg.num_heads, num_prefix_tokens=cfg.num_prefix_tokens
                )
                for _ in range(cfg.depth)
            )
        self.pos_drop = nn.Dropout(cfg.drop_rate)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                d,
                cfg.num_heads,
                mlp_ratio=cfg.mlp_ratio,
                qkv_bias=cfg.qkv_bias,
                norm_eps=cfg.norm_eps,
                attn_impl=cfg.attn_impl,
                drop=cfg.drop_rate,
                attn_drop=cfg.attn_drop_rate,
                drop_path=rate,
            )
            for rate in cfg.drop_path_rates()
        )
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.head = self._new_head()
        self.head_dist = self._new_head() if cfg.distilled else None
        self.reset_parameters()

    def _new_head(self) -> nn.Module:
        k = self.config.num_classes
        return nn.Linear(self.config.embed_dim, k) if k > 0 else nn.Identity()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-initialise all weights with timm's default scheme (see the class docstring)."""
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        if getattr(self, "dist_token", None) is not None:
            nn.init.trunc_normal_(self.dist_token, std=0.02)
        for bias in getattr(self, "rel_pos_bias", None) or ():
            nn.init.trunc_normal_(bias.relative_position_bias_table, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the head by a new one for ``num_classes`` classes, zero-initialised.

        As the ViT paper fine-tunes (Section 3.2); ``config.num_classes`` follows, 0 removes the
        head, and a distilled model gets two new heads.

        Example:
            >>> model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=1,
            ...                                     num_heads=2, num_classes=10))
            >>> model.reset_classifier(3)
            >>> model.config.num_classes, model(torch.randn(2, 3, 8, 8)).abs().max().item()
            (3, 0.0)
        """
        _checks.integer("num_classes", num_classes, fix="use 0 for no head")
        reference = self.norm.weight
        self.config = dataclasses.replace(self.config, num_classes=num_classes)
        self.head = self._new_head().to(reference)
        if self.head_dist is not None:
            self.head_dist = self._new_head().to(reference)
        for head in (self.head, self.head_dist):
            if isinstance(head, nn.Linear):
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """z_0: patch tokens, prefix tokens prepended, position embeddings added: (B, N, D)."""
        x = self.patch_embed(images)  # (B, Gh * Gw, D)
        prefix = [t for t in (self.cls_token, self.dist_token) if t is not None]
        if prefix:  # class token, then distillation token, then the patches
            prefix = [repeat(t, "1 1 d -> b 1 d", b=x.shape[0]) for t in prefix]
            x = torch.cat([*prefix, x], dim=1)  # (B, N, D)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        return self.pos_drop(x)

    def attention_bias(self, layer: int) -> torch.Tensor | None:
        """Block ``layer``'s relative position bias (Nh, N, N), or None without one."""
        return None if self.rel_pos_bias is None else self.rel_pos_bias[layer]()

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images)
        for layer, block in enumerate(self.blocks):
            x = block(x, mask=self.attention_bias(layer))
        return self.norm(x)  # (B, N, D)

    def forward_head(
        self, features: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Pool the final tokens (B, N, D) and classify: (B, num_classes).

        A distilled model returns both heads' logits in train mode, their mean in eval mode.
        """
        if self.head_dist is not None:
            logits, logits_dist = self.forward_heads(features)
            if self.training:  # each head gets its own target from the loss
                return logits, logits_dist
            return (logits + logits_dist) / 2  # at inference the two heads vote
        if self.config.pool == "cls":
            pooled = features[:, 0]  # (B, D)
        else:
            pooled = features[:, self.config.num_prefix_tokens :].mean(dim=1)  # (B, D)
        return self.head(pooled)

    def forward_heads(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both heads of a distilled model, in any mode: (B, n_cls) each.

        ``head`` reads token 0 (class), ``head_dist`` token 1 (distillation).

        Raises:
            ValueError: the model is not distilled.

        Example:
            >>> model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8,
            ...                                     depth=1, num_heads=2, num_classes=3,
            ...                                     distilled=True)).eval()
            >>> features = model.forward_features(torch.randn(2, 3, 8, 8))  # (B, 2 + 4, D)
            >>> logits, logits_dist = model.forward_heads(features)
            >>> torch.allclose(model.forward_head(features), (logits + logits_dist) / 2)
            True
        """
        if self.head_dist is None:
            raise ValueError(
                "forward_heads reads the two heads of a distilled model; this model has one "
                "(distilled=False). Use forward_head, or build it with distilled=True."
            )
        return self.head(features[:, 0]), self.head_dist(features[:, 1])  # (B, n_cls) each

    def forward(self, images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.forward_head(self.forward_features(images))

    def forward_with_attention(
        self, images: torch.Tensor
    ) -> tuple[torch.Tensor | tuple[torch.Tensor, torch.Tensor], list[torch.Tensor]]:
        """Logits (as :meth:`forward` returns them) and every layer's attention weights,
        computed by the explicit attention path."""
        x = self.embed(images)
        weights = []
        for layer, block in enumerate(self.blocks):
            x, w = block.forward_with_weights(x, mask=self.attention_bias(layer))
            weights.append(w)  # (B, Nh, N, N)
        return self.forward_head(self.norm(x)), weights
