"""The ViT's configuration: one frozen dataclass of timm's field names, checked on creation.

``ViTConfig`` holds every size and option of :class:`vitbook.VisionTransformer`, the presets of
the ViT paper's Table 1 (and DeiT's smaller sizes), and the closed-form parameter count that the
full-model chapter derives.

See chapter: The full model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vitbook import _checks
from vitbook.attention import ATTENTION_IMPLS
from vitbook.stem import conv_stem_layers

__all__ = ["PRESETS", "ViTConfig", "check_fields"]

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

    Fields (sizes in the glossary's symbols):
        img_size: (H, W) or one int; stored as a (H, W) tuple, multiples of ``patch_size``.
        num_classes: the head's size; 0 means no head (features only).
        depth: L, the number of encoder blocks; ``num_heads`` Nh must divide D.
        mlp_ratio: the MLP's hidden width is ``int(D * mlp_ratio)``.
        distilled: DeiT's ``dist_token`` and ``head_dist`` (needs the class token and
            ``pool="cls"``); ``forward`` returns both heads' logits in train mode, their mean in
            eval mode.
        stem: ``"patch"`` (one P x P convolution of stride P) or ``"conv"``
            (:class:`vitbook.stem.ConvPatchEmbedding`; P a power of 2).
        stem_depth: with ``stem="conv"``, the 3 x 3 convolutions; None for log2(P).
        pos_embed: ``"learned"``, ``"sincos2d"`` (D a multiple of 4), ``"none"``, or
            ``"relative"`` (a learned bias per head and 2D offset in each block's logits,
            :class:`RelativePositionBias`).
        pool: ``"cls"`` (the class token's final state) or ``"mean"`` (mean of the patch tokens).
        attn_impl: ``"explicit"`` or ``"sdpa"`` for ``forward``.
        norm_eps: LayerNorm epsilon (1e-6 in timm and the original ViT code).
        drop_rate, attn_drop_rate: dropout on embeddings, attention outputs and MLPs; on the
            attention weights.
        drop_path_rate: stochastic depth of the last block, block i of L at
            ``drop_path_rate * i / (L - 1)`` (timm's linear rule).

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

        ViT-B/16 to ViT-H/14 are the ViT paper's Table 1; ViT-Ti/16 and ViT-S/16 are DeiT's.

        Example:
            >>> cfg = ViTConfig.from_name("ViT-Ti/16", num_classes=10)
            >>> cfg.embed_dim, cfg.depth, cfg.num_heads, cfg.num_classes
            (192, 12, 3, 10)

        Raises:
            ValueError: an unknown preset or field name, or a value the config refuses.
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
