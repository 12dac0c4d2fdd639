"""The optimizer of ``fit``: which weights decay, AdamW or SGD, and the learning-rate schedule.

Weight decay rules: ``"all"`` decays every trained parameter; ``"timm"`` (timm's
``param_groups_weight_decay``, DeiT's rule) spares parameters of at most one dimension (norms,
biases), position embeddings, tokens, and what a ``no_weight_decay()`` method lists. The
schedule: a linear warm-up to the peak, then a cosine to 0 at the last step.

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
    """Name patterns from every submodule's ``no_weight_decay()``, with its prefix
    (``1.pos_embed`` for a ViT inside an ``nn.Sequential``; timm asks only the top module)."""
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

    ``rule="all"``: one group decayed by ``weight_decay``; ``"timm"``: a decayed group and one
    with ``weight_decay=0`` (see the module's docstring), empty groups left out.

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
    """AdamW or SGD with momentum 0.9, fused on a GPU (the scaler's verdict needs no sync).

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

    ``(step + 1) / warmup`` for the first ``warmup`` steps, then a cosine to 0 at ``total``.

    Example:
        >>> [round(lr_factor(step, total=6, warmup=2), 3) for step in range(6)]
        [0.5, 1.0, 1.0, 0.854, 0.5, 0.146]

    See chapter: Training and classification.
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))
