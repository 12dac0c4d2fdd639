"""Tests for vitbook.studies.numerics: the tolerance rule of the book's checks on live
computations."""

from __future__ import annotations

import pytest
import torch

from vitbook.studies.numerics import UNIT_ROUNDOFF, compare_logits, tolerance


def test_unit_roundoff_is_half_of_finfo_eps():
    for name, dtype in {"fp32": torch.float32, "fp16": torch.float16,
                        "bf16": torch.bfloat16}.items():  # fmt: skip
        assert UNIT_ROUNDOFF[name] == torch.finfo(dtype).eps / 2


def test_rounding_once_stays_within_one_unit_times_the_scale():
    values = torch.randn(4096, generator=torch.Generator().manual_seed(1)) * 3
    for name, dtype in {"bf16": torch.bfloat16, "fp16": torch.float16}.items():
        error = (values.to(dtype).float() - values).abs() / values.abs()
        assert error.max() <= UNIT_ROUNDOFF[name]


def test_compare_logits_accepts_rounding_and_refuses_a_wrong_answer():
    reference = torch.randn(16, 10, generator=torch.Generator().manual_seed(0))
    agreement = compare_logits(reference, reference.bfloat16().float(), "bf16")
    assert agreement.holds and agreement.units <= 1.0 and agreement.decided > 0
    wrong = reference.clone()
    wrong[0] = wrong[0].flip(0)  # another answer for one image
    assert not compare_logits(reference, wrong, "bf16").holds
    assert not compare_logits(reference, reference + 0.1 * reference.abs().max(), "bf16").holds


def test_a_near_tie_is_not_held_against_the_low_precision_result():
    reference = torch.tensor([[1.0, 1.0 + 2**-12, -3.0], [2.0, 0.0, -1.0]])
    swapped = reference.clone()
    swapped[0] = reference[0, [1, 0, 2]]  # the tied pair swapped: another argmax on row 0
    agreement = compare_logits(reference, swapped, "bf16")
    assert agreement.decided == 1 and agreement.same_class and agreement.holds


def test_the_bf16_forward_pass_of_a_vit_holds_on_this_cpu():
    from vitbook import VisionTransformer, ViTConfig

    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(img_size=16, patch_size=4, num_classes=10, embed_dim=64,
                                        depth=3, num_heads=4)).eval()  # fmt: skip
    images = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(images)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(images).float()
    agreement = compare_logits(full, half, "bf16")
    assert agreement.holds, agreement


def test_bad_inputs_say_what_to_pass():
    with pytest.raises(ValueError, match=r"precision='fp8' is not one of"):
        tolerance("fp8", 1.0)
    with pytest.raises(ValueError, match="units=0 must be a positive"):
        tolerance("bf16", 1.0, units=0)
    with pytest.raises(ValueError, match=r"shape \(B, n_cls\), got \(2, 3\) and \(3, 2\)"):
        compare_logits(torch.zeros(2, 3), torch.zeros(3, 2), "bf16")


def test_a_scale_that_is_not_a_size_is_refused():
    for scale in (-2.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=rf"scale={scale!r} must be a finite number >= 0; "
                           r"pass the size of the values"):  # fmt: skip
            tolerance("bf16", scale)
    with pytest.raises(TypeError, match=r"scale must be a number, got '2\.0'"):
        tolerance("bf16", "2.0")
    assert tolerance("bf16", 0) == 0.0  # all-zero values: no room at all


def test_a_reference_that_is_not_finite_is_refused_not_held():
    reference = torch.tensor([[1.0, -0.5, 0.25], [0.5, float("inf"), 0.0]])
    result = torch.tensor([[1.0, -0.5, 0.25], [0.5, 3.0, 0.0]])  # finite: the gap is inf
    with pytest.raises(ValueError, match=r"reference holds inf or NaN \(row 1\); the fp32 logits "
                       r"must be finite.*compute them again"):  # fmt: skip
        compare_logits(reference, result, "bf16")
    reference[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"reference holds inf or NaN \(row 1\)"):
        compare_logits(reference, result, "bf16")
    overflowed = compare_logits(result, reference, "bf16")  # the low precision overflowed
    assert not overflowed.holds
