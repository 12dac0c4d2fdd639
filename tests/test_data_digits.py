"""vitbook.data.load_digits_split: the fixed, stratified split of scikit-learn's digits.

75/25 into training and test images; with ``validation=True`` a stratified fifth of the training
images is set aside for validation and the test images stay the same.
"""

import pytest
import torch
from sklearn.datasets import load_digits

from vitbook.data import load_digits_split


def rows(images: torch.Tensor) -> list[tuple[float, ...]]:
    """Each image as a tuple of its 64 pixels, sorted: the multiset of images of a part."""
    return sorted(map(tuple, images.reshape(-1, 64).tolist()))


def test_shapes_types_and_range():
    x_train, y_train, x_test, y_test = load_digits_split()
    assert x_train.shape == (1347, 1, 8, 8) and x_test.shape == (450, 1, 8, 8)
    assert y_train.shape == (1347,) and y_test.shape == (450,)
    assert x_train.dtype == x_test.dtype == torch.float32
    assert y_train.dtype == y_test.dtype == torch.int64
    for images in (x_train, x_test):
        assert images.min() == 0.0 and images.max() == 1.0


def test_split_is_fixed_stratified_and_covers_every_digit_once():
    first, second = load_digits_split(), load_digits_split()
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    x_train, y_train, x_test, y_test = first
    # stratified: each class is 25 % of its digits in the test set, to within one image
    for digit in range(10):
        total = (y_train == digit).sum() + (y_test == digit).sum()
        assert abs((y_test == digit).sum().item() - 0.25 * total.item()) <= 1
    # the two parts together are exactly scikit-learn's digits, scaled by 1/16
    digits = load_digits()
    ours = torch.cat([x_train, x_test]) * 16
    theirs = torch.from_numpy(digits.data).float()
    assert rows(ours) == rows(theirs)
    assert torch.cat([y_train, y_test]).bincount().tolist() == list(
        torch.from_numpy(digits.target).bincount()
    )


def test_validation_part_is_carved_out_of_the_training_part_only():
    x_all, y_all, x_test, y_test = load_digits_split()
    x_train, y_train, x_val, y_val, x_test2, y_test2 = load_digits_split(validation=True)
    assert (len(x_train), len(x_val), len(x_test2)) == (1077, 270, 450)
    assert x_val.shape == (270, 1, 8, 8) and y_val.shape == (270,)
    assert x_val.dtype == torch.float32 and y_val.dtype == torch.int64
    # the test part is the same, image for image and in the same order
    assert torch.equal(x_test2, x_test) and torch.equal(y_test2, y_test)

    # training and validation together are the 1,347 training images with their labels,
    # each exactly once
    def labelled(images, labels):
        return sorted(
            zip(map(tuple, images.reshape(-1, 64).tolist()), labels.tolist(), strict=True)
        )

    assert labelled(torch.cat([x_train, x_val]), torch.cat([y_train, y_val])) == labelled(
        x_all, y_all
    )
    # stratified: each class gives a fifth of its training images to validation, within one
    for digit in range(10):
        total = (y_all == digit).sum().item()
        assert abs((y_val == digit).sum().item() - 0.2 * total) <= 1, digit
    # fixed: the same six tensors on every call
    again = load_digits_split(validation=True)
    parts = (x_train, y_train, x_val, y_val, x_test2, y_test2)
    assert all(torch.equal(a, b) for a, b in zip(again, parts, strict=True))


def test_validation_must_be_a_bool():
    with pytest.raises(TypeError, match="validation must be True or False, got 'yes'"):
        load_digits_split(validation="yes")
    with pytest.raises(TypeError):
        load_digits_split(True)  # keyword-only, so that a call reads as what it returns
