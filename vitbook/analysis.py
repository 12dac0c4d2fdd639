"""Looking inside a trained ViT: attention rollout, attention distance, position and filter maps.

Attention rollout (ViT paper, Figure 6), mean attention distance (Figure 7 right),
position-embedding similarity (centre) and patch-filter components (left), plus :func:`readout`
and :func:`macs`. All detach their inputs and run on their inputs' device.

See chapter: Inside a trained ViT.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from vitbook import _checks

__all__ = [
    "attention_rollout",
    "cls_rollout_map",
    "macs",
    "mean_attention_distance",
    "patch_embedding_components",
    "position_embedding_similarity",
    "readout",
]

# How attention_rollout combines the Nh heads of a layer into one (B, N, N) map.
FUSE = {"mean": torch.mean, "max": torch.amax, "min": torch.amin}


def _prefix_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"num_prefix_tokens={value!r} must be an int >= 0 (1 with a class token, 0 without, "
            "2 with a distillation token: pass config.num_prefix_tokens)."
        )
    return value


def _grid(name: str, num_tokens: int, grid_size: object, num_prefix_tokens: int) -> tuple[int, int]:
    """Check that ``num_tokens`` = num_prefix_tokens + Gh * Gw and return (Gh, Gw)."""
    gh, gw = _checks.pair("grid_size", grid_size)
    if num_prefix_tokens + gh * gw != num_tokens:
        raise ValueError(
            f"{name} has {num_tokens} tokens, but num_prefix_tokens={num_prefix_tokens} plus "
            f"grid_size=({gh}, {gw}) gives {num_prefix_tokens + gh * gw}; pass the model's "
            "config.grid_size and config.num_prefix_tokens."
        )
    return gh, gw


def _square_attention(name: str, value: object, *, rows_sum_to_1: bool = True) -> torch.Tensor:
    """Attention weights (B, Nh, N, N): finite, non-negative, by default rows summing to 1."""
    attention = _checks.tensor(name, value, 4, "(B, Nh, N, N)")
    if attention.shape[-1] != attention.shape[-2]:
        raise ValueError(
            f"{name} has shape {tuple(attention.shape)}, but self-attention maps are (B, Nh, N, N) "
            "with as many keys as queries; pass the weights from forward_with_attention."
        )
    attention = _checks.finite(name, attention.detach())
    if attention.numel() and attention.min() < 0:
        raise ValueError(
            f"{name} has negative weights (down to {attention.min().item():.3g}); attention "
            "weights come out of a softmax, so pass weights, not logits."
        )
    if rows_sum_to_1 and attention.numel():
        # Generous enough for weights computed in bfloat16 and then upcast; logits or scores
        # are off by far more.
        tol = max(1e-2, 8 * torch.finfo(attention.dtype).eps)
        worst = (attention.sum(dim=-1) - 1).abs().max().item()
        if worst > tol:
            raise ValueError(
                f"{name} has rows that do not sum to 1 (off by up to {worst:.3g}); attention "
                "weights are a softmax over the keys, so pass weights, not logits or scores "
                "(normalise with w / w.sum(dim=-1, keepdim=True))."
            )
    return attention


def attention_rollout(
    attentions: Sequence[torch.Tensor], *, head_fusion: str = "mean"
) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): attention traced through all layers.

    ``attentions``: (B, Nh, N, N) weights per layer, first first, as
    ``VisionTransformer.forward_with_attention`` returns them; A_l: layer l's heads fused by
    ``head_fusion`` (``"mean"``, ``"max"``, ``"min"``)::

        A'_l = rownorm(A_l + I)             (= 0.5 A_l + 0.5 I for head_fusion="mean")
        rollout = A'_L ... A'_2 A'_1        (B, N, N), rows summing to 1

    Raises:
        TypeError: ``attentions`` is not a list or tuple of float tensors.
        ValueError: it is empty, a map is not softmax weights (B, Nh, N, N), or layers differ
            in B or N.

    Example:
        >>> uniform = torch.full((2, 3, 5, 5), 1 / 5)
        >>> rollout = attention_rollout([uniform, uniform])
        >>> rollout.shape
        torch.Size([2, 5, 5])
        >>> round(rollout[0, 0, 0].item(), 4)  # 0.25 from the residual path + 0.75 / 5
        0.4

    See chapter: Inside a trained ViT.
    """
    if not isinstance(attentions, (list, tuple)):
        raise TypeError(
            f"attentions must be a list of (B, Nh, N, N) tensors, got {type(attentions).__name__}; "
            "pass the list returned by model.forward_with_attention(images)[1]."
        )
    if not attentions:
        raise ValueError("attentions is empty; pass at least one layer's (B, Nh, N, N) weights.")
    _checks.choice("head_fusion", head_fusion, tuple(FUSE))
    maps = [_square_attention(f"attentions[{i}]", a) for i, a in enumerate(attentions)]
    b, _, n, _ = maps[0].shape
    for i, a in enumerate(maps):
        if (a.shape[0], a.shape[-1]) != (b, n):
            raise ValueError(
                f"attentions[{i}] has shape {tuple(a.shape)}, but attentions[0] has "
                f"{tuple(maps[0].shape)}; every layer needs the same batch size B and tokens N."
            )
    identity = torch.eye(n, dtype=maps[0].dtype, device=maps[0].device)  # (N, N)
    rollout = identity.expand(b, n, n)
    for a in maps:
        fused = FUSE[head_fusion](a, dim=1)  # (B, N, N)
        # The residual stream carries each token past attention: add it, then keep rows stochastic.
        fused = fused + identity
        fused = fused / fused.sum(dim=-1, keepdim=True)
        rollout = fused @ rollout  # (B, N, N)
    return rollout


