"""Explicit and fused attention, single and multi-head, against PyTorch's own layer."""

import pytest
import torch
import torch.nn.functional as F

from vitbook import (
    MultiHeadSelfAttention,
    RelativePositionBias,
    SingleHeadAttention,
    scaled_dot_product_attention,
)

B, N, D, HEADS = 2, 7, 12, 3
# Fused kernels sum in another order than the explicit matmuls: float32 rounding only.
FUSED_TOL = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture
def qkv():
    torch.manual_seed(0)
    return torch.randn(B, HEADS, N, 4), torch.randn(B, HEADS, N, 4), torch.randn(B, HEADS, N, 5)


def test_explicit_matches_formula_and_rows_sum_to_one(qkv):
    q, k, v = qkv
    out, weights = scaled_dot_product_attention(q, k, v)
    expected_weights = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)  # sqrt(Dh) = 2
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, expected_weights @ v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, HEADS, N))
    assert (weights >= 0).all()


def test_explicit_agrees_with_torch_sdpa_without_mask(qkv):
    q, k, v = qkv
    out, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **FUSED_TOL)


def test_explicit_agrees_with_torch_sdpa_with_bool_and_float_masks(qkv):
    q, k, v = qkv
    bool_mask = torch.rand(N, N) > 0.4
    bool_mask |= torch.eye(N, dtype=torch.bool)  # every query keeps at least itself
    out, weights = scaled_dot_product_attention(q, k, v, bool_mask)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask), **FUSED_TOL
    )
    assert (weights[..., ~bool_mask] == 0).all()
    float_mask = torch.randn(HEADS, N, N)
    out, _ = scaled_dot_product_attention(q, k, v, float_mask)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask), **FUSED_TOL
    )


def test_single_head_attention_uses_its_projections():
    torch.manual_seed(0)
    head = SingleHeadAttention(embed_dim=D, head_dim=4)
    x = torch.randn(B, N, D)
    out, weights = head.forward_with_weights(x)
    expected, expected_weights = scaled_dot_product_attention(head.q(x), head.k(x), head.v(x))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert out.shape == (B, N, 4) and weights.shape == (B, N, N)
    torch.testing.assert_close(head(x), out)


@pytest.mark.parametrize("impl", ["explicit", "sdpa"])
def test_mhsa_equals_torch_multihead_attention(impl):
    torch.manual_seed(0)
    ours = MultiHeadSelfAttention(D, HEADS, impl=impl).eval()
    ref = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.proj.weight)
        ref.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(B, N, D)
    expected, expected_weights = ref(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(ours(x), expected, **FUSED_TOL)
    out, weights = ours.forward_with_weights(x)
    torch.testing.assert_close(out, expected, **FUSED_TOL)
    torch.testing.assert_close(weights, expected_weights, **FUSED_TOL)
    assert weights.shape == (B, HEADS, N, N)


def test_mhsa_explicit_and_sdpa_agree_with_relative_position_bias():
    torch.manual_seed(0)
    explicit = MultiHeadSelfAttention(D, HEADS, impl="explicit")
    fused = MultiHeadSelfAttention(D, HEADS, impl="sdpa")
    fused.load_state_dict(explicit.state_dict())
    bias = RelativePositionBias((2, 3), HEADS, num_prefix_tokens=1)
    with torch.no_grad():
        bias.relative_position_bias_table.normal_()  # large enough to change the result
    x = torch.randn(B, 7, D)
    torch.testing.assert_close(explicit(x, bias()), fused(x, bias()), **FUSED_TOL)
    assert not torch.allclose(explicit(x, bias()), explicit(x), atol=1e-3)


def test_mhsa_impl_is_visible_in_repr_and_state_dict_names():
    attn = MultiHeadSelfAttention(D, HEADS, impl="sdpa")
    assert "impl='sdpa'" in repr(attn)
    assert list(attn.state_dict()) == ["qkv.weight", "qkv.bias", "proj.weight", "proj.bias"]
    assert attn.qkv.weight.shape == (3 * D, D)
    assert MultiHeadSelfAttention(D, HEADS, qkv_bias=False).qkv.bias is None


def test_values_come_from_the_third_slot_of_qkv():
    # q = 3x and k = 0 (first and second slots), v = x (third slot): every logit is zero, so
    # each query attends uniformly and the output is the mean token. Taking v from another slot
    # would give 3 * mean or zero. (The q/k order is pinned by the nn.MultiheadAttention test.)
    attn = MultiHeadSelfAttention(4, 2)
    with torch.no_grad():
        attn.qkv.weight.zero_()
        attn.qkv.bias.zero_()
        attn.qkv.weight[0:4] = 3 * torch.eye(4)  # q = 3x
        attn.qkv.weight[8:12] = torch.eye(4)  # v = x
        attn.proj.weight.copy_(torch.eye(4))
        attn.proj.bias.zero_()
    x = torch.randn(1, 5, 4)
    out, weights = attn.forward_with_weights(x)
    torch.testing.assert_close(weights, torch.full((1, 2, 5, 5), 0.2))
    torch.testing.assert_close(out, x.mean(dim=1, keepdim=True).expand_as(x))


@pytest.mark.parametrize("impl", ["explicit", "sdpa"])
def test_permuting_tokens_permutes_outputs(impl):
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(D, HEADS, impl=impl)
    x = torch.randn(B, N, D)
    perm = torch.randperm(N)
    torch.testing.assert_close(attn(x[:, perm]), attn(x)[:, perm], **FUSED_TOL)
    _, weights = attn.forward_with_weights(x)
    _, permuted = attn.forward_with_weights(x[:, perm])
    torch.testing.assert_close(permuted, weights[:, :, perm][:, :, :, perm], **FUSED_TOL)
