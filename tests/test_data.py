"""Sample images that ship with matplotlib and scikit-learn: shapes, range, cropping."""

import pytest
import torch

from vitbook.data import SAMPLE_IMAGES, sample_image


def test_grace_hopper_is_a_float_rgb_image_in_0_1():
    image = sample_image("grace_hopper", size=None)
    assert image.shape == (3, 600, 512) and image.dtype == torch.float32
    assert image.min() >= 0 and image.max() <= 1
    assert image.std() > 0.1, "a photo, not a flat image"


@pytest.mark.parametrize("size", [(64, 96), (96, 64), (32, 32)])
def test_size_gives_the_shape(size):
    assert sample_image(size=size).shape == (3, *size)


def test_size_crops_the_centre_to_the_aspect_ratio_instead_of_stretching():
    square = sample_image(size=512)  # the 512 x 600 photo: its centred 512 x 512 square
    full = sample_image(size=None)
    offset = (600 - 512) // 2
    torch.testing.assert_close(square, full[:, offset : offset + 512], rtol=0, atol=2 / 255)


def test_int_size_is_square_and_calls_are_deterministic():
    assert torch.equal(sample_image(size=48), sample_image(size=(48, 48)))


@pytest.mark.parametrize("name", ["china", "flower"])
def test_scikit_learn_photos(name):
    image = sample_image(name, size=None)
    assert image.shape == (3, 427, 640) and 0 <= image.min() and image.max() <= 1


def test_errors_name_the_choices():
    assert SAMPLE_IMAGES == ("grace_hopper", "china", "flower")
    with pytest.raises(ValueError, match="name='lena' is not supported; choose one of"):
        sample_image("lena")
    with pytest.raises(ValueError, match="size=0 must be a positive integer"):
        sample_image(size=0)
