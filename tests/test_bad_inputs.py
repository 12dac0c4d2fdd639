"""Hostile and mistaken inputs: config, model inputs, attention, analysis and widgets.

Each case names the error type and a pattern that the message must match: the argument, the
offending value and, where there is one, the fix. Weight files and converters are in
``test_bad_files.py``, training in ``test_bad_training.py``.
"""

import itertools

import numpy as np
import pytest
import torch

from vitbook import (
    MLP,
    EncoderBlock,
    MultiHeadSelfAttention,
    VisionTransformer,
    ViTConfig,
    scaled_dot_product_attention,
    sincos_2d,
)
from vitbook.analysis import (
    attention_rollout,
    cls_rollout_map,
    mean_attention_distance,
    patch_embedding_components,
    position_embedding_similarity,
)
from vitbook.train import evaluate, predict
from vitbook.widgets import (
    MAX_FRAMES,
    attention_explorer,
    explore,
    patch_explorer,
    position_similarity_explorer,
    sincos_explorer,
)

SMALL = {"img_size": 8, "patch_size": 4, "embed_dim": 12, "depth": 2, "num_heads": 3,
         "num_classes": 5}  # fmt: skip


def small_model() -> VisionTransformer:
    return VisionTransformer(ViTConfig(**SMALL)).eval()


def images(**kwargs) -> torch.Tensor:
    return torch.rand(2, 3, 8, 8, **kwargs)


def with_value(value: float) -> torch.Tensor:
    x = images()
    x[1, 2, 3, 4] = value
    return x


def softmaxed(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).softmax(dim=-1)


def check(case):
    _, call, error, pattern = case
    with pytest.raises(error, match=pattern):
        call()


def ids(cases):
    return [case[0] for case in cases]


CONFIG = [
    ("qkv_bias as a string", lambda: ViTConfig(qkv_bias="no"), TypeError,
     r"qkv_bias must be True or False, got 'no' of type str"),
    ("class_token as an int", lambda: ViTConfig(class_token=1), TypeError,
     r"class_token must be True or False, got 1"),
    ("mlp_ratio giving an MLP of width 0", lambda: ViTConfig(mlp_ratio=1e-6), ValueError,
     r"mlp_ratio=1e-06 gives an MLP of width int\(768 \* 1e-06\) = 0; use mlp_ratio >= "),
    ("mlp_ratio as a string", lambda: ViTConfig(mlp_ratio="4"), TypeError,
     r"mlp_ratio must be a number, got '4' of type str"),
    ("mlp_ratio NaN", lambda: ViTConfig(mlp_ratio=float("nan")), ValueError,
     r"mlp_ratio=nan must be a finite number > 0"),
    ("norm_eps infinite", lambda: ViTConfig(norm_eps=float("inf")), ValueError,
     r"norm_eps=inf must be a finite number > 0 and < 1; timm uses 1e-6"),
    ("norm_eps as large as a variance", lambda: ViTConfig(norm_eps=5.0), ValueError,
     r"norm_eps=5\.0 must be a finite number > 0 and < 1"),
    ("depth as a string", lambda: ViTConfig(depth="12"), TypeError,
     r"depth must be an int, got '12' of type str"),
    ("num_classes as a string", lambda: ViTConfig(num_classes="10"), TypeError,
     r"num_classes must be an int, got '10'.*use 0 for no head"),
    ("num_classes negative", lambda: ViTConfig(num_classes=-1), ValueError,
     r"num_classes=-1 must be an int >= 0"),
    ("img_size as a string", lambda: ViTConfig(img_size="224"), TypeError,
     r"img_size must be an int or a \(height, width\) pair of ints, got '224'"),
    ("drop_rate as a string", lambda: ViTConfig(drop_rate="0.1"), TypeError,
     r"drop_rate must be a number, got '0\.1'"),
    ("attn_drop_rate of 1", lambda: ViTConfig(attn_drop_rate=1.0), ValueError,
     r"attn_drop_rate=1\.0 must be a finite number >= 0 and < 1; use 0\.0 for no dropout"),
    ("pos_embed unhashable", lambda: ViTConfig(pos_embed=["learned"]), ValueError,
     r"pos_embed=\['learned'\] is not supported; choose one of"),
    ("unknown override in from_name", lambda: ViTConfig.from_name("ViT-S/16", layers=3),
     ValueError, r"unknown ViTConfig field\(s\) \['layers'\]"),
    ("preset name not a string", lambda: ViTConfig.from_name(["ViT-B/16"]), ValueError,
     r"unknown preset name \['ViT-B/16'\]; choose one of ViT-Ti/16"),
    ("sine-cosine base as a string", lambda: sincos_2d(4, 8, base="1e4"),
     TypeError, r"base must be a number, got '1e4' of type str; the usual value is 10000"),
    ("block with mlp_ratio as a string", lambda: EncoderBlock(12, 3, mlp_ratio="4"), TypeError,
     r"mlp_ratio must be a number, got '4'"),
    ("block with norm_first as a string", lambda: EncoderBlock(12, 3, norm_first="yes"),
     TypeError, r"norm_first must be True or False, got 'yes'"),
]  # fmt: skip