def cls_rollout_map(
    rollout: torch.Tensor,
    grid_size: int | tuple[int, int],
    *,
    num_prefix_tokens: int = 1,
    token: int = 0,
) -> torch.Tensor:
    """The class token's row of a rollout, over the patches, laid out on the patch grid.

    Returns (B, Gh, Gw) from ``rollout`` (B, N, N), N = num_prefix_tokens + Gh * Gw; not
    renormalised. ``token=1`` reads a distilled model's distillation token.

    Raises:
        TypeError / ValueError: ``rollout`` is not a finite (B, N, N) float tensor, N does not
            match the grid, there is no class token, or ``token`` is not a prefix token.

    Example:
        >>> rollout = attention_rollout([torch.full((2, 3, 7, 7), 1 / 7)])
        >>> cls_rollout_map(rollout, (2, 3)).shape
        torch.Size([2, 2, 3])
        >>> cls_rollout_map(rollout[:, 1:, 1:], (2, 2), num_prefix_tokens=2, token=1).shape
        torch.Size([2, 2, 2])

    See chapter: Inside a trained ViT.
    """
    rollout = _checks.tensor("rollout", rollout, 3, "(B, N, N)").detach()
    _checks.finite("rollout", rollout)
    if _prefix_tokens(num_prefix_tokens) == 0:
        raise ValueError(
            "num_prefix_tokens=0 means there is no class token to read a map from; use "
            "num_prefix_tokens=1 for a model with class_token=True."
        )
    _checks.integer("token", token, fix="0 for the class token, 1 for the distillation token")
    if token >= num_prefix_tokens:
        raise ValueError(
            f"token={token} is not one of the num_prefix_tokens={num_prefix_tokens} prefix "
            f"tokens; use 0 .. {num_prefix_tokens - 1} (1, the distillation token, needs "
            "num_prefix_tokens=2)."
        )
    gh, gw = _grid("rollout", rollout.shape[-1], grid_size, num_prefix_tokens)
    token_row = rollout[:, token, num_prefix_tokens:]  # (B, Gh * Gw)
    return rearrange(token_row, "b (gh gw) -> b gh gw", gh=gh, gw=gw)


def mean_attention_distance(
    attention: torch.Tensor,
    grid_size: int | tuple[int, int],
    patch_size: int,
    *,
    num_prefix_tokens: int = 1,
    renormalize: bool = False,
) -> torch.Tensor:
    """Each head's mean attention distance in pixels (ViT paper, Figure 7 right, Appendix D.7).

    For one layer's ``attention`` (B, Nh, N, N), N = num_prefix_tokens + Gh * Gw, query patch
    i's distance is ``sum_j a_ij * P * |centre_i - centre_j|`` over the patches j, P =
    ``patch_size`` pixels, averaged over query patches and batch: (Nh,). ``renormalize=False``
    (the paper's code) counts attention to the class token as distance 0; ``True`` rescales
    each query's patch weights to sum to 1 first.

    Raises:
        TypeError / ValueError: ``attention`` is not a finite, non-negative (B, Nh, N, N) float
            tensor, N does not match the grid, or ``patch_size`` is not a positive int.

    Example:
        >>> self_only = torch.eye(1 + 3 * 5).expand(2, 4, 16, 16)  # every token attends to itself
        >>> mean_attention_distance(self_only, (3, 5), 16)
        tensor([0., 0., 0., 0.])
        >>> rows = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]])
        >>> attention = rows.expand(1, 1, 3, 3)  # (B, Nh, N, N): class token, 1 x 2 patches
        >>> mean_attention_distance(attention, (1, 2), 4)  # each patch: 0.5 on the other, 4 px
        tensor([2.])
        >>> mean_attention_distance(attention, (1, 2), 4, renormalize=True)  # (4 + 4) / 2
        tensor([4.])

    See chapter: Inside a trained ViT.
    """
    attention = _square_attention("attention", attention, rows_sum_to_1=False)
    patch_size = _checks.positive_int("patch_size", patch_size)
    gh, gw = _grid("attention", attention.shape[-1], grid_size, _prefix_tokens(num_prefix_tokens))
    weights = attention[..., num_prefix_tokens:, num_prefix_tokens:]  # (B, Nh, Gh*Gw, Gh*Gw)
    if not isinstance(renormalize, bool):
        raise TypeError(
            f"renormalize must be True or False, got {renormalize!r}; False follows the paper."
        )
    if renormalize:  # a weighted average over the patches only
        tiny = torch.finfo(weights.dtype).tiny
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(tiny)
    grid = {"dtype": weights.dtype, "device": weights.device}
    rows = torch.arange(gh, **grid).repeat_interleave(gw)  # (Gh*Gw,) row of each patch
    cols = torch.arange(gw, **grid).repeat(gh)  # (Gh*Gw,) column of each patch
    centres = torch.stack([rows, cols], dim=-1) * patch_size  # (Gh*Gw, 2) in pixels
    offsets = centres[:, None, :] - centres[None, :, :]  # (Gh*Gw, Gh*Gw, 2), query i minus key j
    distances = offsets.pow(2).sum(dim=-1).sqrt()  # (Gh*Gw, Gh*Gw) in pixels
    per_query = (weights * distances).sum(dim=-1)  # (B, Nh, Gh*Gw)
    return per_query.mean(dim=(0, 2))  # (Nh,)


