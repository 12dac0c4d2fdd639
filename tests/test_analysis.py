"""Attention rollout, mean attention distance, position-embedding similarity and filter PCA."""

import itertools
import math

import pytest
import torch
from torch import nn

from vitbook.analysis import (
    attention_rollout,
    cls_rollout_map,
    macs,
    mean_attention_distance,
    patch_embedding_components,
    position_embedding_similarity,
    readout,
)
from vitbook.data.cifar import Normalize
from vitbook.positional import sincos_2d
from vitbook.vit import VisionTransformer, ViTConfig

# All sizes differ, so a swapped axis fails loudly: B=2, Nh=3, grid 3 x 5, one class token.
B, HEADS, GH, GW, PREFIX, P = 2, 3, 3, 5, 1, 4
N = PREFIX + GH * GW  # 16
# Sums and products of a few float32 numbers that are exact in theory: rounding only.
F32_TOL = {"rtol": 1e-5, "atol": 1e-6}


def random_attention(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).softmax(dim=-1)


def grid_attention(targets: dict[int, int]) -> torch.Tensor:
    """(N, N) one-hot attention: patch k attends to patch targets[k], prefix tokens to self."""
    attention = torch.zeros(N, N)
    attention[:PREFIX, :PREFIX] = torch.eye(PREFIX)
    for k, target in targets.items():
        attention[PREFIX + k, PREFIX + target] = 1.0
    return attention


# --- attention rollout ------------------------------------------------------------------------


def test_rollout_rows_sum_to_one_for_every_head_fusion():
    attentions = [random_attention(B, HEADS, N, N, seed=layer) for layer in range(4)]
    for fusion in ("mean", "max", "min"):
        rollout = attention_rollout(attentions, head_fusion=fusion)
        assert rollout.shape == (B, N, N)
        assert (rollout >= 0).all()
        torch.testing.assert_close(rollout.sum(-1), torch.ones(B, N), **F32_TOL)


def test_rollout_of_identity_attention_is_identity():
    identity = torch.eye(N).expand(B, HEADS, N, N)
    rollout = attention_rollout([identity])
    torch.testing.assert_close(rollout, torch.eye(N).expand(B, N, N), rtol=0, atol=0)


def test_rollout_matches_product_by_hand():
    n = 5
    first = random_attention(B, HEADS, n, n, seed=1)
    second = random_attention(B, HEADS, n, n, seed=2)
    rollout = attention_rollout([first, second])
    for b in range(B):
        a1 = 0.5 * first[b].mean(0) + 0.5 * torch.eye(n)
        a2 = 0.5 * second[b].mean(0) + 0.5 * torch.eye(n)
        torch.testing.assert_close(rollout[b], a2 @ a1, **F32_TOL)
    # The order matters: the last layer multiplies from the left.
    a1 = 0.5 * first[0].mean(0) + 0.5 * torch.eye(n)
    a2 = 0.5 * second[0].mean(0) + 0.5 * torch.eye(n)
    assert not torch.allclose(rollout[0], a1 @ a2, **F32_TOL)


def test_rollout_max_fusion_adds_identity_then_renormalises():
    n = 4
    attention = random_attention(B, HEADS, n, n, seed=3)
    fused = attention.amax(dim=1) + torch.eye(n)
    expected = fused / fused.sum(-1, keepdim=True)
    torch.testing.assert_close(attention_rollout([attention], head_fusion="max"), expected)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_rollout_of_uniform_attention_follows_theory(depth):
    # With U = J / N (idempotent), (I/2 + U/2)^L = 2^-L I + (1 - 2^-L) U.
    uniform = torch.full((B, HEADS, N, N), 1 / N)
    rollout = attention_rollout([uniform] * depth)
    expected = 0.5**depth * torch.eye(N) + (1 - 0.5**depth) * torch.full((N, N), 1 / N)
    torch.testing.assert_close(rollout, expected.expand(B, N, N), **F32_TOL)