@pytest.mark.parametrize("case", CONFIG, ids=ids(CONFIG))
def test_config(case):
    check(case)


MODEL_INPUTS = [
    ("float64 images", lambda: small_model()(images(dtype=torch.float64)), TypeError,
     r"images has dtype torch\.float64 but the model computes in torch\.float32; convert with "
     r"images\.float\(\)"),
    ("float16 images", lambda: small_model()(images(dtype=torch.float16)), TypeError,
     r"images has dtype torch\.float16 but the model computes in torch\.float32; "
     r"convert with images\.float\(\)"),
    ("bfloat16 images", lambda: small_model()(images(dtype=torch.bfloat16)), TypeError,
     r"images has dtype torch\.bfloat16 but the model"),
    ("images on another device", lambda: small_model()(images(device="meta")), ValueError,
     r"images is on device meta but the model is on cpu; move it with images\.to\('cpu'\)"),
    # Values are checked where images come in (predict, evaluate, fit), not in forward, where a
    # check would make a GPU wait for the host on every call.
    ("NaN pixel into predict", lambda: predict(small_model(), with_value(float("nan"))),
     ValueError, r"images has 1 non-finite value\(s\) \(NaN\) among 384"),
    ("inf pixel into predict", lambda: predict(small_model(), with_value(float("inf"))),
     ValueError, r"images has 1 non-finite value\(s\) \(inf\) among 384"),
    ("NaN pixel into evaluate", lambda: evaluate(
        small_model(), (with_value(float("nan")), torch.tensor([0, 1]))), ValueError,
     r"data images has 1 non-finite value\(s\) \(NaN\) among 384"),
    # A softmax over dim 1 of (B, 1, n_cls) logits is all ones: the outputs' shape is checked
    # (a shape, so no GPU sync) before any probability is read.
    ("(B, 1, n_cls) logits into predict", lambda: predict(
        torch.nn.Sequential(small_model(), torch.nn.Unflatten(1, (1, 5))), images()),
     ValueError, r"the model returned \(2, 1, 5\) for 2 images; predicting needs \(B, n_cls\) "
     r"logits, .*logits\[:, 0\] for \(B, 1, n_cls\)"),
    ("(B, 1, n_cls) logits into evaluate", lambda: evaluate(
        torch.nn.Sequential(small_model(), torch.nn.Unflatten(1, (1, 5))),
        (images(), torch.tensor([0, 3]))),
     ValueError, r"the model returned \(2, 1, 5\) for 2 images"),
    ("one logit for the whole batch", lambda: predict(
        torch.nn.Sequential(small_model(), torch.nn.Flatten(0)), images()),
     ValueError, r"the model returned \(10,\) for 2 images"),
    ("float64 tokens into attention", lambda: MultiHeadSelfAttention(12, 3)(
        torch.zeros(1, 4, 12, dtype=torch.float64)), TypeError,
     r"tokens has dtype torch\.float64 but the layer computes in torch\.float32; convert with "
     r"tokens\.float\(\)"),
    ("float64 tokens into a block", lambda: EncoderBlock(12, 3)(
        torch.zeros(1, 4, 12, dtype=torch.float64)), TypeError,
     r"tokens has dtype torch\.float64 but the block computes in torch\.float32"),
    ("integer tokens into an MLP", lambda: MLP(4, 8)(torch.zeros(1, 2, 4, dtype=torch.long)),
     TypeError, r"tokens has dtype torch\.int64, but a floating-point tensor is needed"),
    ("list of tokens into a block", lambda: EncoderBlock(12, 3)([[0.0] * 12]), TypeError,
     r"tokens must be a torch\.Tensor of shape \(B, N, D\), got list"),
]  # fmt: skip


@pytest.mark.parametrize("case", MODEL_INPUTS, ids=ids(MODEL_INPUTS))
def test_model_inputs(case):
    check(case)


def test_forward_passes_check_shapes_not_values():
    """NaN in, NaN out, and no error: a value check in forward would sync a GPU every call."""
    model = small_model()
    assert model(with_value(float("nan")))[1].isnan().all()
    _, weights = scaled_dot_product_attention(Q, Q, Q, torch.full((5, 5), float("nan")))
    assert weights.isnan().all()


def test_a_model_in_float64_takes_float64_images():
    model = small_model().double()
    assert model(images(dtype=torch.float64)).dtype == torch.float64


Q = torch.randn(2, 5, 4)
INT_MASK = torch.eye(5, dtype=torch.long)

