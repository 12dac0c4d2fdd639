"""vitbook.data.cifar: CIFAR-10 from a .npz or torchvision, the validation split, the stand-in."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from vitbook.data.cifar import (
    CIFAR10_CLASSES,
    DataUnavailableError,
    Normalize,
    cifar10_standin,
    load_cifar10,
)


def fake_cifar(tmp_path, n_train=200, n_test=30, seed=0, **overrides):
    """A .npz in torchvision's layout: random uint8 photos, labels cycling through 0 .. 9."""
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8),
        "y_train": np.arange(n_train) % 10,
        "x_test": rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8),
        "y_test": np.arange(n_test) % 10,
    }
    arrays.update(overrides)
    path = tmp_path / "cifar.npz"
    np.savez(path, **arrays)
    return path, arrays


def test_npz_gives_the_books_tensors_and_a_stratified_validation_split(tmp_path):
    path, arrays = fake_cifar(tmp_path)
    splits = load_cifar10(path, val_size=50)
    x_train, y_train = splits.train
    x_val, y_val = splits.val
    assert (len(y_train), len(y_val), len(splits.test[1])) == (150, 50, 30)
    assert x_train.dtype == torch.float32 and x_train.shape[1:] == (3, 32, 32)
    assert y_train.dtype == torch.int64
    assert torch.equal(y_val.bincount(minlength=10), torch.full((10,), 5))
    assert splits.classes == CIFAR10_CLASSES and splits.num_classes == 10
    assert not splits.is_standin and str(path) in splits.source
    # Pixels are the file's, channel first, scaled to [0, 1]; train and val partition the file.
    pixels = torch.cat([x_train, x_val]).mul(255).round().to(torch.uint8).permute(0, 2, 3, 1)
    rows = {bytes(p.numpy().tobytes()) for p in pixels}
    assert rows == {bytes(p.tobytes()) for p in arrays["x_train"]}
    test_pixels = splits.test[0].mul(255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    np.testing.assert_array_equal(test_pixels, arrays["x_test"])


def test_the_split_depends_on_the_seed_only(tmp_path):
    path, _ = fake_cifar(tmp_path)
    first, again = load_cifar10(path, val_size=50), load_cifar10(path, val_size=50)
    other = load_cifar10(path, val_size=50, seed=1)
    assert torch.equal(first.val[0], again.val[0])
    assert not torch.equal(first.val[0], other.val[0])
    assert first.sha256 == other.sha256  # the checksum is of the data, not of the split


def test_the_checksum_tells_two_copies_apart(tmp_path):
    path, arrays = fake_cifar(tmp_path)
    original = load_cifar10(path, val_size=50).sha256
    changed = arrays["x_test"].copy()
    changed[0, 0, 0, 0] ^= 1
    path, _ = fake_cifar(tmp_path, x_test=changed)
    assert load_cifar10(path, val_size=50).sha256 != original


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"x_train": np.zeros((20, 32, 32), np.uint8)}, r"x_train .* uint8 \(N, 32, 32, 3\)"),
        ({"x_test": np.zeros((30, 32, 32, 3), np.float32)}, "x_test .* float32"),
        ({"y_train": np.arange(200) % 10 + 1}, r"labels outside 0 \.\. 9"),
        ({"y_test": np.zeros(29, np.int64)}, "one integer label per photo"),
    ],
)
def test_a_malformed_npz_is_refused_with_what_is_wrong(tmp_path, overrides, message):
    path, _ = fake_cifar(tmp_path, **overrides)
    with pytest.raises(ValueError, match=message):
        load_cifar10(path, val_size=50)


def test_a_missing_array_or_file_is_named(tmp_path):
    path = tmp_path / "partial.npz"
    np.savez(path, x_train=np.zeros((10, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match=r"lacks \['y_train', 'x_test', 'y_test'\]"):
        load_cifar10(path)
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_cifar10(tmp_path / "nowhere.npz")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"val_size": 55}, ValueError, "multiple of 10"),
        ({"val_size": 200}, ValueError, "has only 20"),
        ({"val_size": 0}, ValueError, "val_size=0"),
        ({"download": "yes"}, TypeError, "download must be True or False"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs, error, message):
    path, _ = fake_cifar(tmp_path)
    with pytest.raises(error, match=message):
        load_cifar10(path, **kwargs)
    with pytest.raises(TypeError, match="source must be None, a folder or a .npz path"):
        load_cifar10(3)


def test_offline_without_torchvision_the_error_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision fails
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)
    message = r"pip install torchvision.*source='cifar10.npz'"
    with pytest.raises(DataUnavailableError, match=message):
        load_cifar10(tmp_path)


def fake_torchvision(monkeypatch, error):
    """A torchvision whose CIFAR10 fails as the real one does offline or without the files."""
    calls = []

    class CIFAR10:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            raise error

    datasets = types.ModuleType("torchvision.datasets")
    datasets.CIFAR10 = CIFAR10
    package = types.ModuleType("torchvision")
    package.datasets = datasets
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)
    return calls


def test_offline_with_torchvision_but_no_files_the_error_says_download(monkeypatch, tmp_path):
    calls = fake_torchvision(
        monkeypatch, RuntimeError("Dataset not found or corrupted. You can use download=True")
    )
    with pytest.raises(DataUnavailableError, match=r"load_cifar10\(download=True\) where there"):
        load_cifar10(tmp_path)
    assert calls == [(str(tmp_path), True, False)]