def test_rollout_runs_on_model_attention_and_cls_map_reads_row_zero():
    torch.manual_seed(0)
    cfg = ViTConfig(img_size=(12, 20), patch_size=P, embed_dim=12, depth=2, num_heads=HEADS)
    model = VisionTransformer(cfg).eval()
    _, attentions = model.forward_with_attention(torch.randn(B, 3, 12, 20))
    rollout = attention_rollout(attentions)
    maps = cls_rollout_map(rollout, cfg.grid_size, num_prefix_tokens=cfg.num_prefix_tokens)
    assert not maps.requires_grad  # read-outs are detached, ready for plotting
    assert maps.shape == (B, GH, GW)
    for b, r, c in itertools.product(range(B), range(GH), range(GW)):
        assert maps[b, r, c] == rollout[b, 0, PREFIX + r * GW + c]  # row-major grid order
    torch.testing.assert_close(maps.sum((1, 2)), 1 - rollout[:, 0, 0], **F32_TOL)


def test_distilled_model_has_two_prefix_rows_and_a_distillation_token_map():
    torch.manual_seed(0)
    cfg = ViTConfig(img_size=(12, 20), patch_size=P, embed_dim=12, depth=2, num_heads=HEADS,
                    distilled=True)  # fmt: skip
    model = VisionTransformer(cfg).eval()
    _, attentions = model.forward_with_attention(torch.randn(B, 3, 12, 20))
    assert attentions[0].shape == (B, HEADS, 2 + GH * GW, 2 + GH * GW)
    rollout = attention_rollout(attentions)
    for token in (0, 1):
        maps = cls_rollout_map(rollout, cfg.grid_size, num_prefix_tokens=2, token=token)
        assert maps.shape == (B, GH, GW)
        for b, r, c in itertools.product(range(B), range(GH), range(GW)):
            assert maps[b, r, c] == rollout[b, token, 2 + r * GW + c]
    distances = mean_attention_distance(attentions[0], cfg.grid_size, P, num_prefix_tokens=2)
    assert distances.shape == (HEADS,)
    with pytest.raises(ValueError, match="has 17 tokens, but num_prefix_tokens=1"):
        mean_attention_distance(attentions[0], cfg.grid_size, P, num_prefix_tokens=1)
    with pytest.raises(ValueError, match=r"token=1 is not one of the num_prefix_tokens=1"):
        cls_rollout_map(rollout[:, 1:, 1:], cfg.grid_size, num_prefix_tokens=1, token=1)


def test_rollout_errors():
    good = random_attention(B, HEADS, N, N)
    with pytest.raises(ValueError, match="attentions is empty"):
        attention_rollout([])
    with pytest.raises(TypeError, match="must be a list"):
        attention_rollout(good)
    with pytest.raises(ValueError, match=r"attentions\[1\] has shape \(2, 3, 7, 7\).*same batch"):
        attention_rollout([good, random_attention(B, HEADS, 7, 7)])
    with pytest.raises(ValueError, match=r"attentions\[1\] has shape \(3, 3, 16, 16\)"):
        attention_rollout([good, random_attention(3, HEADS, N, N)])
    with pytest.raises(ValueError, match=r"as many keys as queries"):
        attention_rollout([random_attention(B, HEADS, N, 7)])
    with pytest.raises(ValueError, match=r"attentions\[0\] must have 4 dimensions"):
        attention_rollout([good[0]])
    with pytest.raises(ValueError, match="head_fusion='median' is not supported"):
        attention_rollout([good], head_fusion="median")


def test_cls_rollout_map_errors():
    rollout = attention_rollout([random_attention(B, HEADS, N, N)])
    with pytest.raises(ValueError, match="num_prefix_tokens=0 means there is no class token"):
        cls_rollout_map(rollout, (4, 4), num_prefix_tokens=0)  # 16 patches, but no class token
    with pytest.raises(ValueError, match=r"has 16 tokens, but num_prefix_tokens=1 plus grid_size"):
        cls_rollout_map(rollout, (GW, GW))
    with pytest.raises(ValueError, match="rollout must have 3 dimensions"):
        cls_rollout_map(rollout[0, 0], (GH, GW))