ATTENTION = [
    ("integer 0/1 mask", lambda: scaled_dot_product_attention(Q, Q, Q, INT_MASK), TypeError,
     r"mask has dtype torch\.int64; an integer 0/1 mask would be added to the logits and mask "
     r"nothing\. Convert it with mask\.bool\(\) \(True = may attend\)"),
    ("integer mask on the fused path", lambda: MultiHeadSelfAttention(12, 3, impl="sdpa")(
        torch.zeros(1, 5, 12), INT_MASK), TypeError, r"mask has dtype torch\.int64.*mask\.bool"),
    ("integer mask on the module's explicit path", lambda: MultiHeadSelfAttention(12, 3)(
        torch.zeros(1, 5, 12), INT_MASK), TypeError, r"mask has dtype torch\.int64"),
    ("mask of the wrong shape", lambda: scaled_dot_product_attention(
        Q, Q, Q, torch.ones(4, 5, dtype=torch.bool)), ValueError,
     r"mask has shape \(4, 5\), which does not broadcast to the attention logits' shape "
     r"\(2, 5, 5\)"),
    ("mask of the wrong shape on the fused path", lambda: MultiHeadSelfAttention(
        12, 3, impl="sdpa")(torch.zeros(1, 5, 12), torch.ones(3, 3, dtype=torch.bool)),
     ValueError, r"mask has shape \(3, 3\), which does not broadcast to .* \(1, 3, 5, 5\)"),
    ("mask as a list", lambda: scaled_dot_product_attention(Q, Q, Q, [[True]]), TypeError,
     r"mask must be a bool tensor \(True = may attend\) or None, got list"),
    ("float64 mask for float32 queries", lambda: scaled_dot_product_attention(
        Q, Q, Q, torch.zeros(5, 5, dtype=torch.float64)), TypeError,
     r"mask has dtype torch\.float64 but q computes in torch\.float32"),
    ("mask on another device", lambda: scaled_dot_product_attention(
        Q, Q, Q, torch.ones(5, 5, dtype=torch.bool, device="meta")), ValueError,
     r"mask is on device meta but the queries are on cpu"),
    ("q, k, v of different dtypes", lambda: scaled_dot_product_attention(Q, Q.double(), Q),
     TypeError, r"k has dtype torch\.float64 but q computes in torch\.float32"),
    ("q as a list", lambda: scaled_dot_product_attention([[0.0]], Q, Q), TypeError,
     r"q must be a torch\.Tensor of shape \(\.\.\., tokens, features\), got list"),
    ("one-dimensional q", lambda: scaled_dot_product_attention(torch.zeros(4), Q, Q),
     ValueError, r"q has shape \(4,\); it needs at least 2 dimensions"),
    ("batch dimensions that do not broadcast", lambda: scaled_dot_product_attention(
        torch.zeros(2, 5, 4), torch.zeros(3, 5, 4), torch.zeros(3, 5, 4)), ValueError,
     r"q, k and v have shapes \(2, 5, 4\), \(3, 5, 4\) and \(3, 5, 4\), whose leading"),
]  # fmt: skip


@pytest.mark.parametrize("case", ATTENTION, ids=ids(ATTENTION))
def test_attention(case):
    check(case)


def test_bool_and_additive_float_masks_still_mask():
    keep = torch.ones(5, 5, dtype=torch.bool).tril()  # True = may attend
    _, bool_weights = scaled_dot_product_attention(Q, Q, Q, keep)
    additive = torch.zeros(5, 5).masked_fill(~keep, float("-inf"))
    _, float_weights = scaled_dot_product_attention(Q, Q, Q, additive)
    assert (bool_weights[:, ~keep] == 0).all()
    torch.testing.assert_close(bool_weights, float_weights)


GOOD = softmaxed(2, 3, 5, 5)
NEGATIVE = GOOD.clone()
NEGATIVE[0, 0, 0, :2] = torch.tensor([-0.5, 1.5 - GOOD[0, 0, 0, 2:].sum()])

ANALYSIS = [
    ("negative weights in rollout", lambda: attention_rollout([NEGATIVE]), ValueError,
     r"attentions\[0\] has negative weights \(down to -0\.5\); attention weights come out of a "
     r"softmax, so pass weights, not logits"),
    ("logits instead of weights in rollout", lambda: attention_rollout(
        [GOOD, torch.randn(2, 3, 5, 5).abs()]), ValueError,
     r"attentions\[1\] has rows that do not sum to 1 \(off by up to"),
    ("NaN weights in rollout", lambda: attention_rollout(
        [torch.full((2, 3, 5, 5), float("nan"))]), ValueError,
     r"attentions\[0\] has 150 non-finite value\(s\) \(NaN\)"),
    ("negative weights in mean attention distance", lambda: mean_attention_distance(
        NEGATIVE, (2, 2), 4), ValueError, r"attention has negative weights"),
    ("inf in a rollout map", lambda: cls_rollout_map(
        torch.full((1, 5, 5), float("inf")), (2, 2)), ValueError,
     r"rollout has 25 non-finite value\(s\) \(inf\)"),
    ("NaN in position embeddings", lambda: position_embedding_similarity(
        torch.full((4, 8), float("nan")), (2, 2)), ValueError,
     r"pos_embed has 32 non-finite value\(s\)"),
    ("NaN in patch filters", lambda: patch_embedding_components(
        torch.full((6, 1, 2, 2), float("nan")), 2), ValueError,
     r"weight has 24 non-finite value\(s\)"),
]  # fmt: skip


