"""Your own photos: a folder with one subfolder per class, read as the book's tensors.

The layout is torchvision's ``ImageFolder``: ``root/<class>/<name>.jpg``, classes and files in
sorted order. :func:`load_image_folder` reads it without torchvision; :func:`write_image_folder`
writes tensors into it as PNG.

See chapter: Real photos.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from vitbook import _checks

__all__ = ["IMAGE_EXTENSIONS", "load_image_folder", "write_image_folder"]

# torchvision's IMG_EXTENSIONS (datasets/folder.py), compared in lower case.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _photo(path: Path, size: int) -> np.ndarray:
    """One photo as (size, size, 3) uint8: RGB, the central square, reduced by box averaging."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
    except (UnidentifiedImageError, OSError) as error:
        raise ValueError(f"{path} is not a photo Pillow can read ({error}); remove it from the "
                         "folder or convert it to PNG or JPEG.") from error  # fmt: skip
    w, h = image.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    square = image.crop((left, top, left + side, top + side))
    return np.asarray(square.resize((size, size), Image.Resampling.BOX), dtype=np.uint8)


def load_image_folder(
    root: str | os.PathLike, *, size: int = 32
) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """Read a folder of photos, one subfolder per class, as ``(images, labels, classes)``.

    Each photo becomes RGB, is cropped to its central square and reduced to ``size`` x ``size`` by
    box averaging (Pillow's ``BOX``, as the book's photo playground). Hidden files and files not
    ending in one of :data:`IMAGE_EXTENSIONS` are skipped.

    Returns:
        ``images`` (B, 3, size, size) float32 in [0, 1], ``labels`` (B,) int64 into ``classes``,
        ``classes``: the subfolder names, sorted.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        ValueError: ``root`` is a file or has no class folders, a class folder has no photo, or a
            file is not a photo, each named with the fix.
        TypeError: ``size`` is not an int.

    Example:
        >>> import tempfile
        >>> from vitbook.data.cifar_sample import load_cifar10_sample
        >>> x_train, y_train, _, _ = load_cifar10_sample()
        >>> root = write_image_folder(tempfile.mkdtemp(), x_train[:6], y_train[:6],
        ...                           ("airplane", "automobile", "bird", "cat", "deer", "dog",
        ...                            "frog", "horse", "ship", "truck"))
        >>> images, labels, classes = load_image_folder(root)
        >>> images.shape[1:], len(classes) == len(set(y_train[:6].tolist()))
        (torch.Size([3, 32, 32]), True)

    See chapter: Real photos.
    """
    size = _checks.integer("size", size, minimum=1, fix="use 32 for the book's photo ViT")
    root = Path(root).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist; make a folder with one subfolder of "
                                "photos per class (root/cat/1.jpg, root/dog/2.jpg, ...).")
    if not root.is_dir():
        raise ValueError(f"{root} is a file; pass the folder that holds one subfolder per class.")
    classes = tuple(sorted(p.name for p in root.iterdir() if p.is_dir()
                           and not p.name.startswith(".")))  # fmt: skip
    if not classes:
        raise ValueError(f"{root} has no subfolders; put the photos of each class in a subfolder "
                         "named after the class (root/cat/1.jpg, root/dog/2.jpg, ...).")
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.is_file()
                       and not p.name.startswith(".")
                       and p.suffix.lower() in IMAGE_EXTENSIONS)  # fmt: skip
        if not files:
            raise ValueError(f"{root / name} holds no photo (files ending in "
                             f"{', '.join(IMAGE_EXTENSIONS)}); add some or remove the folder.")
        images += [_photo(path, size) for path in files]
        labels += [label] * len(files)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255  # (B, 3, size, size)
    return x.contiguous(), torch.tensor(labels, dtype=torch.int64), classes


def write_image_folder(
    root: str | os.PathLike,
    images: torch.Tensor,
    labels: torch.Tensor,
    classes: tuple[str, ...],
) -> Path:
    """Write photos as PNG files into ``root/<class>/<number>.png``; return ``root``.

    Args:
        root: the folder (made if missing); files already there stay.
        images: (B, 3, H, W) in [0, 1], stored as round(255 * value).
        labels: (B,) class indices into ``classes``.
        classes: the class names, used as folder names.

    Raises:
        TypeError / ValueError: images or labels of the wrong shape, values outside [0, 1],
            labels outside ``classes``, or a class name that is not a plain folder name.

    See chapter: Real photos.
    """
    from PIL import Image

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3:
        raise TypeError("images must be a tensor (B, 3, H, W) of photos in [0, 1].")
    if not isinstance(labels, torch.Tensor) or labels.shape != images.shape[:1]:
        raise ValueError(f"labels must be a tensor of {images.shape[0]} class indices, got "
                         f"{getattr(labels, 'shape', type(labels).__name__)}.")  # fmt: skip
    if not bool(((images >= 0) & (images <= 1)).all()):
        raise ValueError("images must lie in [0, 1]; divide 0..255 pixels by 255.")
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < len(classes):
        raise ValueError(f"labels run from {int(labels.min())} to {int(labels.max())}, but there "
                         f"are {len(classes)} classes; pass a name for every label.")
    bad = [c for c in classes if not c or c.startswith(".") or "/" in c or "\\" in c]
    if bad:
        raise ValueError(f"class names {bad} cannot be folder names; use plain names.")
    root = Path(root).expanduser()
    pixels = (images.detach().cpu() * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    for number, (photo, label) in enumerate(zip(pixels, labels.tolist(), strict=True)):
        folder = root / classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo).save(folder / f"{number:05d}.png")
    return root
