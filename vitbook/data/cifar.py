"""CIFAR-10: real photos for training a ViT, with a validation split and an offline stand-in.

:func:`load_cifar10` reads CIFAR-10 (60,000 photos, 32 x 32, ten classes) from torchvision or a
``.npz`` and holds out a validation split of the training photos; :func:`cifar10_standin` is a
small task of the same shape that runs offline. Images are float32 (B, 3, 32, 32) in [0, 1];
:class:`Normalize`, the photo models' first layer, standardises them.

See chapter: Real photos.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vitbook import _checks

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "DataUnavailableError",
    "ImageSplits",
    "Normalize",
    "cifar10_standin",
    "load_cifar10",
]

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)
# Per-channel mean and standard deviation of the 50,000 training photos, in [0, 1] units.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
DEFAULT_ROOT = Path("~/.cache/vitbook/cifar10")

Data = tuple[torch.Tensor, torch.Tensor]


class DataUnavailableError(OSError):
    """The data set is neither here nor downloadable now; the message says what to do."""


@dataclass(frozen=True)
class ImageSplits:
    """Training, validation and test photos, with where they came from.

    Fields:
        train, val, test: ``(images (B, 3, H, W) float32 in [0, 1], labels (B,) int64)``.
        classes: the class names, index = label.
        source: where the photos came from, e.g. ``"torchvision CIFAR10 at ~/.cache/..."``.
        sha256: a checksum of the photos and labels as read (uint8 pixels, int64 labels).

    Example:
        >>> splits = cifar10_standin(n_train=30, n_val=6, n_test=6)
        >>> splits.train[0].shape, splits.num_classes, splits.is_standin
        (torch.Size([30, 3, 32, 32]), 3, True)

    See chapter: Real photos.
    """

    train: Data
    val: Data
    test: Data
    classes: tuple[str, ...]
    source: str
    sha256: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def is_standin(self) -> bool:
        return self.source.startswith("stand-in")

    def __repr__(self) -> str:
        parts = ("train", "val", "test")
        sizes = ", ".join(f"{name}={len(getattr(self, name)[1])}" for name in parts)
        return f"ImageSplits({sizes}, classes={len(self.classes)}, source={self.source!r})"


class Normalize(nn.Module):
    """Subtract a per-channel mean and divide by a per-channel standard deviation.

    The first layer of a photo model, so that everything else sees images in [0, 1]. ``mean`` and
    ``std`` are non-persistent buffers; it computes in the images' floating-point dtype.

    Shapes:
        forward: (B, C, H, W) -> (B, C, H, W), C = ``len(mean)``.

    Raises:
        TypeError: in ``forward``, images that are not floating point (divide 8-bit ones by 255).
        ValueError: ``mean`` and ``std`` of different lengths or a ``std`` <= 0; in ``forward``,
            images that are not (B, C, H, W) with C = ``len(mean)``.

    Example:
        >>> normalize = Normalize(CIFAR10_MEAN, CIFAR10_STD)
        >>> out = normalize(torch.full((1, 3, 2, 2), 0.4914))
        >>> round(out[0, 0, 0, 0].item(), 6)
        0.0

    See chapter: Real photos.
    """

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        if len(mean) != len(std) or not mean:
            raise ValueError(
                f"mean has {len(mean)} values and std {len(std)}; give one of each per channel."
            )
        for c, (m, s) in enumerate(zip(mean, std, strict=True)):
            _checks.real(f"mean[{c}]", m)
            _checks.real(f"std[{c}]", s, low=0, open_low=True, fix="a standard deviation is > 0")
        self.register_buffer("mean", torch.tensor(mean)[:, None, None], persistent=False)
        self.register_buffer("std", torch.tensor(std)[:, None, None], persistent=False)

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self._check(images)
        mean, std = self.mean.to(images.dtype), self.std.to(images.dtype)
        return (images - mean) / std  # (B, C, H, W)

    def _check(self, images: torch.Tensor) -> None:
        """Float images of this layer's channels, or a TypeError / ValueError saying the fix."""
        if not torch.is_floating_point(images):
            raise TypeError(
                f"Normalize takes float images in [0, 1], got {images.dtype}; convert 8-bit "
                "photos first with images.float() / 255."
            )
        channels = len(self.mean)
        if images.ndim != 4 or images.shape[1] != channels:
            raise ValueError(
                f"Normalize has statistics for {channels} channels and takes (B, {channels}, H, "
                f"W) images, got shape {tuple(images.shape)}; give grey images their "
                f"{channels} channels (images.expand(-1, {channels}, -1, -1)) or use a "
                "Normalize with one mean and std per channel."
            )