@pytest.mark.parametrize("case", ANALYSIS, ids=ids(ANALYSIS))
def test_analysis(case):
    check(case)


def test_half_precision_weights_pass_the_row_sum_check():
    rollout = attention_rollout([GOOD.half().float(), GOOD.bfloat16().float()])
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 5))


def plot_value(value):
    from matplotlib.figure import Figure

    return Figure()


VIT = VisionTransformer(ViTConfig(**{**SMALL, "depth": 2})).eval()
IMAGE = torch.rand(3, 8, 8)

WIDGETS = [
    ("layer out of range", lambda: attention_explorer(VIT, IMAGE, layers=[99]), ValueError,
     r"layers offers 99, but there are 2 layers: use indices 0 \.\. 1"),
    ("negative head", lambda: attention_explorer(VIT, IMAGE, heads=[-1]), ValueError,
     r"heads offers -1, but there are 3 heads: use indices 0 \.\. 2"),
    ("query off the grid", lambda: attention_explorer(VIT, IMAGE, queries=[1000]), ValueError,
     r"query patch 1000 is not on the 2x2 grid; use 0 \.\. 3"),
    ("layers as a string", lambda: attention_explorer(VIT, IMAGE, layers="0"), TypeError,
     r"layers='0' must be a list of indices"),
    ("position out of range", lambda: sincos_explorer(positions=[1000]), ValueError,
     r"positions offers 1000, but there are 64 positions: use indices 0 \.\. 63"),
    ("channel out of range", lambda: sincos_explorer(dimensions=[64]), ValueError,
     r"dimensions offers 64, but there are 64 channels"),
    ("base of 1", lambda: sincos_explorer(bases=[1]), ValueError,
     r"base=1 must be a finite number > 1"),
    ("learned table with the wrong row count", lambda: position_similarity_explorer(
        (3, 4), 16, learned=torch.zeros(13, 16)), ValueError,
     r"learned has shape \(13, 16\), but grid_size=\(3, 4\) and dim=16 need \(12, 16\)"),
    ("num_shown zero", lambda: patch_explorer(torch.rand(3, 16, 16), num_shown=0), ValueError,
     r"num_shown=0 must be a positive integer"),
    ("endless values", lambda: explore(plot_value, value=itertools.count()), ValueError,
     rf"value has more than MAX_FRAMES={MAX_FRAMES} values, or no end"),
    ("endless layers", lambda: attention_explorer(VIT, IMAGE, layers=itertools.repeat(0)),
     ValueError, r"layer has repeated values"),
    ("endless queries", lambda: attention_explorer(VIT, IMAGE, queries=itertools.count()),
     ValueError, r"query patch 4 is not on the 2x2 grid"),
    ("equal values", lambda: explore(plot_value, value=[1, 1.0]), ValueError,
     r"value has repeated values \['1', '1'\]; list each value once"),
    ("values that print alike even with repr", lambda: explore(
        plot_value, value=[Same(1), Same(2)]), ValueError,
     r"value has different values that print alike as \['same'\]; pass a dict \{label: value\}"),
]  # fmt: skip


class Same:
    """Distinct objects with one printed form."""

    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return "same"


@pytest.mark.parametrize("case", WIDGETS, ids=ids(WIDGETS))
def test_widgets(case):
    check(case)


def test_explore_reads_at_most_max_frames_plus_one_values():
    read = []

    def counting():
        for n in itertools.count():
            read.append(n)
            yield n

    with pytest.raises(ValueError, match="more than MAX_FRAMES"):
        explore(plot_value, value=counting())
    assert len(read) == MAX_FRAMES + 1


def test_distinct_values_that_print_alike_get_distinguishable_labels():
    values = [0.1, 0.1 + 1e-9, np.float64(0.3)]
    explorer = explore(plot_value, value=values)
    labels = [label for label, _ in explorer.params[0].options]
    assert len(set(labels)) == 3 and labels[:2] == ["0.1", "0.100000001"]
    assert [value for _, value in explorer.params[0].options] == values
    mixed = explore(plot_value, value=["1", 1])
    assert [label for label, _ in mixed.params[0].options] == ["'1'", "1"]
