"""vitbook.train.optim: which parameters decay under each rule, the optimizers, the schedule."""

import math

import pytest
import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize
from vitbook.train import fit
from vitbook.train.optim import lr_factor, make_optimizer, param_groups


def vit(**overrides):
    torch.manual_seed(0)
    fields = {"img_size": 8, "patch_size": 4, "embed_dim": 8, "depth": 2, "num_heads": 2,
              "num_classes": 3}  # fmt: skip
    return VisionTransformer(ViTConfig(**{**fields, **overrides}))


def names(model, group):
    ids = {id(p) for p in group["params"]}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_rule_all_is_one_group_of_every_trained_parameter_in_order():
    model = vit()
    model.norm.requires_grad_(False)
    (group,) = param_groups(model, 0.05, "all")
    assert group["weight_decay"] == 0.05
    assert group["params"] == [p for p in model.parameters() if p.requires_grad]


def test_rule_timm_decays_only_matrices_and_kernels():
    model = vit()
    decayed, kept = param_groups(model, 0.05, "timm")
    assert (decayed["weight_decay"], kept["weight_decay"]) == (0.05, 0.0)
    weights = {"patch_embed.proj.weight", "head.weight"} | {
        f"blocks.{i}.{layer}.weight" for i in range(2)
        for layer in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    }  # fmt: skip
    assert names(model, decayed) == weights
    assert names(model, kept) == {n for n, _ in model.named_parameters()} - weights
    assert {"pos_embed", "cls_token", "norm.weight", "blocks.1.norm2.bias"} <= names(model, kept)


def test_rule_timm_sees_through_a_sequential_and_a_model_s_own_list():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = vit(pos_embed="relative")
            self.gain = nn.Parameter(torch.ones(3, 3))  # 2-D, but listed below

        def no_weight_decay(self):
            return {"ga*"}  # timm's lists may hold fnmatch patterns

        def forward(self, x):
            return self.vit(x) @ self.gain

    model = nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), Scaled())
    decayed, kept = param_groups(model, 0.1, "timm")
    assert {"1.gain", "1.vit.cls_token", "1.vit.rel_pos_bias.0.relative_position_bias_table"} <= (
        names(model, kept)
    )
    assert "1.vit.head.weight" in names(model, decayed)
    assert not any("pos_embed" in n or n.endswith("bias") for n in names(model, decayed))


def test_a_group_that_would_be_empty_is_left_out_and_unknown_rules_refused():
    (only,) = param_groups(nn.LayerNorm(4), 0.05, "timm")
    assert only["weight_decay"] == 0.0 and len(only["params"]) == 2
    with pytest.raises(ValueError, match=r"weight_decay_rule='deit' is not supported"):
        param_groups(nn.LayerNorm(4), 0.05, "deit")


class ZeroGradient(nn.Module):
    """A linear classifier with a 1-D and a 2-D parameter whose gradient is exactly 0."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.scale = nn.Parameter(torch.ones(3))
        self.matrix = nn.Parameter(torch.ones(2, 2))

    def forward(self, x):
        return self.linear(x.flatten(1)) + 0 * (self.scale.sum() + self.matrix.sum())


@pytest.mark.parametrize("rule", ["all", "timm"])
def test_fit_decays_what_the_rule_says(rule):
    """SGD with a zero gradient: a decayed parameter shrinks by (1 - lr wd) per step, exactly."""
    torch.manual_seed(0)
    model = ZeroGradient()
    data = (torch.randn(8, 1, 2, 2), torch.arange(8) % 2)
    fit(model, data, epochs=1, batch_size=8, lr=0.1, weight_decay=0.5, optimizer="sgd",
        warmup_epochs=0, weight_decay_rule=rule, progress=False)  # fmt: skip
    # one step of a one-step cosine: the factor is 1; SGD adds wd p to the gradient
    shrunk = torch.full((2, 2), 1 - 0.1 * 0.5)
    assert torch.equal(model.matrix.detach(), shrunk)
    expected_scale = torch.ones(3) if rule == "timm" else torch.full((3,), 1 - 0.1 * 0.5)
    assert torch.equal(model.scale.detach(), expected_scale)


def test_optimizers_and_schedule():
    groups = param_groups(nn.Linear(2, 2), 0.05)
    adamw = make_optimizer("adamw", groups, 3e-4, torch.device("cpu"))
    assert type(adamw) is torch.optim.AdamW and adamw.param_groups[0]["lr"] == 3e-4
    factors = [lr_factor(step, total=10, warmup=4) for step in range(10)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]  # linear warm-up, counted in steps
    assert factors[4] == 1.0 and factors[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 6)))
    assert all(a >= b for a, b in zip(factors[3:], factors[4:], strict=False))  # then it decays
    assert lr_factor(0, total=5, warmup=0) == 1.0