def _checksum(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _validation_indices(labels: np.ndarray, val_size: int, seed: int) -> np.ndarray:
    """A stratified, seeded choice of ``val_size`` training indices (equal share per class)."""
    classes = np.unique(labels)
    if val_size % len(classes):
        raise ValueError(
            f"val_size={val_size} cannot be split equally over {len(classes)} classes; use a "
            f"multiple of {len(classes)}, e.g. {len(classes) * max(1, val_size // len(classes))}."
        )
    per_class = val_size // len(classes)
    rng = np.random.default_rng(seed)
    chosen = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if per_class >= len(members):
            raise ValueError(
                f"val_size={val_size} asks for {per_class} validation images of class {c}, "
                f"which has only {len(members)}; use a smaller val_size."
            )
        chosen.append(rng.permutation(members)[:per_class])
    return np.sort(np.concatenate(chosen))


def _as_tensors(images: np.ndarray, labels: np.ndarray) -> Data:
    """(B, H, W, C) uint8 and (B,) ints -> ((B, C, H, W) float32 in [0, 1], (B,) int64)."""
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255
    return x.contiguous(), torch.from_numpy(np.asarray(labels, dtype=np.int64))


def _split(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
    *, classes: tuple[str, ...], source: str, val_size: int, seed: int,
) -> ImageSplits:
    val = _validation_indices(y_train, val_size, seed)
    train = np.setdiff1d(np.arange(len(y_train)), val)
    return ImageSplits(
        train=_as_tensors(x_train[train], y_train[train]),
        val=_as_tensors(x_train[val], y_train[val]),
        test=_as_tensors(x_test, y_test),
        classes=classes,
        source=source,
        sha256=_checksum(x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64)),
    )


def _read_npz(path: Path) -> tuple[np.ndarray, ...]:
    if path.is_dir():
        raise ValueError(f"{path} is a folder; pass the .npz file itself.")
    if not path.is_file():
        raise DataUnavailableError(
            f"{path} does not exist; pass the path of a .npz with x_train, y_train, x_test and "
            "y_test (torchvision's layout), or source=None to use torchvision."
        )
    remake = (
        "make the file again (np.savez with the four uint8/int arrays, or the data set's "
        "to_npz.py), or pass source=None to use torchvision."
    )
    try:
        with np.load(path, allow_pickle=False) as arrays:
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in arrays]
            if missing:
                raise ValueError(
                    f"{path} lacks {missing}; it needs x_train (N, 32, 32, 3) uint8, y_train "
                    "(N,), x_test and y_test in torchvision's layout."
                )
            x_train, y_train, x_test, y_test = (
                arrays[k] for k in ("x_train", "y_train", "x_test", "y_test")
            )
    except (zipfile.BadZipFile, EOFError, OSError) as error:  # cut short, not a .npz at all
        raise ValueError(f"{path} is not a readable .npz ({error}); it is damaged or cut "
                         f"short: {remake}") from error  # fmt: skip
    except ValueError as error:
        if "allow_pickle" not in str(error):
            raise
        raise ValueError(  # numpy's advice to unpickle would run code from the file: never
            f"{path} is not a .npz of plain arrays: numpy found pickled Python objects in it "
            "(or bytes that are no .npz at all), which vitbook never loads, since unpickling "
            f"runs code from the file. Photos must be uint8 and labels integer arrays; {remake}"
        ) from error
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3):
            raise ValueError(
                f"x_{name} in {path} is {x.dtype} of shape {x.shape}; CIFAR-10 photos are "
                "uint8 (N, 32, 32, 3), as torchvision's CIFAR10.data."
            )
        if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(
                f"y_{name} in {path} is {y.dtype} of shape {y.shape}; it must hold one integer "
                f"label per photo ({len(x)})."
            )
        if len(y) and (y.min() < 0 or y.max() >= len(CIFAR10_CLASSES)):
            raise ValueError(
                f"y_{name} in {path} holds labels outside 0 .. 9 (from {y.min()} to {y.max()})."
            )
    return x_train, y_train, x_test, y_test


def _read_torchvision(root: Path, download: bool) -> tuple[np.ndarray, ...]:
    try:
        from torchvision.datasets import CIFAR10
    except ImportError as error:
        raise DataUnavailableError(
            "reading CIFAR-10 from torchvision needs torchvision (pip install torchvision; Colab "
            "has it), or pass source='cifar10.npz', a file of the arrays x_train, y_train, "
            f"x_test, y_test. (import failed: {error})"
        ) from error
    try:
        train = CIFAR10(str(root), train=True, download=download)
        test = CIFAR10(str(root), train=False, download=download)
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        raise DataUnavailableError(
            f"CIFAR-10 is not in {root}; call load_cifar10(download=True) where there is a "
            "network (about 170 MB, once), or pass the folder that holds cifar-10-batches-py."
        ) from error
    except OSError as error:  # no network while downloading
        raise DataUnavailableError(
            f"CIFAR-10 could not be downloaded into {root} ({error}); connect to the internet, "
            "or copy cifar-10-batches-py there, or pass source='cifar10.npz'."
        ) from error
    return train.data, np.asarray(train.targets), test.data, np.asarray(test.targets)