# --- mean attention distance ------------------------------------------------------------------


def test_self_attention_has_distance_zero():
    attention = torch.eye(N).expand(B, HEADS, N, N)
    distance = mean_attention_distance(attention, (GH, GW), P)
    torch.testing.assert_close(distance, torch.zeros(HEADS), rtol=0, atol=0)


def test_uniform_attention_gives_mean_pairwise_distance_by_brute_force():
    cells = list(itertools.product(range(GH), range(GW)))
    pairwise = [P * math.dist(a, b) for a in cells for b in cells]  # self pairs included
    expected = sum(pairwise) / len(pairwise)
    # Uniform over all N tokens: after dropping the class token it is uniform over the patches.
    attention = torch.full((B, HEADS, N, N), 1 / N)
    distance = mean_attention_distance(attention, (GH, GW), P, renormalize=True)
    torch.testing.assert_close(distance, torch.full((HEADS,), expected), **F32_TOL)
    # Without renormalising (the paper's way) the class token's share 1 / N counts as distance 0.
    paper = mean_attention_distance(attention, (GH, GW), P)
    torch.testing.assert_close(paper, torch.full((HEADS,), expected * (N - 1) / N), **F32_TOL)


def right_neighbour_targets() -> dict[int, int]:
    # Edge handling: the last column has no right neighbour and attends to its left neighbour,
    # which is also one patch away.
    return {
        r * GW + c: r * GW + (c + 1 if c < GW - 1 else c - 1)
        for r, c in itertools.product(range(GH), range(GW))
    }


def test_right_neighbour_head_gives_patch_size_and_heads_stay_apart():
    right = grid_attention(right_neighbour_targets())
    below = grid_attention({k: (k + GW) % (GH * GW) for k in range(GH * GW)})  # wraps last row
    heads = torch.stack([torch.eye(N), right, below])  # (Nh, N, N): self, right, below
    distance = mean_attention_distance(heads.expand(B, HEADS, N, N), (GH, GW), P)
    # Below: the first GH - 1 rows move one row down (P); the last row wraps to row 0 (2 P here).
    below_expected = P * ((GH - 1) * GW * 1 + GW * (GH - 1)) / (GH * GW)
    torch.testing.assert_close(distance, torch.tensor([0.0, P, below_expected]), **F32_TOL)


def test_class_token_weight_is_dropped_and_rows_renormalised():
    right = grid_attention(right_neighbour_targets())
    # Send 70 % of every patch query's attention to the class token instead.
    mixed = 0.3 * right
    mixed[PREFIX:, 0] = 0.7
    distance = mean_attention_distance(
        mixed.expand(B, HEADS, N, N), (GH, GW), P, renormalize=True
    )
    torch.testing.assert_close(distance, torch.full((HEADS,), float(P)), **F32_TOL)


def test_class_token_weight_counts_as_zero_distance_by_default():
    # The ViT authors' convention (the paper's Figure 7): drop the class token's row and column
    # and do not renormalise, so 30 % of the attention at distance P gives 0.3 P.
    right = grid_attention(right_neighbour_targets())
    mixed = 0.3 * right
    mixed[PREFIX:, 0] = 0.7
    attention = mixed.expand(B, HEADS, N, N)
    distance = mean_attention_distance(attention, (GH, GW), P)
    torch.testing.assert_close(distance, torch.full((HEADS,), 0.3 * P), **F32_TOL)
    explicit = mean_attention_distance(attention, (GH, GW), P, renormalize=False)
    torch.testing.assert_close(explicit, distance, rtol=0, atol=0)


