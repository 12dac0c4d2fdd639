"""The optimizer of ``fit``: which weights decay, AdamW or SGD, and the learning-rate schedule.

Weight decay pulls every weight towards 0 at each step. Two rules say which weights it touches:
``"all"`` decays every trained parameter (what ``torch.optim.AdamW(model.parameters())`` does);
``"timm"`` follows timm's ``param_groups_weight_decay`` (``timm/optim/_param_groups.py``), the
rule of DeiT and of timm's ViT recipes: no decay for parameters with at most one dimension (the
LayerNorm scales and shifts, every bias), for position embeddings and tokens, and for whatever the
model lists in a ``no_weight_decay()`` method. Decaying a LayerNorm's scale towards 0 or a
position embedding towards "no position" fights what those parameters are for.

The schedule is a factor of the peak learning rate at each optimizer step: a linear warm-up to 1
over ``warmup`` steps, then a cosine down to 0 at the last step.

See chapter: Training and classification.
"""

from __future__ import annotations

import fnmatch
import math

import torch
from torch import nn

__all__ = ["NO_DECAY_NAMES", "WEIGHT_DECAY_RULES", "lr_factor", "make_optimizer", "param_groups"]

WEIGHT_DECAY_RULES = ("all", "timm")
OPTIMIZERS = ("adamw", "sgd")
# timm's ViT and DeiT list these in no_weight_decay(); BEiT and Swin add their relative tables.
NO_DECAY_NAMES = ("pos_embed", "cls_token", "dist_token", "relative_position_bias_table")


def _listed_no_decay(model: nn.Module) -> list[str]:
    """Name patterns from every ``no_weight_decay()`` in the model, with their module's prefix.

    timm asks only the top module; asking every submodule finds them inside an ``nn.Sequential``
    (a Normalize in front of a ViT) or a wrapper, where names carry a prefix (``1.pos_embed``).
    """
    patterns = []
    for prefix, module in model.named_modules():
        listed = getattr(module, "no_weight_decay", None)
        if callable(listed):
            patterns += [f"{prefix}.{name}" if prefix else name for name in listed()]
    return patterns


def _decays(name: str, param: nn.Parameter, listed: list[str]) -> bool:
    """timm's rule: no decay for ndim <= 1, biases, position embeddings, tokens, listed names."""
    if param.ndim <= 1 or name.endswith(".bias"):
        return False
    if name.rsplit(".", 1)[-1] in NO_DECAY_NAMES:
        return False
    return not any(fnmatch.fnmatch(name, pattern) for pattern in listed)


def param_groups(model: nn.Module, weight_decay: float, rule: str = "all") -> list[dict]:
    """The optimizer's parameter groups: trained parameters, with or without weight decay.

    Only parameters with ``requires_grad`` are included. ``rule="all"`` gives one group, every
    parameter decayed by ``weight_decay``; ``rule="timm"`` gives a group decayed by
    ``weight_decay`` and a group with ``weight_decay=0`` (see the module's docstring), leaving
    out a group that would be empty.

    Args:
        model: any ``nn.Module``; names are matched with their prefixes (``blocks.0.norm1.bias``).
        weight_decay: the decay of the decayed group.
        rule: ``"all"`` or ``"timm"``.

    Returns:
        ``[{"params": [...], "weight_decay": float}, ...]`` for ``torch.optim``.

    Raises:
        ValueError: an unknown rule.

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        >>> [(len(g["params"]), g["weight_decay"]) for g in param_groups(model, 0.05, "timm")]
        [(1, 0.05), (3, 0.0)]

    See chapter: Training and classification.
    """
    if rule not in WEIGHT_DECAY_RULES:
        listed = ", ".join(repr(r) for r in WEIGHT_DECAY_RULES)
        raise ValueError(f"weight_decay_rule={rule!r} is not supported; choose one of {listed}.")
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if rule == "all":
        return [{"params": [p for _, p in named], "weight_decay": weight_decay}]
    listed = _listed_no_decay(model)
    decayed = [p for name, p in named if _decays(name, p, listed)]
    kept = [p for name, p in named if not _decays(name, p, listed)]
    groups = [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": kept, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def make_optimizer(
    name: str, groups: list[dict], lr: float, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW (decoupled weight decay) or SGD with momentum 0.9, fused on a GPU.

    The fused CUDA kernels also take the gradient scaler's verdict on the GPU, without a sync.

    Example:
        >>> optimizer = make_optimizer("sgd", param_groups(nn.Linear(2, 2), 0.0), 0.1,
        ...                            torch.device("cpu"))
        >>> type(optimizer).__name__, optimizer.defaults["momentum"]
        ('SGD', 0.9)

    See chapter: Training and classification.
    """
    fused = {"fused": True} if device.type == "cuda" else {}
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9, **fused)
    return torch.optim.AdamW(groups, lr=lr, **fused)


def lr_factor(step: int, total: int, warmup: int) -> float:
    """The learning rate at optimizer step ``step`` (from 0) as a fraction of the peak.

    Linear warm-up: ``(step + 1) / warmup`` for the first ``warmup`` steps; then a cosine from
    1 down to 0 at step ``total``.

    Example:
        >>> [round(lr_factor(step, total=6, warmup=2), 3) for step in range(6)]
        [0.5, 1.0, 1.0, 0.854, 0.5, 0.146]

    See chapter: Training and classification.
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))
