"""vitbook.data.augment: per-sample draws, parity with PIL op by op, mixing proportions, no host
sync."""

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageEnhance, ImageOps
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode

from vitbook.data import sample_image
from vitbook.data.augment import (
    OPS,
    apply_ops,
    compose,
    mixup_cutmix,
    rand_augment,
    random_crop_flip,
    random_erasing,
    random_resized_crop,
    trivial_augment_wide,
)
from vitbook.data.randaugment import torchvision_magnitudes
from vitbook.train import random_shift

B, C, H, W = 5, 3, 7, 9  # all different, so a swapped axis fails loudly


def seeded(seed=0):
    return torch.Generator().manual_seed(seed)


def augmentations():
    return {
        "crop_flip": random_crop_flip(2),
        "rand_augment": rand_augment(2, 9),
        "trivial_augment_wide": trivial_augment_wide(),
        "composed": compose(random_crop_flip(2), rand_augment(2, 9)),
        "resized_crop": random_resized_crop(flip=True),
        "rand_augment_timm": rand_augment(2, 9, scale="timm", magnitude_std=0.5),
    }


# --- shapes, dtypes, seeds, per-sample draws ---------------------------------------------------


@pytest.mark.parametrize("name", list(augmentations()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("channels", [1, 3])
def test_shape_and_dtype_are_kept(name, dtype, channels):
    images = torch.rand(B, channels, H, W, generator=seeded()).to(dtype)
    out = augmentations()[name](images, seeded(1))
    assert out.shape == images.shape and out.dtype == dtype and out is not images
    assert 0 <= out.float().min() and out.float().max() <= 1


@pytest.mark.parametrize("name", list(augmentations()))
def test_same_seed_same_batch_other_seed_other_batch(name):
    images = torch.rand(16, 3, 12, 12, generator=seeded())
    augment = augmentations()[name]
    first, again = augment(images, seeded(3)), augment(images, seeded(3))
    other = augment(images, seeded(4))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("name", list(augmentations()))
def test_images_of_one_batch_get_their_own_draws(name):
    # 64 copies of one photo: a per-batch draw would give 64 equal outputs
    photo = photos()["photo"][:, :16, :16]
    out = augmentations()[name](photo[None].expand(64, -1, -1, -1).clone(), seeded(0))
    distinct = torch.unique(out.flatten(1), dim=0).shape[0]
    assert distinct >= 16, f"only {distinct} distinct outputs among 64 copies"


# --- crop and flip -----------------------------------------------------------------------------


def test_crop_and_flip_equal_hand_cropped_padded_images():
    p, b = 2, 300  # 300 draws cover all 25 offsets and both flips
    images = torch.rand(b, 3, H, W, generator=seeded())
    out = random_crop_flip(p, flip=True)(images, seeded(7))
    replay = seeded(7)  # the same draws, in the documented order
    offsets = torch.randint(0, 2 * p + 1, (b, 2), generator=replay)
    mirrored = torch.rand(b, generator=replay) < 0.5
    assert len(set(map(tuple, offsets.tolist()))) == (2 * p + 1) ** 2 and 0 < mirrored.sum() < b
    padded = torch.zeros(b, 3, H + 2 * p, W + 2 * p)
    padded[:, :, p:-p, p:-p] = images
    for k in range(b):
        dy, dx = offsets[k].tolist()
        crop = padded[k, :, dy : dy + H, dx : dx + W]
        assert torch.equal(out[k], crop.flip(-1) if mirrored[k] else crop)


def test_flip_alone_mirrors_about_half_of_the_images():
    images = torch.rand(400, 1, 4, 6, generator=seeded())
    out = random_crop_flip(padding=0, flip=True)(images, seeded(1))
    same = (out == images).flatten(1).all(1)
    mirrored = (out == images.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all())
    assert 160 < int(mirrored.sum()) < 240  # binomial(400, 1/2): mean 200, sd 10


def test_without_flip_it_is_random_shift_bit_for_bit():
    images = torch.rand(B, 1, 8, 8, generator=seeded())
    for m, seed in [(0, 0), (1, 1), (2, 2), (3, 5)]:
        ours, theirs = seeded(seed), seeded(seed)
        a = random_crop_flip(m, flip=False)(images, ours)
        b = random_shift(m)(images, theirs)
        assert torch.equal(a, b)
        assert torch.equal(ours.get_state(), theirs.get_state())  # the same draws were used


# --- RandAugment and TrivialAugmentWide --------------------------------------------------------


TORCHVISION_SPACE = {  # torchvision 0.28 transforms/v2/_auto_augment.py, written out again
    False: {
        "shear": lambda n, h, w: torch.linspace(0.0, 0.3, n),
        "translate_x": lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * w, n),
        "translate_y": lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * h, n),
        "rotate": lambda n, h, w: torch.linspace(0.0, 30.0, n),
        "enhance": lambda n, h, w: torch.linspace(0.0, 0.9, n),
        "posterize": lambda n, h, w: (8 - (torch.arange(n) / ((n - 1) / 4))).round().int(),
    },
    True: {
        "shear": lambda n, h, w: torch.linspace(0.0, 0.99, n),
        "translate_x": lambda n, h, w: torch.linspace(0.0, 32.0, n),
        "translate_y": lambda n, h, w: torch.linspace(0.0, 32.0, n),
        "rotate": lambda n, h, w: torch.linspace(0.0, 135.0, n),
        "enhance": lambda n, h, w: torch.linspace(0.0, 0.99, n),
        "posterize": lambda n, h, w: (8 - (torch.arange(n) / ((n - 1) / 6))).round().int(),
    },
}


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("bins", [2, 11, 31])
def test_magnitude_bins_are_torchvisions(wide, bins):
    space = TORCHVISION_SPACE[wide]
    table = torchvision_magnitudes(wide, bins, H, W, torch.device("cpu"))
    expected = {
        "identity": torch.zeros(bins),
        "shear_x": space["shear"](bins, H, W),
        "shear_y": space["shear"](bins, H, W),
        "translate_x": space["translate_x"](bins, H, W),
        "translate_y": space["translate_y"](bins, H, W),
        "rotate": space["rotate"](bins, H, W),
        "posterize": space["posterize"](bins, H, W).float(),
        "solarize": torch.linspace(1.0, 0.0, bins),
        "autocontrast": torch.zeros(bins),
        "equalize": torch.zeros(bins),
    }
    for op in ("brightness", "color", "contrast", "sharpness"):
        expected[op] = space["enhance"](bins, H, W)
    assert set(expected) == set(OPS)
    for k, op in enumerate(OPS):
        assert torch.equal(table[k], expected[op]), op