def test_renormalising_by_hand_on_a_two_patch_grid():
    # Class token, then patches 0 and 1 side by side, P = 4: patch 0 sends 0.2 to the class
    # token, 0.5 to itself, 0.3 to patch 1; patch 1 sends 0.6, 0.4 to patch 0, 0.0 to itself.
    # Paper: (0.3 * 4 + 0.4 * 4) / 2 = 1.4. Renormalised: (0.3 / 0.8 * 4 + 0.4 / 0.4 * 4) / 2
    # = (1.5 + 4) / 2 = 2.75.
    attention = torch.tensor(
        [[1.0, 0.0, 0.0], [0.2, 0.5, 0.3], [0.6, 0.4, 0.0]]
    ).expand(1, 1, 3, 3)
    paper = mean_attention_distance(attention, (1, 2), 4)
    renormalised = mean_attention_distance(attention, (1, 2), 4, renormalize=True)
    torch.testing.assert_close(paper, torch.tensor([1.4]), **F32_TOL)
    torch.testing.assert_close(renormalised, torch.tensor([2.75]), **F32_TOL)


def test_renormalize_makes_no_difference_without_prefix():
    attention = random_attention(B, HEADS, GH * GW, GH * GW)
    torch.testing.assert_close(
        mean_attention_distance(attention, (GH, GW), P, num_prefix_tokens=0),
        mean_attention_distance(attention, (GH, GW), P, num_prefix_tokens=0, renormalize=True),
        **F32_TOL,
    )


def test_distance_averages_over_batch_and_works_without_prefix():
    patches = GH * GW
    right = grid_attention(right_neighbour_targets())[PREFIX:, PREFIX:]  # (Gh*Gw, Gh*Gw)
    attention = torch.stack([torch.eye(patches), right])[:, None].expand(B, HEADS, -1, -1)
    distance = mean_attention_distance(attention, (GH, GW), 7, num_prefix_tokens=0)
    torch.testing.assert_close(distance, torch.full((HEADS,), 7 / 2), **F32_TOL)


def test_distance_on_transposed_grid_differs():
    # Grid 5 x 3 instead of 3 x 5: the same token count, other distances for the same head.
    attention = random_attention(B, HEADS, N, N)
    wide = mean_attention_distance(attention, (GH, GW), P)
    tall = mean_attention_distance(attention, (GW, GH), P)
    assert wide.shape == tall.shape == (HEADS,)
    assert not torch.allclose(wide, tall)


def test_mean_attention_distance_errors():
    attention = random_attention(B, HEADS, N, N)
    with pytest.raises(TypeError, match="renormalize must be True or False, got 'yes'"):
        mean_attention_distance(attention, (GH, GW), P, renormalize="yes")
    with pytest.raises(ValueError, match=r"16 tokens, but num_prefix_tokens=1 plus .*\(4, 4\)"):
        mean_attention_distance(attention, 4, P)
    with pytest.raises(ValueError, match="patch_size=0 must be a positive integer"):
        mean_attention_distance(attention, (GH, GW), 0)
    with pytest.raises(ValueError, match=r"num_prefix_tokens=-1 must be an int >= 0"):
        mean_attention_distance(attention, (GH, GW), P, num_prefix_tokens=-1)
    with pytest.raises(ValueError, match="attention must have 4 dimensions"):
        mean_attention_distance(attention[0], (GH, GW), P)
    with pytest.raises(TypeError, match="attention has dtype torch.int64"):
        mean_attention_distance(attention.long(), (GH, GW), P)


# --- position-embedding similarity --------------------------------------------------------------


def test_similarity_diagonal_symmetry_and_one_pair_by_hand():
    torch.manual_seed(0)
    pos_embed = torch.randn(1, N, 6)
    similarity = position_embedding_similarity(pos_embed, (GH, GW))
    assert similarity.shape == (GH, GW, GH, GW)
    flat = similarity.reshape(GH * GW, GH * GW)
    torch.testing.assert_close(torch.diagonal(flat), torch.ones(GH * GW), **F32_TOL)
    torch.testing.assert_close(flat, flat.T, rtol=0, atol=0)
    a, b = pos_embed[0, PREFIX + 1 * GW + 4], pos_embed[0, PREFIX + 2 * GW + 0]  # (1, 4), (2, 0)
    manual = (a @ b) / (a.norm() * b.norm())
    torch.testing.assert_close(similarity[1, 4, 2, 0], manual, **F32_TOL)


