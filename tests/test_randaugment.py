"""vitbook.data.randaugment: timm's scale (DeiT's rand-m9-mstd0.5-inc1) drawn per image, timm's two
extra ops against PIL, and the torchvision scale left as it was."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from vitbook.data.image_ops import ALL_OPS, OPS, apply_ops
from vitbook.data.randaugment import rand_augment, timm_magnitudes, trivial_augment_wide

B, C, H, W = 6, 3, 11, 14


def seeded(seed=0):
    return torch.Generator().manual_seed(seed)


# timm/data/auto_augment.py, the _RAND_INCREASING_TRANSFORMS' LEVEL_TO_ARG, written out again in
# apply_ops's units (sign: _randomly_negate's draw, +1 or -1)
def timm_argument(op, m, sign, h, w):
    level = m / 10
    enhance = max(0.1, 1.0 + sign * level * 0.9) - 1  # *Increasing: factor 1 +- 0.9 level
    return {
        "rotate": sign * level * 30.0,
        "shear_x": sign * level * 0.3,
        "shear_y": sign * level * 0.3,
        "translate_x": sign * level * 0.45 * w,  # TranslateXRel: pct * img.size[0]
        "translate_y": sign * level * 0.45 * h,
        "brightness": enhance, "color": enhance, "contrast": enhance, "sharpness": enhance,
        "posterize": 4 - int(level * 4),  # PosterizeIncreasing
        "solarize": (256 - int(level * 256)) / 255,  # SolarizeIncreasing, as a fraction
        "solarize_add": int(level * 110),
        "autocontrast": 0.0, "equalize": 0.0, "invert": 0.0,
    }[op]  # fmt: skip


def test_magnitudes_are_timms_level_to_arg():
    ops = [op for op in ALL_OPS if op != "identity"]
    assert len(ops) == 15  # timm's increasing set
    for m in np.linspace(0, 10, 41):
        for sign in (1, -1):
            index = torch.tensor([ALL_OPS.index(op) for op in ops])
            got = timm_magnitudes(
                index, torch.full((15,), float(m)), torch.full((15,), sign < 0), H, W
            )
            expected = torch.tensor([timm_argument(op, float(m), sign, H, W) for op in ops])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-6, msg=f"m={m}")


def test_deit_policy_rotates_up_to_27_degrees_at_m9_and_torchvision_bin_9_is_m3():
    rotate = torch.tensor([ALL_OPS.index("rotate")])
    m9 = timm_magnitudes(rotate, torch.tensor([9.0]), torch.tensor([False]), H, W)
    m3 = timm_magnitudes(rotate, torch.tensor([3.0]), torch.tensor([False]), H, W)
    assert m9.item() == pytest.approx(27.0) and m3.item() == pytest.approx(9.0)  # 30 * 9 / 30


def test_timm_policy_is_num_ops_rounds_of_apply_ops_with_its_draws():
    images = torch.rand(64, C, H, W, generator=seeded())
    out = rand_augment(2, 9, scale="timm", magnitude_std=0.5)(images, seeded(5))
    replay = seeded(5)  # the documented draws, in order
    ops = torch.randint(1, 16, (2, 64), generator=replay)
    applied = torch.rand((2, 64), generator=replay) < 0.5
    noise = torch.randn((2, 64), generator=replay)
    negative = torch.rand((2, 64), generator=replay) > 0.5
    m = (9 + 0.5 * noise).clamp(0, 10)
    values = timm_magnitudes(ops, m, negative, H, W)
    ops = torch.where(applied, ops, 0)
    expected = apply_ops(apply_ops(images, ops[0], values[0]), ops[1], values[1])
    assert torch.equal(out, expected)
    assert 0.35 < applied.float().mean() < 0.65 and m.max() <= 10 and (m != 9).all()


def test_timm_policy_applies_about_half_of_its_ops():
    """One op per image at m = 10 on noise: an applied op changes the image, identity not."""
    images = torch.rand(2000, 3, 8, 8, generator=seeded())
    out = rand_augment(1, 10, scale="timm")(images, seeded(2))
    changed = (out != images).flatten(1).any(1).float().mean().item()
    assert 0.45 < changed < 0.55  # binomial(2000, 1/2): sd 0.011; at m10 an op changes noise


def to_pil(image):
    array = (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(array)


def solarize_add(image, add, thresh=128):
    """timm's solarize_add, as written there: a lut adding ``add`` below ``thresh``."""
    lut = [min(255, i + add) if i < thresh else i for i in range(256)]
    return image.point(lut * 3)


@pytest.mark.parametrize("op, m", [("invert", 0.0), ("solarize_add", 99.0), ("solarize_add", 33.0)])
def test_timms_extra_ops_match_pil_on_the_0_255_grid(op, m):
    image = (torch.randint(0, 256, (3, 9, 10), generator=seeded()) / 255).float()
    ours = apply_ops(image[None], torch.tensor([ALL_OPS.index(op)]), torch.tensor([m]))[0]
    pil = to_pil(image)
    theirs = Image.eval(pil, lambda v: 255 - v) if op == "invert" else solarize_add(pil, int(m))
    theirs = torch.from_numpy(np.asarray(theirs, dtype=np.float64)).permute(2, 0, 1)
    assert (ours.double() * 255 - theirs).abs().max() < 1e-4


