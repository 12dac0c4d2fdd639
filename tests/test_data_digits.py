"""vitbook.data.load_digits_split: the fixed, stratified 75/25 split of scikit-learn's digits."""

import torch
from sklearn.datasets import load_digits

from vitbook.data import load_digits_split


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
    ours = torch.cat([x_train, x_test]).reshape(-1, 64) * 16
    theirs = torch.from_numpy(digits.data).float()
    key = lambda rows: sorted(map(tuple, rows.tolist()))  # noqa: E731
    assert key(ours) == key(theirs)
    assert torch.cat([y_train, y_test]).bincount().tolist() == list(
        torch.from_numpy(digits.target).bincount()
    )