def test_a_failed_download_says_so(monkeypatch, tmp_path):
    error = OSError("[Errno -3] Temporary failure in name resolution")
    calls = fake_torchvision(monkeypatch, error)
    with pytest.raises(DataUnavailableError, match="could not be downloaded.*name resolution"):
        load_cifar10(tmp_path, download=True)
    assert calls == [(str(tmp_path), True, True)]


def test_torchvision_data_are_read_as_from_a_npz(monkeypatch, tmp_path):
    path, arrays = fake_cifar(tmp_path)

    class CIFAR10:
        def __init__(self, root, train, download):
            part = "train" if train else "test"
            self.data, self.targets = arrays[f"x_{part}"], list(arrays[f"y_{part}"])

    datasets = types.ModuleType("torchvision.datasets")
    datasets.CIFAR10 = CIFAR10
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)
    via_torchvision = load_cifar10(tmp_path, val_size=50)
    via_npz = load_cifar10(path, val_size=50)
    assert via_torchvision.sha256 == via_npz.sha256
    assert torch.equal(via_torchvision.train[0], via_npz.train[0])
    assert "torchvision" in via_torchvision.source


def test_the_standin_is_seeded_balanced_and_in_range():
    splits = cifar10_standin(n_train=60, n_val=30, n_test=30)
    again = cifar10_standin(n_train=60, n_val=30, n_test=30)
    other = cifar10_standin(n_train=60, n_val=30, n_test=30, seed=1)
    assert torch.equal(splits.train[0], again.train[0]) and splits.sha256 == again.sha256
    assert not torch.equal(splits.train[0], other.train[0])
    for images, labels in (splits.train, splits.val, splits.test):
        assert images.shape[1:] == (3, 32, 32) and 0 <= images.min() and images.max() <= 1
        assert torch.equal(labels.bincount(), torch.full((3,), len(labels) // 3))
    assert splits.is_standin and splits.num_classes == 3
    # Crops of one photo resemble each other more than crops of another: the task is learnable.
    means = torch.stack([splits.train[0][splits.train[1] == c].mean(0) for c in range(3)])
    assert (means[0] - means[1]).abs().mean() > 0.05
    with pytest.raises(ValueError, match="n_val=31 must be a multiple of 3"):
        cifar10_standin(n_val=31)


def test_normalize_undoes_the_statistics_and_keeps_no_state():
    normalize = Normalize((0.5, 0.25), (0.5, 0.125))
    images = torch.tensor([0.5, 0.25]).reshape(1, 2, 1, 1).expand(3, 2, 4, 4)
    torch.testing.assert_close(normalize(images), torch.zeros(3, 2, 4, 4))
    assert normalize.state_dict() == {}
    with pytest.raises(ValueError, match="std\\[1\\]=0"):
        Normalize((0.5, 0.5), (0.5, 0.0))
    with pytest.raises(ValueError, match="one of each per channel"):
        Normalize((0.5,), (0.5, 0.5))


def test_normalize_refuses_what_it_would_get_wrong_silently():
    normalize = Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    pixels = torch.full((2, 3, 4, 5), 128, dtype=torch.uint8)
    with pytest.raises(TypeError, match=r"float images in \[0, 1\], got torch.uint8; .*/ 255"):
        normalize(pixels)
    with pytest.raises(ValueError, match=r"3 channels .*got shape \(2, 1, 4, 5\); .*expand"):
        normalize(torch.rand(2, 1, 4, 5))  # grey photos would be broadcast to three channels
    with pytest.raises(ValueError, match=r"got shape \(3, 4, 5\)"):
        normalize(torch.rand(3, 4, 5))  # one photo without its batch axis
    half = normalize(pixels.half() / 255)  # the images' dtype is kept
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), torch.full((2, 3, 4, 5), (128 / 255 - 0.5) / 0.25),
                               atol=2e-3, rtol=0)  # fp16 rounding  # fmt: skip


def test_a_damaged_npz_is_named_with_what_to_do(tmp_path):
    path, _ = fake_cifar(tmp_path)
    whole = path.read_bytes()
    for cut in (0, 200, len(whole) // 2, len(whole) - 30):  # a copy cut short
        path.write_bytes(whole[:cut])
        with pytest.raises(ValueError, match=r"cifar\.npz is not a readable \.npz .*cut short"):
            load_cifar10(path, val_size=50)
    np.savez(path, x_train=np.array([object()] * 3), y_train=np.arange(3), x_test=np.zeros(1),
             y_test=np.arange(1))  # fmt: skip
    with pytest.raises(ValueError, match=r"cifar\.npz is not a \.npz of plain arrays: .*pickled"):
        load_cifar10(path, val_size=50)
    path.write_bytes(b"\x80\x04not a zip, not a pickle")
    with pytest.raises(ValueError, match=r"cifar\.npz is not a \.npz of plain arrays"):
        load_cifar10(path, val_size=50)
    (tmp_path / "folder.npz").mkdir()
    with pytest.raises(ValueError, match="is a folder; pass the .npz file itself"):
        load_cifar10(tmp_path / "folder.npz")