def position_embedding_similarity(
    pos_embed: torch.Tensor, grid_size: int | tuple[int, int], *, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity between the position embeddings of every pair of patches.

    ``pos_embed``: ``model.pos_embed`` (1, num_prefix_tokens + Gh * Gw, D), or patch rows only
    (Gh * Gw, D) such as :func:`vitbook.sincos_2d`. Returns (Gh, Gw, Gh, Gw):
    ``similarity[r, c, r2, c2]`` compares cells (r, c) and (r2, c2); zero embeddings give 0.

    Raises:
        TypeError / ValueError: ``pos_embed`` is not a finite float tensor of one of the two
            shapes, or its row count does not match the grid.

    Example:
        >>> from vitbook.positional import sincos_2d
        >>> similarity = position_embedding_similarity(sincos_2d((3, 5), 16), (3, 5))
        >>> similarity.shape
        torch.Size([3, 5, 3, 5])
        >>> round(similarity[1, 2, 1, 2].item(), 4)
        1.0

    See chapter: Inside a trained ViT.
    """
    if isinstance(pos_embed, torch.Tensor) and pos_embed.ndim == 2:
        table = _checks.tensor("pos_embed", pos_embed, 2, "(Gh * Gw, D)")
        gh, gw = _grid("pos_embed (a 2-D table, patch rows only)", table.shape[0], grid_size, 0)
    else:
        pos_embed = _checks.tensor("pos_embed", pos_embed, 3, "(1, num_prefix_tokens + Gh*Gw, D)")
        if pos_embed.shape[0] != 1:
            raise ValueError(
                f"pos_embed has shape {tuple(pos_embed.shape)}; a model's position embedding is "
                "(1, N, D), so pass model.pos_embed or one (Gh * Gw, D) table."
            )
        prefix = _prefix_tokens(num_prefix_tokens)
        gh, gw = _grid("pos_embed", pos_embed.shape[1], grid_size, prefix)
        table = pos_embed[0, prefix:]  # (Gh * Gw, D)
    _checks.finite("pos_embed", table)
    unit = F.normalize(table.detach(), dim=-1)  # (Gh * Gw, D), rows of length 1
    similarity = unit @ unit.T  # (Gh * Gw, Gh * Gw)
    return rearrange(similarity, "(gh gw) (gh2 gw2) -> gh gw gh2 gw2", gh=gh, gw=gw, gh2=gh)


def patch_embedding_components(
    weight: torch.Tensor, num_components: int = 28
) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal components of the patch-embedding filters (ViT paper, Figure 7 left).

    ``weight`` (D, C, P, P) is flattened in ``(c ph pw)`` order, centred over D and decomposed,
    ``X = U S V^T``. Returns ``(components, ratios)``: the top r = ``num_components`` rows of
    V^T as (r, C, P, P) filters, each with its largest entry positive, and their (r,) ratios
    ``S_k^2 / sum(S^2)``, decreasing.

    Raises:
        TypeError / ValueError: ``weight`` is not a finite 4-D float tensor, or r is not a
            positive int or exceeds min(D, C * P * P).

    Example:
        >>> weight = torch.randn(24, 3, 4, 4)  # D = 24 filters of 3 * 4 * 4 = 48 values
        >>> components, ratios = patch_embedding_components(weight, num_components=5)
        >>> components.shape, ratios.shape
        (torch.Size([5, 3, 4, 4]), torch.Size([5]))
        >>> bool(ratios.sum() <= 1)
        True

    See chapter: Inside a trained ViT.
    """
    weight = _checks.tensor("weight", weight, 4, "(D, C, P, P)").detach()
    _checks.finite("weight", weight)
    k = _checks.positive_int("num_components", num_components)
    d, c, ph, pw = weight.shape
    if k > min(d, c * ph * pw):
        raise ValueError(
            f"num_components={k} is more than min(D, C * P * P) = min({d}, {c * ph * pw}) for a "
            f"weight of shape {tuple(weight.shape)}; use num_components <= {min(d, c * ph * pw)}."
        )
    # SVD needs float32 or float64: upcast half-precision weights.
    filters = rearrange(weight, "d c ph pw -> d (c ph pw)")
    filters = filters.to(torch.promote_types(weight.dtype, torch.float32))  # (D, C*P*P)
    centred = filters - filters.mean(dim=0, keepdim=True)
    _, singular_values, vh = torch.linalg.svd(centred, full_matrices=False)  # vh: (min, C*P*P)
    variance = singular_values.pow(2)
    ratios = variance / variance.sum().clamp_min(torch.finfo(variance.dtype).tiny)
    top = vh[:k]  # (r, C*P*P)
    # SVD signs are arbitrary: flip each component so that its largest-magnitude entry is > 0.
    top = top * top.gather(1, top.abs().argmax(dim=1, keepdim=True)).sign()  # (r, C*P*P)
    components = rearrange(top, "k (c ph pw) -> k c ph pw", c=c, ph=ph, pw=pw)
    return components, ratios[:k]


@torch.no_grad()
def macs(model: nn.Module, images: torch.Tensor) -> dict[str, float]:
    """Multiply-accumulates of one forward pass, per op, counted by ``torch.utils.flop_counter``.

    Returns ``{op name: MACs}`` (two flops a MAC), the model in eval mode. On a CPU
    ``scaled_dot_product_attention`` reports nothing: use ``attn_impl="explicit"``.

    Example:
        >>> macs(nn.Linear(4, 3), torch.rand(2, 4))
        {'aten.addmm': 24.0}

    See chapter: Real photos.
    """
    from torch.utils.flop_counter import FlopCounterMode  # imports torch._dynamo: seconds

    with FlopCounterMode(display=False) as counter:
        model.eval()(images)
    return {str(op): flops / 2 for op, flops in counter.get_flop_counts()["Global"].items()}


@torch.no_grad()
def readout(model: nn.Module, images: torch.Tensor, *, maps: int = 8) -> dict[str, object]:
    """Rollout maps and mean attention distances of a photo ViT, ``Normalize`` first.

    Returns, on the CPU, ``{"rollout_maps": (maps, Gh, Gw), "mean_attention_distance": (L, Nh)}``
    for ``model`` = ``nn.Sequential(Normalize, VisionTransformer)`` and ``images`` (B, 3, H, W)
    in [0, 1]; ``maps`` of the first photos get a rollout map (ValueError unless a whole
    number of 1 or more).

    Example:
        >>> from vitbook import VisionTransformer, ViTConfig
        >>> from vitbook.data.cifar import Normalize
        >>> vit = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=2,
        ...                                   num_heads=2, num_classes=3))
        >>> out = readout(nn.Sequential(Normalize((0.5,) * 3, (0.5,) * 3), vit),
        ...               torch.rand(4, 3, 8, 8), maps=2)
        >>> out["rollout_maps"].shape, out["mean_attention_distance"].shape
        (torch.Size([2, 2, 2]), torch.Size([2, 2]))

    See chapter: Real photos.
    """
    if isinstance(maps, bool) or not isinstance(maps, int) or maps < 1:
        raise ValueError(
            f"maps={maps!r}: readout draws the rollout maps of the first `maps` photos, so it "
            "takes a whole number of 1 or more (maps=8 for eight photos); a negative number "
            "would silently drop photos from the end instead."
        )
    normalize, vit = model[0], model[1]
    vit.eval()
    config = vit.config
    _, attentions = vit.forward_with_attention(normalize(images))  # L x (B, Nh, N, N)
    prefix = config.num_prefix_tokens  # 2 for a distilled ViT: class, distillation
    distances = torch.stack(
        [mean_attention_distance(a, config.grid_size, config.patch_size,
                                 num_prefix_tokens=prefix) for a in attentions]
    )  # (L, Nh)  # fmt: skip
    rollout = attention_rollout([a[:maps] for a in attentions])  # (maps, N, N)
    return {
        "rollout_maps": cls_rollout_map(rollout, config.grid_size, num_prefix_tokens=prefix).cpu(),
        "mean_attention_distance": distances.cpu(),
    }