def test_rand_augment_is_num_ops_rounds_of_apply_ops_with_its_draws():
    images = torch.rand(32, 3, H, W, generator=seeded())
    out = rand_augment(num_ops=2, magnitude=9)(images, seeded(11))
    replay = seeded(11)  # the same draws, in the same order
    ops = torch.randint(0, len(OPS), (2, 32), generator=replay)
    negative = torch.rand((2, 32), generator=replay) <= 0.5
    values = torchvision_magnitudes(False, 31, H, W, torch.device("cpu"))[ops, 9]
    signed = (ops >= OPS.index("shear_x")) & (ops <= OPS.index("sharpness"))
    values = torch.where(negative & signed, -values, values)
    expected = apply_ops(apply_ops(images, ops[0], values[0]), ops[1], values[1])
    assert torch.equal(out, expected)
    assert len(set(ops.flatten().tolist())) == len(OPS)  # every op was drawn somewhere


def to_pil(image):
    """(C, H, W) floats on the 0..255 grid -> a PIL image ('L' or 'RGB')."""
    array = (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)


def from_pil(image):
    array = np.asarray(image, dtype=np.float64)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def pil_reference(image, op, m):
    """The op as PIL does it, the reference of AutoAugment and RandAugment, at magnitude m."""
    nearest, affine = Image.Resampling.NEAREST, Image.Transform.AFFINE
    geometric = pil_matrix(op, m, *image.size[::-1])
    if op == "rotate":
        return image.rotate(m, nearest)
    if geometric is not None:
        return image.transform(image.size, affine, geometric, nearest)
    enhance = {"brightness": ImageEnhance.Brightness, "color": ImageEnhance.Color}
    enhance |= {"contrast": ImageEnhance.Contrast, "sharpness": ImageEnhance.Sharpness}
    if op in enhance:
        return enhance[op](image).enhance(1 + m)
    return {
        "identity": lambda: image,
        "posterize": lambda: ImageOps.posterize(image, int(m)),
        "solarize": lambda: ImageOps.solarize(image, m * 255),
        "autocontrast": lambda: ImageOps.autocontrast(image),
        "equalize": lambda: ImageOps.equalize(image),
    }[op]()