def test_similarity_drops_prefix_rows_and_accepts_patch_table():
    table = torch.randn(GH * GW, 6)
    with_cls = torch.cat([torch.randn(2, 6), table])[None]  # (1, 2 + Gh*Gw, D)
    torch.testing.assert_close(
        position_embedding_similarity(with_cls, (GH, GW), num_prefix_tokens=2),
        position_embedding_similarity(table, (GH, GW)),
        rtol=0,
        atol=0,
    )


def test_sincos_2d_similarity_depends_only_on_offset():
    similarity = position_embedding_similarity(sincos_2d((GH, GW), 16), (GH, GW)).double()
    by_offset: dict[tuple[int, int], list[float]] = {}
    for r, c, r2, c2 in itertools.product(range(GH), range(GW), range(GH), range(GW)):
        by_offset.setdefault((r - r2, c - c2), []).append(similarity[r, c, r2, c2].item())
    assert len(by_offset) == (2 * GH - 1) * (2 * GW - 1)
    for offset, values in by_offset.items():
        assert max(values) - min(values) < 1e-5, offset  # float32 table: rounding only
    assert max(v[0] for o, v in by_offset.items() if o != (0, 0)) < 1 - 1e-3  # offset matters


def test_position_embedding_similarity_errors():
    with pytest.raises(ValueError, match=r"pos_embed has 16 tokens, but num_prefix_tokens=0"):
        position_embedding_similarity(torch.randn(1, N, 6), (GH, GW), num_prefix_tokens=0)
    with pytest.raises(ValueError, match=r"2-D table, patch rows only\) has 16 tokens"):
        position_embedding_similarity(torch.randn(N, 6), (GH, GW))
    with pytest.raises(ValueError, match=r"pos_embed has shape \(2, 16, 6\).*\(1, N, D\)"):
        position_embedding_similarity(torch.randn(2, N, 6), (GH, GW))
    with pytest.raises(TypeError, match="pos_embed must be a torch.Tensor"):
        position_embedding_similarity([[0.0] * 6] * 15, (GH, GW))


# --- patch-embedding filter PCA -----------------------------------------------------------------


@pytest.mark.parametrize(("d", "c", "p"), [(7, 3, 2), (20, 2, 3)])  # D < C*P*P and D > C*P*P
def test_components_orthonormal_ratios_sorted_and_reconstruction_exact(d, c, p):
    torch.manual_seed(0)
    weight = torch.randn(d, c, p, p, dtype=torch.float64)
    k = min(d, c * p * p)
    components, ratios = patch_embedding_components(weight, num_components=k)
    assert components.shape == (k, c, p, p) and ratios.shape == (k,)
    basis = components.reshape(k, -1)  # (K, C*P*P) in (c ph pw) order
    torch.testing.assert_close(basis @ basis.T, torch.eye(k, dtype=torch.float64))
    assert (ratios[:-1] >= ratios[1:]).all() and (ratios >= 0).all()
    assert ratios.sum() <= 1 + 1e-12
    torch.testing.assert_close(ratios.sum(), torch.tensor(1.0, dtype=torch.float64))
    centred = weight.reshape(d, -1) - weight.reshape(d, -1).mean(0)
    torch.testing.assert_close((centred @ basis.T) @ basis, centred)


def test_components_explain_variance_and_fewer_components_keep_less():
    torch.manual_seed(1)
    weight = torch.randn(12, 3, 2, 2)
    components, ratios = patch_embedding_components(weight, num_components=4)
    assert ratios.sum() < 1
    centred = weight.flatten(1) - weight.flatten(1).mean(0)
    projected_variance = (centred @ components.flatten(1).T).pow(2).sum(0)
    # float32 SVD and matmuls on 12 x 12 values: rounding only.
    torch.testing.assert_close(projected_variance / centred.pow(2).sum(), ratios, **F32_TOL)
    # Signs are fixed: the largest-magnitude entry of each component is positive.
    flat = components.flatten(1)
    assert (flat.gather(1, flat.abs().argmax(1, keepdim=True)) > 0).all()