def load_cifar10(
    source: str | Path | None = None,
    *,
    download: bool = False,
    val_size: int = 5000,
    seed: int = 0,
) -> ImageSplits:
    """CIFAR-10 as tensors, with a stratified validation split held out of the training photos.

    Args:
        source: ``None`` for torchvision's copy in ``~/.cache/vitbook/cifar10``; a folder for
            torchvision's copy there; or a ``.npz`` with ``x_train`` (50000, 32, 32, 3) uint8,
            ``y_train``, ``x_test``, ``y_test`` (torchvision's ``.data`` and ``.targets``).
        download: let torchvision download the data set (about 170 MB, once) if it is missing.
        val_size: training photos held out for validation, the same number from every class.
        seed: which photos are held out.

    Returns:
        :class:`ImageSplits`: 50000 - val_size training, val_size validation and 10,000 test photos.

    Raises:
        DataUnavailableError: no copy here and none downloadable, with what to do.
        ValueError / TypeError: a malformed ``.npz``; a ``val_size`` that is not a positive
            multiple of 10 or leaves no training photo of some class.

    Example:
        >>> try:
        ...     splits = load_cifar10(download=False)
        ... except DataUnavailableError:
        ...     splits = cifar10_standin()  # offline: a stand-in of the same shapes
        >>> splits.train[0].shape[1:]
        torch.Size([3, 32, 32])

    See chapter: Real photos.
    """
    if source is not None and not isinstance(source, str | Path):
        raise TypeError(
            f"source must be None, a folder or a .npz path, got {type(source).__name__}."
        )
    _checks.boolean("download", download)
    _checks.integer("val_size", val_size, minimum=1, fix="5000 holds out a tenth")
    _checks.integer("seed", seed, minimum=-(2**63))
    path = Path(source).expanduser() if source is not None else DEFAULT_ROOT.expanduser()
    if path.suffix == ".npz":
        arrays, where = _read_npz(path), f"npz file {path}"
    else:
        arrays, where = _read_torchvision(path, download), f"torchvision CIFAR10 in {path}"
    return _split(*arrays, classes=CIFAR10_CLASSES, source=where, val_size=val_size, seed=seed)


STANDIN_PHOTOS = ("grace_hopper", "china", "flower")


def cifar10_standin(
    n_train: int = 600, n_val: int = 150, n_test: int = 150, *, seed: int = 0
) -> ImageSplits:
    """A small offline task of CIFAR-10's shape: which of three photos a 32 x 32 crop comes from.

    Each image is a random square crop (a sixth to a half of the shorter side) of one of
    :func:`vitbook.data.sample_image`'s three photos, resized to 32 x 32. It lets CIFAR-10 code run
    anywhere; it says nothing about CIFAR-10 accuracy.

    Args:
        n_train, n_val, n_test: images per split, each a multiple of 3 (one third per photo).
        seed: seeds the crops.

    Returns:
        :class:`ImageSplits` with ``classes = ("grace_hopper", "china", "flower")`` and
        ``source = "stand-in: ..."``.

    Example:
        >>> splits = cifar10_standin(n_train=6, n_val=3, n_test=3)
        >>> splits.classes, splits.val[1].tolist()
        (('grace_hopper', 'china', 'flower'), [0, 1, 2])

    See chapter: Real photos.
    """
    from vitbook.data import sample_image

    for name, value in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        _checks.integer(name, value, minimum=3, fix="use a multiple of 3")
        if value % 3:
            raise ValueError(f"{name}={value} must be a multiple of 3 (one third per photo).")
    generator = torch.Generator().manual_seed(seed)
    photos = [sample_image(name, size=None) for name in STANDIN_PHOTOS]  # (3, H, W) each
    total = n_train + n_val + n_test
    images, labels = [], []
    for label, photo in enumerate(photos):
        _, h, w = photo.shape
        short = min(h, w)
        sides = torch.randint(short // 6, short // 2 + 1, (total // 3,), generator=generator)
        for side in sides.tolist():
            top = int(torch.randint(0, h - side + 1, (1,), generator=generator))
            left = int(torch.randint(0, w - side + 1, (1,), generator=generator))
            crop = photo[None, :, top : top + side, left : left + side]  # (1, 3, side, side)
            images.append(
                nn.functional.interpolate(crop, size=(32, 32), mode="bilinear", antialias=True)
            )
        labels.append(torch.full((total // 3,), label))
    x = torch.cat(images).clamp(0, 1)  # (total, 3, 32, 32), the photos' crops in order
    y = torch.cat(labels)
    order = [  # each split takes the same share of each photo, in photo order
        torch.arange(label * (total // 3), (label + 1) * (total // 3)) for label in range(3)
    ]
    parts, start = [], 0
    for size in (n_train, n_val, n_test):
        take = torch.cat([idx[start // 3 : (start + size) // 3] for idx in order])
        parts.append((x[take].contiguous(), y[take].clone()))
        start += size
    pixels = (x * 255).round().to(torch.uint8).numpy()
    return ImageSplits(
        train=parts[0],
        val=parts[1],
        test=parts[2],
        classes=STANDIN_PHOTOS,
        source=f"stand-in: 32 x 32 crops of {', '.join(STANDIN_PHOTOS)} (seed {seed})",
        sha256=_checksum(pixels, y.numpy()),
    )