def pil_matrix(op, m, h, w):
    """PIL's inverse affine matrix (output pixel -> input point), with torchvision's signs."""
    if op == "rotate":  # as PIL's Image.rotate builds it, about (w/2, h/2)
        a = -math.radians(m)
        matrix = [math.cos(a), math.sin(a), 0.0, -math.sin(a), math.cos(a), 0.0]
        matrix[2] = matrix[0] * -w / 2 + matrix[1] * -h / 2 + w / 2
        matrix[5] = matrix[3] * -w / 2 + matrix[4] * -h / 2 + h / 2
        return tuple(matrix)
    return {
        "shear_x": (1, m, 0, 0, 1, 0),
        "shear_y": (1, 0, 0, m, 1, 0),
        "translate_x": (1, 0, -int(m), 0, 1, 0),
        "translate_y": (1, 0, 0, 0, 1, -int(m)),
    }.get(op)


def ties(op, m, h, w):
    """(H, W) True where a pixel's source point lies on a pixel edge (nearest is a coin toss)."""
    a, b, c, d, e, f = pil_matrix(op, m, h, w)
    y, x = np.mgrid[0:h, 0:w] + 0.5
    on_edge = lambda v: np.abs(v - np.round(v)) < 1e-6  # noqa: E731
    return on_edge(a * x + b * y + c) | on_edge(d * x + e * y + f)


@functools.cache
def photos():
    grey = sample_image("flower", size=(H * 4, W * 4)).mean(0, keepdim=True)
    grey = (grey * 255).round() / 255  # back on the 0..255 grid
    noise = torch.randint(0, 256, (3, 33, 35), generator=seeded()) / 255
    return {"photo": sample_image("china", size=(37, 45)), "grey": grey, "noise": noise}


RA = {  # RandAugment's magnitude 9 of 31 (translate for 37 x 45), and wider ones
    "identity": [0.0], "shear_x": [0.09, -0.09, 0.99, -0.2], "shear_y": [0.09, -0.09, -0.99, 0.2],
    "translate_x": [4.35, -4.35, 32.0], "translate_y": [5.0, -5.0, -32.0],
    "rotate": [9.0, -9.0, 30.0, -135.0], "brightness": [0.27, -0.27, 0.99, -0.99],
    "color": [0.27, -0.27, 0.99, -0.99], "contrast": [0.27, -0.27, 0.99, -0.99],
    "sharpness": [0.27, -0.27, 0.99, -0.99], "posterize": [7.0, 6.0, 4.0, 2.0, 8.0],
    "solarize": [0.7, 0.3, 1.0], "autocontrast": [0.0], "equalize": [0.0],
}  # fmt: skip


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("image_name", ["photo", "grey", "noise"])
def test_each_op_matches_pil_on_the_0_255_grid(op, image_name):
    image = photos()[image_name]
    _, h, w = image.shape
    for m in RA[op]:
        ours = apply_ops(image[None], torch.tensor([OPS.index(op)]), torch.tensor([m]))[0]
        diff = ours.double().numpy() * 255 - from_pil(pil_reference(to_pil(image), op, m))
        where = f"{op} at {m} on {image_name}"
        if op in ("brightness", "color", "contrast", "sharpness"):
            # PIL truncates its blend to an integer (0 to 1 level low), rounds its degenerate
            # image (grey, mean, blur) to integers (0.5 level times |1 - factor| = |m|), and
            # weighs red 0.299 where torchvision weighs 0.2989 (0.03 level times |m|).
            assert -0.53 * abs(m) <= diff.min() and diff.max() <= 1 + 0.53 * abs(m), where
        elif op == "autocontrast":
            # ours is the exact floor of (x - lo) 255 / (hi - lo); PIL's float arithmetic lands
            # one level low at some points where that value is an integer
            level = (image[:, None] * 255).round().long()  # (C, 1, H, W)
            low = level.amin((-2, -1), keepdim=True)
            span = level.amax((-2, -1), keepdim=True) - low
            exact_integer = ((level - low) * 255 % span.clamp(min=1) == 0)[:, 0].numpy()
            assert set(np.unique(diff.round(3))) <= {0.0, 1.0}, where
            assert np.all((np.abs(diff) < 1e-3) | exact_integer), where
        elif op in ("shear_x", "shear_y", "rotate", "translate_x", "translate_y"):
            differ = np.any(np.abs(diff) > 1e-3, axis=0)
            tied = ties(op, m, h, w)
            assert np.all(~differ | tied), f"{where}: pixels differ away from ties"
            if abs(m) in (0.09, 9.0, 4.35, 5.0):  # RandAugment's default has no ties here
                assert not tied.any() and not differ.any(), where
        else:  # identity, posterize, solarize, equalize: exact on the grid
            assert np.abs(diff).max() < 1e-4, where