def test_the_torchvision_scale_is_the_default_and_unchanged():
    images = torch.rand(B, C, H, W, generator=seeded())
    default = rand_augment()(images, seeded(1))
    named = rand_augment(2, 9, 31, scale="torchvision", magnitude_std=0.0)(images, seeded(1))
    assert torch.equal(default, named)
    assert len(OPS) == 14 and ALL_OPS[:14] == OPS


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"scale": "deit"}, ValueError, r"scale='deit' is not supported"),
        ({"scale": "timm", "magnitude": 11}, ValueError, r"magnitude=11 must be a finite number"),
        ({"scale": "timm", "num_magnitude_bins": 11}, ValueError, r"leave num_magnitude_bins"),
        ({"magnitude_std": 0.5}, ValueError, r"magnitude_std=0.5 is timm's magnitude noise"),
        ({"scale": "timm", "magnitude_std": -1.0}, ValueError, r"magnitude_std=-1.0"),
        ({"magnitude": 9.5}, TypeError, r"magnitude must be an int"),
    ],
)
def test_settings_of_one_scale_are_refused_on_the_other(kwargs, error, match):
    with pytest.raises(error, match=match):
        rand_augment(**kwargs)


def test_a_fractional_timm_magnitude_is_accepted():
    out = rand_augment(2, 9.5, scale="timm")(torch.rand(4, 3, 8, 8), seeded())
    assert out.shape == (4, 3, 8, 8) and math.isfinite(out.sum().item())


@pytest.mark.parametrize(
    ("policy", "scaled", "low_high"),
    [
        (lambda: rand_augment(2, 9), lambda x: x * 255, r"from 0\.\d+ to 25\d\.\d+"),
        (lambda: rand_augment(2, 9, scale="timm", magnitude_std=0.5), lambda x: (x - 0.5) / 0.25,
         r"from -1\.\d+ to 1\.\d+"),
        (lambda: trivial_augment_wide(), lambda x: x * 255, r"from 0\.\d+ to 25\d\.\d+"),
    ],
)  # fmt: skip
def test_images_outside_unit_range_are_refused_where_their_values_are_on_the_host(
    policy, scaled, low_high
):
    """0-255 floats or normalised images would be posterized, solarized and equalized as
    nonsense. On the CPU reading them costs no sync, so the call refuses them; a GPU batch is not
    read (test_augment's fake-tensor test: no value read for any batch), fit checks it once."""
    images = torch.rand(B, C, H, W, generator=seeded())
    with pytest.raises(ValueError, match=rf"images range {low_high}.*work on images in \[0, 1\].*"
                       r"divide 8-bit images by 255"):  # fmt: skip
        policy()(scaled(images), seeded())
    edges = images.clone()
    edges[0, 0, 0, :2] = torch.tensor([0.0, 1.0])  # both ends of [0, 1] are images too
    assert policy()(edges, seeded()).shape == images.shape
    assert policy()(images[:0], seeded()).shape == (0, C, H, W)  # an empty batch has no range
    with pytest.raises(ValueError, match=r"images hold NaN; .*find where the NaN came from"):
        policy()(torch.where(images > 0.5, math.nan, images), seeded())


def test_an_op_index_outside_all_ops_is_refused():
    images = torch.rand(3, C, H, W, generator=seeded())
    for ops, named in (([0, 99, 5], r"\[99\]"), ([-1, 3, 16], r"\[-1, 16\]")):
        with pytest.raises(ValueError, match=rf"ops holds {named}, which name no op: ALL_OPS has "
                           r"16 \(indices 0 \.\. 15\); pick them with OPS\.index"):  # fmt: skip
            apply_ops(images, torch.tensor(ops), torch.zeros(3))
    with pytest.raises(TypeError, match="integer indices into ALL_OPS, got dtype torch.bool"):
        apply_ops(images, torch.tensor([True, False, True]), torch.zeros(3))
    last = apply_ops(images, torch.tensor([0, 15, 15]), torch.zeros(3))  # solarize_add, the last
    assert torch.equal(last[0], images[0]) and last.shape == images.shape


def test_posterize_bits_outside_0_to_8_are_refused():
    images = torch.rand(3, 3, 4, 5)
    ops = torch.tensor([OPS.index("posterize"), OPS.index("rotate"), OPS.index("posterize")])
    for bits in (-5.0, 9.0, math.nan):
        with pytest.raises(ValueError, match=r"magnitudes hold \[.*\] for posterize, which keeps "
                                             r"0 \.\. 8 bits"):  # fmt: skip
            apply_ops(images, ops, torch.tensor([8.0, -30.0, bits]))
    kept = apply_ops(images, ops, torch.tensor([8.0, -30.0, 0.0]))  # a rotation's sign is fine
    assert torch.equal(kept[0], images[0]) and not kept[2].any()  # 8 keeps all, 0 none
