"""The Vision Transformer: patch embedding, class token, position embeddings, encoder, head.

::

    z_0 = [x_class; x_1 E; ...; x_N E] + E_pos            (B, 1 + Gh*Gw, D)
    z_l = EncoderBlock_l(z_{l-1}),   l = 1 .. L           (B, N, D)
    y   = head(LayerNorm(z_L)[:, 0])                      (B, num_classes)

Parameter and module names are those of timm's ``VisionTransformer`` (``patch_embed.proj``,
``cls_token``, ``pos_embed``, ``blocks.{i}.norm1`` / ``attn.qkv`` / ``attn.proj`` / ``norm2`` /
``mlp.fc1`` / ``mlp.fc2``, ``norm``, ``head``), so state dicts move between the two.

Two options come from the work that made ViTs train on less data (chapter *Can a ViT beat the
CNN that taught it?*):

- ``distilled=True`` is DeiT's distilled ViT (Touvron et al., 2021), with the names of timm's
  ``VisionTransformerDistilled``: a second learned token ``dist_token`` after the class token
  (tokens: class, distillation, patches; ``pos_embed`` covers both), and a second head
  ``head_dist`` on its final state. In training the model returns both heads' logits as a tuple
  ``(class, distillation)``, for a loss that gives each its own target
  (:class:`vitbook.distill.DistillationLoss`); in eval mode it returns their mean.
- ``stem="conv"`` replaces the patch embedding by a few strided 3 x 3 convolutions ending on the
  same grid of tokens (:class:`vitbook.stem.ConvPatchEmbedding`, after Xiao et al., 2021).

A model that uses neither has exactly the parameters and state-dict keys it had before them.

See chapter: The full model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from einops import repeat
from torch import nn

from vitbook import _checks
from vitbook.attention import ATTENTION_IMPLS
from vitbook.encoder import EncoderBlock
from vitbook.patches import PatchEmbedding
from vitbook.positional import RelativePositionBias, sincos_2d
from vitbook.stem import ConvPatchEmbedding, conv_stem_layers

__all__ = ["PRESETS", "ViTConfig", "VisionTransformer"]

POS_EMBEDS = ("learned", "sincos2d", "none", "relative")
POOLS = ("cls", "mean")
STEMS = ("patch", "conv")

# (embed_dim, depth, num_heads); the MLP is 4x wider in every size. ViT-B, ViT-L and ViT-H are the
# ViT paper's Table 1 (B/32 and B/16, L/16, H/14 its patch sizes); ViT-Ti and ViT-S are the smaller
# sizes of DeiT (Touvron et al., 2021), which timm names ViT-Tiny and ViT-Small.
PRESETS: dict[str, dict[str, int]] = {
    "ViT-Ti/16": {"patch_size": 16, "embed_dim": 192, "depth": 12, "num_heads": 3},
    "ViT-S/16": {"patch_size": 16, "embed_dim": 384, "depth": 12, "num_heads": 6},
    "ViT-B/16": {"patch_size": 16, "embed_dim": 768, "depth": 12, "num_heads": 12},
    "ViT-B/32": {"patch_size": 32, "embed_dim": 768, "depth": 12, "num_heads": 12},
    "ViT-L/16": {"patch_size": 16, "embed_dim": 1024, "depth": 24, "num_heads": 16},
    "ViT-H/14": {"patch_size": 14, "embed_dim": 1280, "depth": 32, "num_heads": 16},
}


@dataclass(frozen=True, kw_only=True)
class ViTConfig:
    """Everything that defines a ViT, with timm's field names; validated on creation.

    Fields:
        img_size: (H, W) or one int for square images; stored as a (H, W) tuple.
        patch_size: P; H and W must be multiples of it.
        in_chans: C.
        num_classes: size of the classification head; 0 means no head (features only).
        embed_dim: D.
        depth: L, the number of encoder blocks.
        num_heads: Nh, must divide D.
        mlp_ratio: the MLP's hidden width is ``int(D * mlp_ratio)``.
        qkv_bias: whether ``qkv`` has a bias.
        class_token: whether a learned class token is prepended.
        distilled: DeiT's distillation token and second head (``dist_token``, ``head_dist``;
            needs the class token and ``pool="cls"``). ``forward`` then returns
            ``(class logits, distillation logits)`` in train mode and their mean in eval mode:
            the DeiT authors' ``DistilledVisionTransformer``, and timm's
            ``VisionTransformerDistilled`` after ``set_distilled_training(True)`` (without it,
            timm averages the two heads in training too, which is no use for distillation).
        stem: ``"patch"`` (one P x P convolution of stride P, the ViT) or ``"conv"`` (stride-2
            3 x 3 convolutions, :class:`vitbook.stem.ConvPatchEmbedding`; P a power of 2).
        stem_depth: with ``stem="conv"``, the number of 3 x 3 convolutions; None for log2(P),
            more adds stride-1 convolutions in front. Must be None with ``stem="patch"``.
        pos_embed: ``"learned"`` (ViT), ``"sincos2d"`` (fixed, D a multiple of 4), ``"none"``,
            or ``"relative"``: nothing added to the tokens, and each block adds a learned bias
            per head and 2D offset to its attention logits (:class:`RelativePositionBias`, the
            Swin / BEiT kind, not the content-dependent variant of the ViT paper's Appendix D.4).
        pool: ``"cls"`` (the class token's final state) or ``"mean"`` (mean of the patch tokens).
        attn_impl: ``"explicit"`` or ``"sdpa"`` for ``forward``.
        norm_eps: LayerNorm epsilon (1e-6 in timm and the original ViT code).
        drop_rate: dropout on the embeddings, after attention and in the MLPs.
        attn_drop_rate: dropout on the attention weights.
        drop_path_rate: stochastic depth of the last block; block i of L drops its residual
            branches with probability ``drop_path_rate * i / (L - 1)`` (timm's linear rule).
            Training only; adds no parameters.

    Raises:
        ValueError / TypeError: for any inconsistent or mistyped field, naming it and the fix.

    Example:
        >>> cfg = ViTConfig(img_size=(32, 48), patch_size=16, embed_dim=24, depth=2, num_heads=3)
        >>> cfg.grid_size, cfg.num_patches, cfg.num_tokens
        ((2, 3), 6, 7)
        >>> ViTConfig.from_name("ViT-B/16").num_parameters()
        86567656

    See chapter: The full model.
    """

    img_size: int | tuple[int, int] = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    class_token: bool = True
    distilled: bool = False
    pos_embed: str = "learned"
    pool: str = "cls"
    attn_impl: str = "explicit"
    norm_eps: float = 1e-6
    drop_rate: float = 0.0
    attn_drop_rate: float = 0.0
    drop_path_rate: float = 0.0
    stem: str = "patch"
    stem_depth: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "img_size", _checks.pair("img_size", self.img_size))
        for name in ("patch_size", "in_chans", "embed_dim", "depth", "num_heads"):
            _checks.positive_int(name, getattr(self, name))
        _checks.integer("num_classes", self.num_classes, fix="use 0 for no head")
        for name in ("qkv_bias", "class_token", "distilled"):
            _checks.boolean(name, getattr(self, name))
        _checks.multiple_of("img_size height", self.img_size[0], "patch_size", self.patch_size)
        _checks.multiple_of("img_size width", self.img_size[1], "patch_size", self.patch_size)
        _checks.divisible("embed_dim", self.embed_dim, "num_heads", self.num_heads)
        _checks.choice("pos_embed", self.pos_embed, POS_EMBEDS)
        _checks.choice("pool", self.pool, POOLS)
        _checks.choice("attn_impl", self.attn_impl, ATTENTION_IMPLS)
        if self.pos_embed == "sincos2d" and self.embed_dim % 4:
            raise ValueError(
                "pos_embed='sincos2d' needs embed_dim as a multiple of 4, got "
                f"embed_dim={self.embed_dim}; "
                "change embed_dim or use pos_embed='learned'."
            )
        if self.pool == "cls" and not self.class_token:
            raise ValueError(
                "pool='cls' needs class_token=True; set class_token=True or use pool='mean'."
            )
        if self.distilled and not (self.class_token and self.pool == "cls"):
            raise ValueError(
                "distilled=True reads the class token (position 0) and the distillation token "
                f"(position 1); it needs class_token=True and pool='cls', got "
                f"class_token={self.class_token}, pool={self.pool!r}."
            )
        _checks.choice("stem", self.stem, STEMS)
        if self.stem == "conv":
            conv_stem_layers(self.patch_size, self.embed_dim, self.stem_depth)  # validates
        elif self.stem_depth is not None:
            raise ValueError(
                f"stem_depth={self.stem_depth!r} applies to stem='conv' only; use "
                "stem_depth=None with stem='patch', or stem='conv'."
            )
        _checks.real("mlp_ratio", self.mlp_ratio, low=0, open_low=True, fix="ViT uses 4.0")
        if self.mlp_hidden_dim < 1:
            raise ValueError(
                f"mlp_ratio={self.mlp_ratio} gives an MLP of width int({self.embed_dim} * "
                f"{self.mlp_ratio}) = {self.mlp_hidden_dim}; use mlp_ratio >= "
                f"{1 / self.embed_dim:.3g} (ViT uses 4.0)."
            )
        _checks.real(
            "norm_eps", self.norm_eps, low=0, high=1, open_low=True, open_high=True,
            fix="timm uses 1e-6, Hugging Face 1e-12",
        )  # an epsilon as large as the variance would flatten every token to the same vector
        for name in ("drop_rate", "attn_drop_rate", "drop_path_rate"):
            _checks.real(
                name, getattr(self, name), low=0, high=1, open_high=True,
                fix="use 0.0 for no dropout",
            )

    @classmethod
    def from_name(cls, name: str, **overrides: object) -> ViTConfig:
        """A preset by name (224 px, 1000 classes), with optional overrides.

        ViT-B/16, ViT-B/32, ViT-L/16 and ViT-H/14 are the ViT paper's Table 1; ViT-Ti/16 and
        ViT-S/16 are DeiT's smaller sizes (timm's ViT-Tiny and ViT-Small).

        Example:
            >>> cfg = ViTConfig.from_name("ViT-Ti/16", num_classes=10)
            >>> cfg.embed_dim, cfg.depth, cfg.num_heads, cfg.num_classes
            (192, 12, 3, 10)

        Raises:
            ValueError: an unknown preset name or field name, or a field value the config
                refuses.
        """
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown preset name {name!r}; choose one of {', '.join(PRESETS)}.")
        check_fields(overrides)
        return cls(**{**PRESETS[name], **overrides})

    def drop_path_rates(self) -> list[float]:
        """Each block's stochastic-depth probability, rising linearly from 0 to the rate."""
        if self.depth == 1:
            return [0.0]
        return [self.drop_path_rate * i / (self.depth - 1) for i in range(self.depth)]

    @property
    def grid_size(self) -> tuple[int, int]:
        """(Gh, Gw)."""
        return (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)

    @property
    def num_patches(self) -> int:
        """Gh * Gw."""
        return self.grid_size[0] * self.grid_size[1]

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, then the distillation token."""
        return int(self.class_token) + int(self.distilled)

    @property
    def num_tokens(self) -> int:
        """N, the sequence length the encoder sees."""
        return self.num_prefix_tokens + self.num_patches

    @property
    def mlp_hidden_dim(self) -> int:
        return int(self.embed_dim * self.mlp_ratio)

    def num_parameters(self) -> int:
        """The number of trainable parameters, in closed form.

        ::

            patch embedding   C P^2 D + D
              or conv stem    sum_i (c_{i-1} 9 c_i + 2 c_i) + c_last D + D   (c_0 = C)
            class token       D
            distill. token    D                   (distilled only)
            position embed.   N D                 (learned only; N counts both tokens)
            relative bias     L (2 Gh - 1)(2 Gw - 1) Nh   (relative only)
            each of L blocks  12 D^2 + 13 D       (for a 4x MLP with biases; in general
                              4 D + (3 D^2 + 3 D) + (D^2 + D) + (2 D H + H + D), H = hidden width)
            final LayerNorm   2 D
            head              D n_cls + n_cls     (n_cls = num_classes > 0; twice if distilled)

        Example:
            >>> ViTConfig.from_name("ViT-B/16", distilled=True).num_parameters()  # DeiT-B
            87338192
        """
        d, h, k = self.embed_dim, self.mlp_hidden_dim, self.num_classes
        patch = self.in_chans * self.patch_size**2 * d + d
        if self.stem == "conv":  # 3 x 3 convolutions without bias, LayerNorms, a 1 x 1 to D
            layers = conv_stem_layers(self.patch_size, d, self.stem_depth)
            widths = [self.in_chans] + [width for width, _ in layers]  # c_0 .. c_last
            pairs = zip(widths[:-1], widths[1:], strict=True)  # (c_{i-1}, c_i)
            convs = sum(c_in * 9 * c_out + 2 * c_out for c_in, c_out in pairs)
            patch = convs + widths[-1] * d + d
        tokens = d * self.num_prefix_tokens + (
            self.num_tokens * d if self.pos_embed == "learned" else 0
        )
        attention = 3 * d * d + (3 * d if self.qkv_bias else 0) + d * d + d
        block = 4 * d + attention + 2 * d * h + h + d
        head = (d * k + k if k > 0 else 0) * (2 if self.distilled else 1)
        if self.pos_embed == "relative":
            gh, gw = self.grid_size
            block += (2 * gh - 1) * (2 * gw - 1) * self.num_heads
        return patch + tokens + self.depth * block + 2 * d + head


def check_fields(names: object) -> None:
    """Raise a ValueError listing the valid fields unless every name is a ``ViTConfig`` field."""
    fields = {f.name for f in dataclasses.fields(ViTConfig)}
    unknown = sorted(set(names) - fields)
    if unknown:
        raise ValueError(
            f"unknown ViTConfig field(s) {unknown}; valid fields are {sorted(fields)}."
        )


class VisionTransformer(nn.Module):
    """The ViT of Dosovitskiy et al. (2021), state-dict compatible with timm.

    Weights are initialised as timm does by default: every Linear weight from a truncated normal
    with std 0.02 and zero bias, ``pos_embed`` truncated normal 0.02, ``cls_token`` normal 1e-6,
    LayerNorms at (1, 0), and the patch-embedding Conv2d at PyTorch's default. The 2D sine-cosine
    table (``pos_embed="sincos2d"``) is a non-persistent buffer with a zero row for the class
    token. With ``pos_embed="relative"``, ``rel_pos_bias.{i}`` holds block i's bias table
    (truncated normal 0.02) and the class token's logits get no bias. With ``distilled=True``,
    ``dist_token`` is truncated normal 0.02 (as in timm) and ``head_dist`` is initialised like
    ``head``; prefix tokens (class, distillation) get zero rows of a sine-cosine table and no
    relative bias. With ``stem="conv"`` the stem's convolutions are at PyTorch's default.

    Shapes:
        forward: (B, C, H, W) -> (B, num_classes) logits; with ``distilled=True`` in train
            mode, a tuple of two (B, num_classes): the class head's and the distillation
            head's logits.
        forward_features: (B, C, H, W) -> (B, N, D), after the final LayerNorm.
        forward_heads: (B, N, D) features -> both heads' logits (distilled models only).
        forward_with_attention: (B, C, H, W) -> (logits, [(B, Nh, N, N)] * depth).

    Raises:
        TypeError: ``config`` is not a ViTConfig; images that are not float, or not of the
            weights' dtype (float64 images for a float32 model: convert with ``images.float()``;
            nothing is converted silently).
        ValueError: images not 4-D, of another channel count or size than the config (see
            :func:`vitbook.resample_pos_embed` to change size), on another device than the
            model, or holding NaN or inf.

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

        For fine-tuning, as the ViT paper does (Section 3.2: "we remove the pre-trained
        prediction head and attach a zero-initialized D x K feedforward layer", K = n_cls);
        timm's method of the same name initialises the new head at random instead.
        ``config.num_classes`` follows; ``num_classes=0`` removes the head (the model then
        returns features). A distilled model gets two new heads, ``head`` and ``head_dist``.

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

        A distilled model returns ``(class logits, distillation logits)`` in train mode and
        their mean in eval mode (see :meth:`forward_heads`).
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

        ``head`` reads the class token's final state (position 0), ``head_dist`` the
        distillation token's (position 1).

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