def test_geometric_ops_with_ties_differ_from_pil_only_at_ties_and_rarely():
    image = photos()["photo"]
    ours = apply_ops(image[None], torch.tensor([OPS.index("rotate")]), torch.tensor([30.0]))[0]
    diff = ours.numpy() * 255 - from_pil(pil_reference(to_pil(image), "rotate", 30.0))
    differ = np.any(np.abs(diff) > 1e-4, axis=0)
    assert 0 < differ.mean() < 0.05 and ties("rotate", 30.0, 37, 45).mean() < 0.2


def test_bfloat16_images_give_the_float32_result_rounded():
    images = torch.rand(B, C, H, W, generator=seeded()).bfloat16()
    ops = torch.arange(B) + 8  # contrast .. autocontrast: values that bfloat16 rounds
    values = torch.tensor([0.27, -0.27, 7.0, 0.7, 0.0])
    out = apply_ops(images, ops, values)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, apply_ops(images.float(), ops, values).bfloat16())


TORCHVISION_NAMES = {  # transforms.v2 RandAugment's op names, in its order, and ours
    "Identity": "identity", "ShearX": "shear_x", "ShearY": "shear_y",
    "TranslateX": "translate_x", "TranslateY": "translate_y", "Rotate": "rotate",
    "Brightness": "brightness", "Color": "color", "Contrast": "contrast",
    "Sharpness": "sharpness", "Posterize": "posterize", "Solarize": "solarize",
    "AutoContrast": "autocontrast", "Equalize": "equalize",
}  # fmt: skip


def torchvision_v2():
    """torchvision's transforms.v2, or a skip where it cannot be imported."""
    try:
        from torchvision.transforms import v2
    except Exception as err:  # not installed, or a wheel built for another torch
        pytest.skip(f"torchvision cannot be imported here ({type(err).__name__}: {err})")
    return v2


@pytest.mark.parametrize("wide", [False, True])
def test_each_op_matches_torchvision_at_every_magnitude(wide):
    v2 = torchvision_v2()
    policy = v2.TrivialAugmentWide() if wide else v2.RandAugment()
    assert tuple(TORCHVISION_NAMES) == tuple(policy._AUGMENTATION_SPACE)
    assert tuple(TORCHVISION_NAMES.values()) == OPS
    image = photos()["photo"]
    _, h, w = image.shape
    table = torchvision_magnitudes(wide, 31, h, w, torch.device("cpu"))
    for k, (name, op) in enumerate(TORCHVISION_NAMES.items()):
        signs = (1, -1) if OPS.index("shear_x") <= k <= OPS.index("sharpness") else (1,)
        for m in [float(v) * sign for v in table[k] for sign in signs]:
            ours = apply_ops(image[None], torch.tensor([k]), torch.tensor([m]))[0]
            on_grid = op in ("posterize", "autocontrast")  # compared with the uint8 path
            given = (image * 255).round().to(torch.uint8) if on_grid else image
            theirs = policy._apply_image_or_video_transform(
                given, name, m, interpolation=policy.interpolation, fill=policy._fill
            )
            diff = ((ours - (theirs / 255 if on_grid else theirs)) * 255).numpy()
            where = f"{op} at {m}"
            if op in ("shear_x", "shear_y", "rotate", "translate_x", "translate_y"):
                differ = np.any(np.abs(diff) > 1e-3, axis=0)
                assert np.all(~differ | ties(op, m, h, w)), f"{where}: differ away from ties"
            elif op == "autocontrast":  # torchvision's float32 division, like PIL's, lands one
                assert set(np.unique(diff.round(3))) <= {0.0, 1.0}, where  # level low at times
            else:  # the same formulas: float rounding only
                assert np.abs(diff).max() < 1e-3, where


# --- MixUp and CutMix --------------------------------------------------------------------------


def labelled_batch(b=6, k=10):
    """Image b is constant (b + 1) / (b + 2), so every pixel tells whose it is."""
    images = ((torch.arange(b) + 1) / (b + 2)).view(b, 1, 1, 1).expand(b, 3, 8, 12).clone()
    return images, torch.arange(b) % k


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_targets_are_soft_labels_with_the_mixing_proportions(smoothing):
    images, labels = labelled_batch()
    for seed in range(40):
        out, targets = mixup_cutmix(10, label_smoothing=smoothing)(images, labels, seeded(seed))
        assert out.shape == images.shape and targets.shape == (6, 10)
        torch.testing.assert_close(targets.sum(1), torch.ones(6))
        if bool(((out == images) | (out == images.flip(0))).all()):  # CutMix
            lam = (out == images).float().mean((1, 2, 3))  # the share of pixels kept
        else:  # MixUp: out = lam x + (1 - lam) x_flipped, solved for lam
            lam = ((out - images.flip(0)) / (images - images.flip(0))).mean((1, 2, 3))
        onehot = torch.eye(10)[labels]  # (B, K)
        mixed = lam[:, None] * onehot + (1 - lam[:, None]) * onehot.flip(0)
        expected = smoothing / 10 + (1 - smoothing) * mixed
        torch.testing.assert_close(targets, expected, atol=1e-5, rtol=0)


