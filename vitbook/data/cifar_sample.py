"""Real CIFAR-10 photos that ship with the package: 5,000 for training and 1,000 for testing.

Class-balanced (500 training and 100 test photos per class), stored as the source's JPEG bytes
in one ``.npz`` (:data:`SAMPLE_PATH`, about 5.5 MB), with source, licence and checksums in
:data:`RECORD_PATH` (both made by ``scripts/make_cifar10_sample.py``). The training photos are
among those the shipped CIFAR-10 ViT trained on; the test photos no shipped model has seen.
Decoding needs Pillow.

See chapter: Real photos.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json

import numpy as np
import torch

from vitbook import _checks
from vitbook._files import ASSETS
from vitbook.data.cifar import CIFAR10_CLASSES, ImageSplits, _as_tensors, _validation_indices

__all__ = ["LICENCE", "RECORD_PATH", "SAMPLE_PATH", "cifar10_sample_splits", "load_cifar10_sample"]

SAMPLE_PATH = ASSETS / "cifar10_sample.npz"
RECORD_PATH = ASSETS / "cifar10_sample.json"
LICENCE = (
    "CIFAR-10 is published by its authors (Alex Krizhevsky, Vinod Nair and Geoffrey Hinton) at "
    "https://www.cs.toronto.edu/~kriz/cifar.html for research and teaching, with no licence "
    "stated beyond the request to cite Krizhevsky (2009). Its photos were collected from the "
    "web for the 80 Million Tiny Images collection; their copyright stays with their owners. "
    "The sample here is a small excerpt, redistributed for teaching as the data set itself is."
)
_ARRAYS = ("jpeg", "offsets", "labels", "index")


def decode_arrays(arrays) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The sample's JPEG bytes as pixels: ``{split: ((B, 32, 32, 3) uint8, (B,) int64)}``."""
    from PIL import Image

    out = {}
    for split in ("train", "test"):
        data, offsets = arrays[f"{split}_jpeg"], arrays[f"{split}_offsets"]
        photos = [
            np.asarray(Image.open(io.BytesIO(data[a:b].tobytes())).convert("RGB"), np.uint8)
            for a, b in zip(offsets[:-1], offsets[1:], strict=True)
        ]
        out[split] = (np.stack(photos), np.asarray(arrays[f"{split}_labels"], np.int64))
    return out


def pixels_checksum(pixels: np.ndarray, labels: np.ndarray) -> str:
    """SHA-256 of uint8 pixels and int64 labels, as ``ImageSplits.sha256`` counts them."""
    digest = hashlib.sha256()
    for array in (pixels, labels.astype(np.int64)):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


@functools.cache
def _decoded() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The shipped sample, its file checked against its record, decoded once per process."""
    data = SAMPLE_PATH.read_bytes()
    record = json.loads(RECORD_PATH.read_text())
    if hashlib.sha256(data).hexdigest() != record["file_sha256"]:
        raise ValueError(
            f"{SAMPLE_PATH} does not match the checksum in {RECORD_PATH.name}: the file is "
            "damaged or was changed. Reinstall vitbook, or make it again with "
            "scripts/make_cifar10_sample.py."
        )
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        decoded = decode_arrays({f"{s}_{k}": arrays[f"{s}_{k}"] for s in ("train", "test")
                                 for k in _ARRAYS})  # fmt: skip
    return decoded


def load_cifar10_sample() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The shipped CIFAR-10 photos: ``(x_train, y_train, x_test, y_test)``, offline.

    Returns:
        ``x_train`` (5000, 3, 32, 32) and ``x_test`` (1000, 3, 32, 32) float32 in [0, 1];
        ``y_train`` (5000,) and ``y_test`` (1000,) int64 labels into
        :data:`vitbook.data.cifar.CIFAR10_CLASSES`, in a mixed order. Fresh tensors on every call.

    Raises:
        ValueError: the shipped file does not match its recorded checksum.

    Example:
        >>> x_train, y_train, x_test, y_test = load_cifar10_sample()
        >>> tuple(x_train.shape), tuple(x_test.shape), y_test.dtype
        ((5000, 3, 32, 32), (1000, 3, 32, 32), torch.int64)
        >>> torch.bincount(y_train).tolist() == [500] * 10
        True

    See chapter: Real photos.
    """
    decoded = _decoded()
    x_train, y_train = _as_tensors(*decoded["train"])  # the pixels become new float tensors
    x_test, y_test = _as_tensors(*decoded["test"])
    return x_train, y_train.clone(), x_test, y_test.clone()  # the labels too, not the cache


def cifar10_sample_splits(val_per_class: int = 50, *, seed: int = 0) -> ImageSplits:
    """The shipped photos as :class:`ImageSplits`: training, validation and the 1,000 test photos.

    Args:
        val_per_class: training photos of every class held out for validation (of 500).
        seed: which photos are held out.

    Returns:
        ``ImageSplits`` with ``5000 - 10 * val_per_class`` training, ``10 * val_per_class``
        validation and 1,000 test photos; ``sha256`` is the decoded photos' checksum.

    Raises:
        TypeError, ValueError: ``val_per_class`` is not a whole number from 1 to 499.

    Example:
        >>> splits = cifar10_sample_splits()
        >>> len(splits.train[1]), len(splits.val[1]), len(splits.test[1]), splits.is_standin
        (4500, 500, 1000, False)

    See chapter: Real photos.
    """
    _checks.integer("val_per_class", val_per_class, minimum=1, fix="50 holds out a tenth")
    if val_per_class >= 500:
        raise ValueError(
            f"val_per_class={val_per_class} leaves no training photo: every class has 500 in "
            "the sample; hold out fewer, e.g. 50."
        )
    _checks.integer("seed", seed, minimum=-(2**63))
    (x, y), (x_test, y_test) = _decoded()["train"], _decoded()["test"]
    val = _validation_indices(y, 10 * val_per_class, seed)
    train = np.setdiff1d(np.arange(len(y)), val)
    return ImageSplits(
        train=_as_tensors(x[train], y[train]),
        val=_as_tensors(x[val], y[val]),
        test=_as_tensors(x_test, y_test),
        classes=CIFAR10_CLASSES,
        source=f"the CIFAR-10 sample shipped with vitbook ({SAMPLE_PATH.name})",
        sha256=pixels_checksum(np.concatenate([x, x_test]), np.concatenate([y, y_test])),
    )
