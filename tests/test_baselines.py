"""vitbook.baselines: the training chapter's CNN."""

import pytest
import torch

from vitbook.baselines import DigitsCNN


def test_default_widths_are_the_training_chapter_cnn():
    cnn = DigitsCNN()
    # conv 1 -> 32, 32 -> 64, 64 -> 160 (3 x 3, with biases), then a 160 -> 10 head.
    expected = (9 * 32 + 32) + (32 * 9 * 64 + 64) + (64 * 9 * 160 + 160) + (160 * 10 + 10)
    assert sum(p.numel() for p in cnn.parameters()) == expected == 112_746


def test_shapes_on_a_non_square_image_and_narrow_widths():
    cnn = DigitsCNN(num_classes=7, channels=(4, 5, 6), in_chans=3)
    features = cnn.features(torch.randn(2, 3, 6, 10))
    assert features.shape == (2, 6, 3, 5)  # the max-pool halves H and W
    assert cnn(torch.randn(2, 3, 6, 10)).shape == (2, 7)


def test_head_reads_the_global_average_of_the_last_feature_map():
    torch.manual_seed(0)
    cnn = DigitsCNN(channels=(4, 5, 6))
    images = torch.randn(3, 1, 8, 8)
    expected = cnn.head(cnn.features(images).mean(dim=(2, 3)))
    torch.testing.assert_close(cnn(images), expected, rtol=0, atol=0)


def test_widths_are_checked():
    with pytest.raises(ValueError, match=r"channels=\(16, 32\) must be three positive ints"):
        DigitsCNN(channels=(16, 32))
    with pytest.raises(ValueError, match=r"channels=\(16, 0, 48\) must be three positive ints"):
        DigitsCNN(channels=(16, 0, 48))