def test_cutmix_pastes_one_box_from_the_partner():
    images, labels = labelled_batch()
    mix = mixup_cutmix(10, mixup_alpha=0.0, cutmix_alpha=1.0)
    sizes = []
    for seed in range(30):
        out, targets = mix(images, labels, seeded(seed))
        pasted = (out != images)[0, 0]  # (H, W)
        rows, cols = pasted.any(1), pasted.any(0)
        assert torch.equal(pasted, rows[:, None] & cols[None, :])  # one rectangle
        assert bool((out[:, :, pasted] == images.flip(0)[:, :, pasted]).all())
        torch.testing.assert_close(targets[0, 0], 1 - pasted.float().mean())
        sizes.append(int(pasted.sum()))
    assert len(set(sizes)) > 10  # boxes of many sizes


def test_mixup_lambda_is_beta_and_cutmix_half_the_time():
    from scipy import stats

    images, labels = labelled_batch(b=2)
    lams, cutmix = [], 0
    for seed in range(300):
        out, targets = mixup_cutmix(10, mixup_alpha=0.8, cutmix_alpha=0.0)(
            images, labels, seeded(seed)
        )
        lams.append(float(targets[0, 0]))
        out, _ = mixup_cutmix(10)(images, labels, seeded(seed))
        cutmix += bool(((out == images) | (out == images.flip(0))).all())
    assert stats.kstest(lams, "beta", args=(0.8, 0.8)).pvalue > 0.01
    assert 110 < cutmix < 190  # binomial(300, 1/2): mean 150, sd 8.7


def test_a_label_outside_the_mix_is_refused_where_its_value_is_on_the_host():
    """Label 12 of a 10-class mix would get a zero one-hot row: targets summing to 0.25, not 1.
    On the CPU reading the labels costs no sync, so the call refuses them; a GPU batch is not
    read (the fake-tensor test below: no value read for any batch), fit checks it once."""
    images, labels = labelled_batch(b=4)
    for wrong, named in (([0, 12, 3, 1], r"\[12\]"), ([-1, 2, 10, 3], r"\[-1, 10\]")):
        with pytest.raises(ValueError, match=rf"labels hold {named}, outside the mix's classes "
                           r"0 \.\. 9; build it with n_cls above every label"):  # fmt: skip
            mixup_cutmix(10)(images, torch.tensor(wrong), seeded())
    _, targets = mixup_cutmix(10)(images, torch.tensor([9, 0, 9, 0]), seeded())  # both ends
    torch.testing.assert_close(targets.sum(1), torch.ones(4))


