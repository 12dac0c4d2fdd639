"""Patchify, unpatchify and the two forms of the patch embedding."""

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from vitbook import (
    LinearPatchEmbedding,
    PatchEmbedding,
    conv_weight_from_linear,
    linear_weight_from_conv,
    patchify,
    unpatchify,
)

# All sizes differ (B=2, C=3, Gh=3, Gw=5, P=4) so a swapped axis cannot pass unnoticed.
B, C, GH, GW, P = 2, 3, 3, 5, 4


@pytest.fixture
def images():
    torch.manual_seed(0)
    return torch.randn(B, C, GH * P, GW * P)


def test_patchify_shape_and_layout(images):
    patches = patchify(images, P)
    assert patches.shape == (B, GH * GW, C * P * P)
    # Patch k sits at grid row k // Gw and column k % Gw, and is laid out (c ph pw).
    for k in range(GH * GW):
        row, col = k // GW, k % GW
        block = images[:, :, row * P : (row + 1) * P, col * P : (col + 1) * P]
        torch.testing.assert_close(patches[:, k], block.reshape(B, -1), rtol=0, atol=0)


def test_patchify_agrees_with_unfold_exactly(images):
    unfolded = F.unfold(images, kernel_size=P, stride=P)  # (B, C*P*P, Gh*Gw)
    torch.testing.assert_close(patchify(images, P), unfolded.transpose(1, 2), rtol=0, atol=0)


def test_patchify_agrees_with_independent_einops_pattern(images):
    expected = rearrange(images, "b c (gh ph) (gw pw) -> b gh gw c ph pw", ph=P, pw=P)
    expected = expected.reshape(B, GH * GW, C * P * P)
    assert torch.equal(patchify(images, P), expected)


def test_conv_patch_embedding_equals_patchify_times_conv_weights(images):
    torch.manual_seed(1)
    embed = PatchEmbedding(img_size=(GH * P, GW * P), patch_size=P, in_chans=C, embed_dim=7)
    weight = linear_weight_from_conv(embed.proj.weight)  # (D, C*P*P), (c ph pw) order
    by_matmul = patchify(images, P) @ weight.T + embed.proj.bias
    # float32 sums of 48 products in a different order: agree to rounding, not bit for bit.
    torch.testing.assert_close(embed(images), by_matmul, rtol=1e-5, atol=1e-5)


def test_one_hot_image_lands_in_the_expected_patch_and_position():
    # A single lit pixel must appear in exactly one patch, at the (c ph pw) index we predict.
    images = torch.zeros(1, C, GH * P, GW * P)
    c, y, x = 2, 2 * P + 1, 4 * P + 3
    images[0, c, y, x] = 1.0
    patches = patchify(images, P)
    k = (y // P) * GW + x // P
    index = c * P * P + (y % P) * P + x % P
    assert patches.nonzero().tolist() == [[0, k, index]]


def test_linear_and_conv_forms_agree_after_weight_copy(images):
    torch.manual_seed(2)
    conv = PatchEmbedding(img_size=(GH * P, GW * P), patch_size=P, in_chans=C, embed_dim=6)
    linear = LinearPatchEmbedding(patch_size=P, in_chans=C, embed_dim=6)
    with torch.no_grad():
        linear.proj.weight.copy_(linear_weight_from_conv(conv.proj.weight))
        linear.proj.bias.copy_(conv.proj.bias)
    # Conv2d and matmul sum in different orders: float32 rounding only.
    torch.testing.assert_close(linear(images), conv(images), rtol=1e-5, atol=1e-5)
    back = conv_weight_from_linear(linear.proj.weight, in_chans=C, patch_size=P)
    assert torch.equal(back, conv.proj.weight)


@pytest.mark.parametrize(("height", "width", "p"), [(12, 20, 4), (20, 12, 4), (1, 1, 1), (6, 9, 3)])
def test_unpatchify_inverts_patchify(height, width, p):
    images = torch.randn(B, C, height, width)
    grid = (height // p, width // p)
    assert torch.equal(unpatchify(patchify(images, p), p, grid), images)


def test_rectangular_patches():
    images = torch.randn(B, C, 6, 10)
    patches = patchify(images, (3, 5))
    assert patches.shape == (B, 4, C * 15)
    assert torch.equal(unpatchify(patches, (3, 5), (2, 2)), images)


def test_patch_embedding_reports_grid_for_non_square_images():
    embed = PatchEmbedding(img_size=(GH * P, GW * P), patch_size=P, in_chans=C, embed_dim=8)
    assert embed.grid_size == (GH, GW)
    assert embed.num_patches == GH * GW
    assert embed(torch.randn(B, C, GH * P, GW * P)).shape == (B, GH * GW, 8)
