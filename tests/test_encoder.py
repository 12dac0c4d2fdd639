"""The MLP and the encoder block against torch.nn.TransformerEncoderLayer."""

import pytest
import torch
from torch import nn

from vitbook import MLP, EncoderBlock

B, N, D, HEADS = 2, 5, 12, 3
TOL = {"rtol": 1e-5, "atol": 1e-5}  # different summation order in fused kernels: rounding only


def copy_block_into_torch_layer(block: EncoderBlock, layer: nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(block.attn.qkv.weight)
        layer.self_attn.in_proj_bias.copy_(block.attn.qkv.bias)
        layer.self_attn.out_proj.weight.copy_(block.attn.proj.weight)
        layer.self_attn.out_proj.bias.copy_(block.attn.proj.bias)
        layer.linear1.load_state_dict(block.mlp.fc1.state_dict())
        layer.linear2.load_state_dict(block.mlp.fc2.state_dict())
        layer.norm1.load_state_dict(block.norm1.state_dict())
        layer.norm2.load_state_dict(block.norm2.state_dict())


def randomise_norms(block: EncoderBlock) -> None:
    with torch.no_grad():
        for norm in (block.norm1, block.norm2):
            norm.weight.normal_()
            norm.bias.normal_()


def test_mlp_is_linear_gelu_linear():
    torch.manual_seed(0)
    mlp = MLP(D, 4 * D)
    x = torch.randn(B, N, D)
    expected = mlp.fc2(torch.nn.functional.gelu(mlp.fc1(x)))
    torch.testing.assert_close(mlp(x), expected)
    assert list(mlp.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_block_equals_torch_transformer_encoder_layer(norm_first, attn_impl):
    torch.manual_seed(0)
    block = EncoderBlock(D, HEADS, norm_first=norm_first, norm_eps=1e-5, attn_impl=attn_impl).eval()
    randomise_norms(block)
    layer = nn.TransformerEncoderLayer(
        D,
        HEADS,
        dim_feedforward=4 * D,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    copy_block_into_torch_layer(block, layer)
    x = torch.randn(B, N, D)
    torch.testing.assert_close(block(x), layer(x), **TOL)
    out, weights = block.forward_with_weights(x)
    torch.testing.assert_close(out, layer(x), **TOL)
    assert weights.shape == (B, HEADS, N, N)


def test_block_names_match_timm():
    block = EncoderBlock(D, HEADS)
    names = [name for name, _ in block.named_parameters()]
    assert names == [
        "norm1.weight",
        "norm1.bias",
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.proj.weight",
        "attn.proj.bias",
        "norm2.weight",
        "norm2.bias",
        "mlp.fc1.weight",
        "mlp.fc1.bias",
        "mlp.fc2.weight",
        "mlp.fc2.bias",
    ]
    assert block.mlp.fc1.out_features == 4 * D
    assert block.norm1.eps == 1e-6


def test_dropout_only_acts_in_training():
    torch.manual_seed(0)
    block = EncoderBlock(D, HEADS, drop=0.5, attn_drop=0.5)
    x = torch.randn(B, N, D)
    block.eval()
    torch.testing.assert_close(block(x), block(x), rtol=0, atol=0)
    block.train()
    assert not torch.allclose(block(x), block(x))