def test_mix_same_seed_same_batch_and_bfloat16_kept():
    images, labels = labelled_batch()
    mix = mixup_cutmix(10, label_smoothing=0.1)
    a, b = mix(images, labels, seeded(5)), mix(images, labels, seeded(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    out, targets = mix(images.bfloat16(), labels, seeded(5))
    assert out.dtype == torch.bfloat16 and targets.dtype == torch.float32


# --- no loop over the batch, no host sync ------------------------------------------------------


class OpLog(TorchDispatchMode):
    """Records every aten op that runs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def fake_ops(fn, b):
    """Run fn on a fake batch of b images (no data: a read of a value raises) and log its ops."""
    generator = seeded()
    with FakeTensorMode():
        images = torch.rand(b, 3, 32, 32)
        labels = torch.randint(0, 10, (b,))
        with OpLog() as log:
            fn(images, labels, generator)
    return log.ops


FUNCTIONS = {
    "crop_flip": lambda x, y, g: random_crop_flip(4)(x, g),
    "rand_augment": lambda x, y, g: rand_augment(2, 9)(x, g),
    "trivial_augment_wide": lambda x, y, g: trivial_augment_wide()(x, g),
    "mixup_cutmix": lambda x, y, g: mixup_cutmix(10, label_smoothing=0.1)(x, y, g),
    "resized_crop": lambda x, y, g: random_resized_crop(flip=True)(x, g),
    "random_erasing": lambda x, y, g: random_erasing()(x, g),
    "rand_augment_timm": lambda x, y, g: rand_augment(2, 9, scale="timm", magnitude_std=0.5)(x, g),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_no_host_sync_and_the_same_ops_for_any_batch_size(name):
    # Fake tensors carry shapes but no values: .item(), .tolist(), bool(tensor) and boolean-mask
    # indexing raise, as each would make a GPU wait for the host. A Python loop over the batch
    # would run more ops for more images.
    small, large = fake_ops(FUNCTIONS[name], 3), fake_ops(FUNCTIONS[name], 4096)
    assert small == large and len(small) > 3


@pytest.mark.parametrize(
    "syncs",
    [
        lambda x, y, g: x * x.mean().item(),
        lambda x, y, g: x[x > 0.5],
        lambda x, y, g: [x[k] for k in torch.randint(0, 2, (len(x),), generator=g).tolist()],
    ],
)
def test_the_fake_run_catches_host_syncs(syncs):
    with pytest.raises((DataDependentOutputException, DynamicOutputShapeException)):
        fake_ops(syncs, 4)


def test_apply_ops_compiles_without_graph_breaks():
    images = torch.rand(B, C, H, W, generator=seeded())
    ops, values = torch.arange(B) * 3, torch.tensor([0.0, 4.0, 0.27, 7.0, 0.0])
    explanation = torch._dynamo.explain(apply_ops)(images, ops, values)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_no_host_sync_on_a_gpu(name):
    generator = torch.Generator(device="cuda").manual_seed(0)
    images = torch.rand(64, 3, 32, 32, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")
    FUNCTIONS[name](images, labels, generator)  # warm-up: CUDA's lazy initialisation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = FUNCTIONS[name](images, labels, generator)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    out = out[0] if isinstance(out, tuple) else out
    assert out.device.type == "cuda" and out.shape == images.shape


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: random_crop_flip(-1), ValueError, "padding=-1 must be an int >= 0"),
        (lambda: random_crop_flip(1.5), TypeError, "padding must be an int"),
        (lambda: random_crop_flip(4, flip="yes"), TypeError, "flip must be True or False"),
        (lambda: rand_augment(num_ops=-1), ValueError, "num_ops=-1"),
        (lambda: rand_augment(magnitude=31), ValueError, "magnitude=31 must be below"),
        (lambda: rand_augment(num_magnitude_bins=1), ValueError, "num_magnitude_bins=1"),
        (lambda: trivial_augment_wide(2.0), TypeError, "num_magnitude_bins must be an int"),
        (lambda: mixup_cutmix(1), ValueError, "n_cls=1 must be an int >= 2"),
        (lambda: mixup_cutmix(10, mixup_alpha=-1.0), ValueError, "mixup_alpha=-1.0"),
        (lambda: mixup_cutmix(10, 0.0, 0.0), ValueError, "turn both mixes off"),
        (lambda: mixup_cutmix(10, switch_prob=1.5), ValueError, "switch_prob=1.5"),
        (lambda: mixup_cutmix(10, label_smoothing=1.0), ValueError, "label_smoothing=1.0"),
        (lambda: compose(random_crop_flip(), 3), TypeError, r"augments\[1\] is a int"),
    ],
)
def test_bad_arguments_are_refused_when_built(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_bad_calls_say_what_to_do():
    crop, images = random_crop_flip(), torch.rand(B, C, H, W)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        crop(images, 0)
    with pytest.raises(TypeError, match=r"images.float\(\) / 255"):
        crop((images * 255).to(torch.uint8), seeded())
    with pytest.raises(ValueError, match="unsqueeze"):
        crop(images[0], seeded())
    mix = mixup_cutmix(10)
    with pytest.raises(TypeError, match="labels must be an int64 tensor"):
        mix(images, torch.zeros(B), seeded())
    with pytest.raises(ValueError, match=r"labels must have shape \(B,\) = \(5,\)"):
        mix(images, torch.zeros(B + 1, dtype=torch.long), seeded())
    with pytest.raises(ValueError, match="C=4 channels"):
        apply_ops(torch.rand(B, 4, H, W), torch.zeros(B, dtype=torch.long), torch.zeros(B))
    with pytest.raises(ValueError, match=r"ops must be a tensor of shape \(B,\)"):
        apply_ops(images, torch.zeros(B + 1, dtype=torch.long), torch.zeros(B))
    with pytest.raises(TypeError, match="integer indices"):
        apply_ops(images, torch.zeros(B), torch.zeros(B))


# --- random resized crop -----------------------------------------------------------------------


def replay_boxes(b, h, w, scale, ratio, generator):
    """The documented draws of 10 boxes per image: (width, height) each (B, 10)."""
    u, v = torch.rand(b, 10, generator=generator), torch.rand(b, 10, generator=generator)
    target = h * w * (scale[0] + (scale[1] - scale[0]) * u)
    aspect = torch.exp(math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * v)
    return (target * aspect).sqrt().round(), (target / aspect).sqrt().round()


def test_resized_crop_is_the_first_box_that_fits_cropped_and_resized():
    b, h, w, scale, ratio = 64, 12, 15, (0.05, 1.0), (3 / 4, 4 / 3)
    images = torch.rand(b, 2, h, w, generator=seeded())
    out = random_resized_crop(scale, ratio, flip=True)(images, seeded(3))
    replay = seeded(3)
    widths, heights = replay_boxes(b, h, w, scale, ratio, replay)
    rows_u, cols_u = torch.rand(b, generator=replay), torch.rand(b, generator=replay)
    mirrored = torch.rand(b, generator=replay) < 0.5
    assert 0 < mirrored.sum() < b
    for k in range(b):
        fits = [a for a in range(10) if 0 < widths[k, a] <= w and 0 < heights[k, a] <= h]
        assert fits, "with these sizes every image finds a box"
        bw, bh = int(widths[k, fits[0]]), int(heights[k, fits[0]])
        top, left = int(rows_u[k] * (h - bh + 1)), int(cols_u[k] * (w - bw + 1))
        assert 0 <= top <= h - bh and 0 <= left <= w - bw  # inside the image
        crop = images[k : k + 1, :, top : top + bh, left : left + bw]
        expected = F.interpolate(crop, size=(h, w), mode="bilinear", align_corners=False)[0]
        expected = expected.flip(-1) if mirrored[k] else expected
        # the same bilinear weights, computed through affine_grid's normalised coordinates
        torch.testing.assert_close(out[k], expected, atol=1e-5, rtol=0)


def test_resized_crop_areas_and_ratios_stay_in_range():
    """The boxes the crop takes (its draws, replayed as the test above shows it takes them)."""
    b, h, w, scale, ratio = 4000, 32, 32, (0.05, 1.0), (3 / 4, 4 / 3)
    widths, heights = replay_boxes(b, h, w, scale, ratio, seeded(8))
    fits = (widths > 0) & (widths <= w) & (heights > 0) & (heights <= h)
    first = fits.int().argmax(1, keepdim=True)
    area = (widths.gather(1, first) * heights.gather(1, first)).squeeze(1) / (h * w)
    aspect = (widths.gather(1, first) / heights.gather(1, first)).squeeze(1)
    assert fits.any(1).all()  # a 32 x 32 image never needs the fallback here
    # sides are rounded to pixels: the area and the ratio move by at most a pixel's worth
    assert area.min() >= 0.05 * (1 - 2 / 7) and area.max() <= 1
    assert aspect.min() >= 3 / 4 * (1 - 2 / 7) and aspect.max() <= 4 / 3 * (1 + 2 / 7)
    assert (area < 0.15).float().mean() > 0.05 and (area > 0.85).float().mean() > 0.05


def test_resized_crop_falls_back_to_torchvisions_central_crop():
    images = torch.rand(3, 3, 8, 16, generator=seeded())
    # a square box of the whole area never fits a 2:1 image: torchvision's central 8 x 8 crop
    out = random_resized_crop(scale=(1.0, 1.0), ratio=(1.0, 1.0))(images, seeded(0))
    expected = F.interpolate(images[..., 4:12], size=(8, 16), mode="bilinear", align_corners=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_resized_crop_of_the_whole_image_only_flips():
    images = torch.rand(400, 1, 5, 6, generator=seeded())
    out = random_resized_crop(scale=(1.0, 1.0), ratio=(6 / 5, 6 / 5), flip=True)(images, seeded(2))
    same = torch.isclose(out, images, atol=1e-5).flatten(1).all(1)
    mirrored = torch.isclose(out, images.flip(-1), atol=1e-5).flatten(1).all(1)
    assert bool((same | mirrored).all())
    assert 160 < int(mirrored.sum()) < 240  # binomial(400, 1/2): mean 200, sd 10


# --- random erasing ----------------------------------------------------------------------------


def test_random_erasing_replays_timms_draws_with_the_batchs_statistics():
    b, c, h, w, scale, ratio = 40, 3, 9, 13, (0.02, 1 / 3), (0.3, 3.3)
    images = torch.rand(b, c, h, w, generator=seeded())
    out = random_erasing(0.5, scale, ratio)(images, seeded(4))
    replay = seeded(4)
    erased = torch.rand(b, generator=replay) < 0.5
    heights, widths = replay_boxes(b, h, w, scale, ratio, replay)  # timm: h = sqrt(a r)
    rows_u, cols_u = torch.rand(b, generator=replay), torch.rand(b, generator=replay)
    mean = images.mean((0, 2, 3), keepdim=True)[0]
    std = images.std((0, 2, 3), keepdim=True, correction=0)[0]
    noise = mean + std * torch.randn(b, c, h, w, generator=replay)
    expected = images.clone()
    for k in range(b):
        fits = [a for a in range(10) if widths[k, a] < w and heights[k, a] < h]
        if not (erased[k] and fits):
            continue
        bh, bw = int(heights[k, fits[0]]), int(widths[k, fits[0]])
        top, left = int(rows_u[k] * (h - bh + 1)), int(cols_u[k] * (w - bw + 1))
        box = (slice(None), slice(top, top + bh), slice(left, left + bw))
        expected[k][box] = noise[k][box]
    assert 5 < int(erased.sum()) < 35
    assert torch.equal(out, expected)


def test_random_erasing_boxes_are_single_rectangles_in_range():
    h, w = 20, 24
    images = torch.rand(300, 1, h, w, generator=seeded())
    out = random_erasing(p=1.0)(images, seeded(1))
    changed = (out != images)[:, 0]  # (B, H, W)
    boxes = 0
    for mask in changed:
        if not mask.any():
            continue  # no box of the 10 fitted (rare)
        rows, cols = mask.any(1), mask.any(0)
        assert torch.equal(mask, rows[:, None] & cols[None, :])  # one rectangle
        bh, bw = int(rows.sum()), int(cols.sum())
        assert bh < h and bw < w  # strictly inside, as timm's
        assert 0.02 * (1 - 0.5) <= bh * bw / (h * w) <= 1 / 3 * (1 + 0.5)  # up to rounding
        boxes += 1
    assert boxes > 280


def test_random_erasing_rate_and_noise():
    images = torch.rand(2000, 3, 6, 7, generator=seeded())
    out = random_erasing(p=0.25)(images, seeded(6))
    erased = (out != images).flatten(1).any(1)
    assert 440 < int(erased.sum()) < 560  # binomial(2000, 1/4): mean 500, sd 19.4
    noise = out[out != images]
    # uniform pixels: the batch's mean 1/2 and standard deviation 1/sqrt(12) = 0.289
    assert abs(noise.mean().item() - 0.5) < 0.01 and abs(noise.std().item() - 0.289) < 0.01
    assert torch.equal(random_erasing(p=0.0)(images, seeded(6)), images)


def test_augmentations_take_an_empty_batch():
    empty = torch.rand(0, 3, 8, 8)
    for augment in (*augmentations().values(), random_erasing(), rand_augment(scale="timm")):
        assert augment(empty, seeded()).shape == (0, 3, 8, 8)


def test_value_range_says_which_augmentations_need_unit_images():
    assert rand_augment().value_range == (0.0, 1.0) == trivial_augment_wide().value_range
    assert rand_augment(scale="timm").value_range == (0.0, 1.0)
    assert compose(random_resized_crop(), rand_augment()).value_range == (0.0, 1.0)
    for augment in (random_crop_flip(), random_resized_crop(), random_erasing()):
        assert not hasattr(augment, "value_range")
    assert not hasattr(compose(random_crop_flip(), random_erasing()), "value_range")
    assert mixup_cutmix(7).num_classes == 7


def test_apply_ops_on_images_outside_unit_range_does_not_index_out_of_bounds():
    images = torch.rand(4, 3, 5, 6, generator=seeded()) * 3 - 1  # values in [-1, 2]
    out = apply_ops(images, torch.full((4,), OPS.index("equalize")), torch.zeros(4))
    assert out.shape == images.shape and 0 <= out.min() and out.max() <= 1


def test_a_padding_that_could_leave_a_crop_of_zeros_only_is_refused_naming_the_size():
    images = torch.rand(2, 1, 8, 8)
    for padding in (100, 8):
        with pytest.raises(ValueError, match=rf"random_crop_flip\(padding={padding}\) on 8 x 8 "
                                             r"images: a crop could hold no pixel of its image.*"
                                             r"below 8 .* 1 here"):  # fmt: skip
            random_crop_flip(padding=padding)(images, torch.Generator().manual_seed(0))
    cropped = random_crop_flip(padding=7)(images, torch.Generator().manual_seed(0))
    assert cropped.shape == images.shape
    assert (cropped != 0).flatten(1).any(1).all()  # every crop keeps a pixel of its image