def test_default_28_components_of_a_model_patch_embedding():
    torch.manual_seed(2)
    cfg = ViTConfig(img_size=8, patch_size=P, embed_dim=33, depth=1, num_heads=HEADS)
    weight = VisionTransformer(cfg).patch_embed.proj.weight  # (33, 3, 4, 4): D=33, C*P*P=48
    components, ratios = patch_embedding_components(weight)
    assert components.shape == (28, 3, P, P) and ratios.shape == (28,)
    assert not components.requires_grad and (ratios[:-1] >= ratios[1:]).all()


def test_patch_embedding_components_errors():
    weight = torch.randn(7, 3, 2, 2)
    with pytest.raises(ValueError, match=r"num_components=8 is more than min\(D, C \* P \* P\)"):
        patch_embedding_components(weight, num_components=8)
    with pytest.raises(ValueError, match=r"use num_components <= 7"):
        patch_embedding_components(weight)  # the default 28 is too many for 7 filters
    with pytest.raises(ValueError, match="num_components=0 must be a positive integer"):
        patch_embedding_components(weight, num_components=0)
    with pytest.raises(TypeError, match="num_components must be an int"):
        patch_embedding_components(weight, num_components=2.0)
    with pytest.raises(ValueError, match="weight must have 4 dimensions"):
        patch_embedding_components(weight.flatten(1))


# --- read-outs of a trained photo model: rollout and distances at once, MACs --------------


def test_readout_is_rollout_and_distance_of_the_normalised_photos():
    torch.manual_seed(0)
    vit = VisionTransformer(ViTConfig(img_size=(8, 12), patch_size=4, embed_dim=8, depth=3,
                                      num_heads=2, num_classes=3))  # fmt: skip
    normalize = Normalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    photos = torch.rand(5, 3, 8, 12)
    out = readout(nn.Sequential(normalize, vit), photos, maps=2)
    _, attentions = vit.forward_with_attention(normalize(photos))
    expected_rollout = attention_rollout([a[:2] for a in attentions])[:, 0, 1:].reshape(2, 2, 3)
    torch.testing.assert_close(out["rollout_maps"], expected_rollout)
    expected_distance = torch.stack([mean_attention_distance(a, (2, 3), 4) for a in attentions])
    torch.testing.assert_close(out["mean_attention_distance"], expected_distance)


def test_macs_are_counted_per_op_and_the_fused_attention_is_not():
    torch.manual_seed(0)
    config = ViTConfig(img_size=(8, 12), patch_size=4, embed_dim=8, depth=2, num_heads=2,
                       num_classes=3)  # fmt: skip
    images = torch.rand(1, 3, 8, 12)
    explicit = macs(VisionTransformer(config), images)
    fused = macs(VisionTransformer(ViTConfig(**{**vars(config), "attn_impl": "sdpa"})), images)
    tokens, dh = 7, 4  # 2 x 3 patches and the class token; D / heads
    # Q K^T and A V: per block, 2 products of (tokens x tokens x Dh) MACs per head
    assert explicit["aten.bmm"] == 2 * 2 * 2 * tokens * tokens * dh
    assert "aten.bmm" not in fused and fused["aten.addmm"] == explicit["aten.addmm"]
    patch = 6 * 8 * (3 * 4 * 4)  # six patches, each a (C P P) -> D product
    assert explicit["aten.convolution"] == patch


@pytest.mark.parametrize("maps", [-1, 0, 2.0, True, "2"])
def test_readout_refuses_a_count_of_maps_that_is_not_one_or_more(maps):
    vit = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=1,
                                      num_heads=2, num_classes=3))  # fmt: skip
    model = nn.Sequential(Normalize((0.5,) * 3, (0.5,) * 3), vit)
    with pytest.raises(ValueError, match=rf"maps={maps!r}: .* a whole number of 1 or more"):
        readout(model, torch.rand(4, 3, 8, 8), maps=maps)
