"""vitbook.data.folders: a folder of one's own photos, one subfolder per class."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitbook.data import load_cifar10_sample, load_image_folder, write_image_folder
from vitbook.data.cifar import CIFAR10_CLASSES


def test_photos_written_come_back_exactly_in_imagefolder_order(tmp_path):
    _, _, x_test, y_test = load_cifar10_sample()
    images, labels = x_test[:40], y_test[:40]
    write_image_folder(tmp_path, images, labels, CIFAR10_CLASSES)
    loaded, got, classes = load_image_folder(tmp_path)
    present = sorted({CIFAR10_CLASSES[k] for k in labels.tolist()})
    assert classes == tuple(present)  # sorted folder names, as ImageFolder
    # ImageFolder's order: by class folder, then by file name (the writer numbers them)
    order = sorted(range(40), key=lambda i: (CIFAR10_CLASSES[labels[i]], i))
    assert torch.equal(loaded, images[order])  # PNG: lossless
    assert [classes[k] for k in got.tolist()] == [CIFAR10_CLASSES[labels[i]] for i in order]
    assert got.dtype == torch.int64 and loaded.dtype == torch.float32


def test_a_photo_is_cropped_to_its_centre_square_and_box_averaged(tmp_path):
    rng = np.random.default_rng(0)
    photo = rng.integers(0, 256, (60, 100, 3), dtype=np.uint8)  # 100 wide, 60 high
    (tmp_path / "wide").mkdir()
    Image.fromarray(photo).save(tmp_path / "wide" / "a.png")
    (tmp_path / "grey").mkdir()
    Image.fromarray(photo[:, :64, 0]).save(tmp_path / "grey" / "b.png")  # one channel
    images, labels, classes = load_image_folder(tmp_path, size=6)
    assert classes == ("grey", "wide") and labels.tolist() == [0, 1]
    square = photo[:, 20:80].astype(float)  # the centre 60 x 60
    expected = square.reshape(6, 10, 6, 10, 3).mean(axis=(1, 3))  # 10 x 10 boxes
    got = images[1].permute(1, 2, 0).numpy() * 255
    assert np.abs(got - expected).max() <= 1.0  # Pillow rounds the box means
    assert torch.equal(images[0][0], images[0][1])  # grey becomes RGB


def test_other_files_and_hidden_ones_are_skipped(tmp_path):
    (tmp_path / "cat").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "cat" / "1.JPG")
    (tmp_path / "cat" / "notes.txt").write_text("not a photo")
    (tmp_path / "cat" / ".hidden.png").write_bytes(b"")
    (tmp_path / ".cache").mkdir()
    images, labels, classes = load_image_folder(tmp_path)
    assert classes == ("cat",) and images.shape == (1, 3, 32, 32)


def test_mistakes_are_named_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="one subfolder of photos per class"):
        load_image_folder(tmp_path / "nowhere")
    (tmp_path / "file.png").write_bytes(b"")
    with pytest.raises(ValueError, match="is a file"):
        load_image_folder(tmp_path / "file.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="has no subfolders"):
        load_image_folder(empty)
    (empty / "dog").mkdir()
    with pytest.raises(ValueError, match="holds no photo"):
        load_image_folder(empty)
    (empty / "dog" / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="broken.jpg is not a photo Pillow can read"):
        load_image_folder(empty)
    with pytest.raises(TypeError, match="size"):
        load_image_folder(empty, size=32.0)


def test_the_writer_refuses_what_it_cannot_write(tmp_path):
    images, labels = torch.rand(2, 3, 8, 8), torch.tensor([0, 1])
    with pytest.raises(TypeError, match="images must be a tensor"):
        write_image_folder(tmp_path, images[:, :1], labels, ("a", "b"))
    with pytest.raises(ValueError, match="must lie in"):
        write_image_folder(tmp_path, images * 255, labels, ("a", "b"))
    with pytest.raises(ValueError, match="2 classes"):
        write_image_folder(tmp_path, images, torch.tensor([0, 2]), ("a", "b"))
    with pytest.raises(ValueError, match="cannot be folder names"):
        write_image_folder(tmp_path, images, labels, ("a", "../b"))
    with pytest.raises(ValueError, match="labels must be"):
        write_image_folder(tmp_path, images, torch.tensor([0]), ("a", "b"))
    assert not any(tmp_path.iterdir())  # nothing half-written
