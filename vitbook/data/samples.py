"""Real images that ship inside matplotlib and scikit-learn, so that nothing is downloaded.

``"grace_hopper"`` is matplotlib's portrait (512 x 600, RGB); ``"china"`` and ``"flower"`` are
scikit-learn's photos (427 x 640), which import scikit-learn only when asked for. Images are
float (C, H, W) in [0, 1], the layout of :func:`vitbook.patchify` once ``.unsqueeze(0)`` adds
the batch.

See chapter: Images as sequences of patches.
"""

from __future__ import annotations

import numpy as np
import torch

from vitbook import _checks

__all__ = ["SAMPLE_IMAGES", "sample_image"]

SAMPLE_IMAGES = ("grace_hopper", "china", "flower")


def _load(name: str) -> np.ndarray:
    """The bundled photo as a (H, W, 3) uint8 array."""
    if name == "grace_hopper":
        from matplotlib import cbook
        from PIL import Image

        with Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as image:
            return np.asarray(image.convert("RGB"))
    try:
        from sklearn.datasets import load_sample_image
    except ImportError as error:  # pragma: no cover - scikit-learn is in the book's environment
        raise ImportError(
            f"sample_image({name!r}) needs scikit-learn (pip install scikit-learn); "
            "'grace_hopper' needs only matplotlib."
        ) from error
    return load_sample_image(f"{name}.jpg")


def sample_image(
    name: str = "grace_hopper", size: int | tuple[int, int] | None = 224
) -> torch.Tensor:
    """A real photo as a float tensor (C, H, W) with values in [0, 1], offline.

    With ``size``, the photo is cropped around its centre to the aspect ratio of ``size``, then
    resized with antialiasing.

    Args:
        name: ``"grace_hopper"`` (matplotlib), ``"china"`` or ``"flower"`` (scikit-learn).
        size: (H, W) of the result, or one int for a square image; ``None`` keeps the original.

    Returns:
        (3, H, W) float32 in [0, 1].

    Raises:
        ValueError: an unknown ``name``, or a size that is not positive.

    Example:
        >>> image = sample_image("grace_hopper", size=(64, 96))
        >>> image.shape, image.dtype
        (torch.Size([3, 64, 96]), torch.float32)
        >>> 0.0 <= image.min().item() and image.max().item() <= 1.0
        True

    See chapter: Images as sequences of patches.
    """
    _checks.choice("name", name, SAMPLE_IMAGES)
    pixels = _load(name)  # (H, W, 3) uint8
    if size is not None:
        from PIL import Image

        out_h, out_w = _checks.pair("size", size)
        in_h, in_w = pixels.shape[:2]
        # The largest centred crop with the aspect ratio of the requested size.
        crop_h, crop_w = (
            min(in_h, round(in_w * out_h / out_w)),
            min(in_w, round(in_h * out_w / out_h)),
        )
        top, left = (in_h - crop_h) // 2, (in_w - crop_w) // 2
        image = Image.fromarray(pixels[top : top + crop_h, left : left + crop_w])
        pixels = np.asarray(image.resize((out_w, out_h), Image.Resampling.LANCZOS))
    image = torch.from_numpy(pixels.copy()).permute(2, 0, 1)  # (H, W, C) -> (C, H, W)
    return image.float() / 255


def load_digits_split(*, validation: bool = False) -> tuple[torch.Tensor, ...]:
    """scikit-learn's handwritten digits as image tensors, split the same way every time.

    The 1,797 digits of ``load_digits`` (8 x 8, values 0 to 16) are scaled to [0, 1] and split
    stratified with ``random_state=0``: 1,347 training and 450 test images. ``validation=True``
    carves a stratified fifth of the training images out for validation (1,077 and 270); the test
    images stay the same.

    Returns:
        ``(train_images, train_labels, test_images, test_labels)``, or with ``validation=True``
        ``(train_images, train_labels, val_images, val_labels, test_images, test_labels)``:
        images (B, 1, 8, 8) float32 in [0, 1], labels (B,) int64 in 0..9.

    Raises:
        TypeError: ``validation`` is not a bool.
        ImportError: scikit-learn is not installed.

    Example:
        >>> x_train, y_train, x_test, y_test = load_digits_split()
        >>> x_train.shape, x_test.shape, y_train.dtype
        (torch.Size([1347, 1, 8, 8]), torch.Size([450, 1, 8, 8]), torch.int64)
        >>> 0.0 == x_train.min().item() and x_train.max().item() == 1.0
        True
        >>> x_fit, y_fit, x_val, y_val, x_test2, y_test2 = load_digits_split(validation=True)
        >>> len(x_fit), len(x_val), torch.equal(x_test2, x_test)
        (1077, 270, True)

    See chapter: Training and classification.
    """
    _checks.boolean("validation", validation)
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as error:  # pragma: no cover - scikit-learn is in the book's environment
        raise ImportError(
            "load_digits_split() needs scikit-learn: pip install scikit-learn"
        ) from error
    digits = load_digits()
    images = digits.images.astype(np.float32)[:, None] / 16.0  # (B, 1, 8, 8), 16 is the maximum
    labels = digits.target.astype(np.int64)  # (B,)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.25, stratify=labels, random_state=0
    )
    parts = [x_train, y_train]
    if validation:
        # Carved out of the training part only: the test part stays exactly as without it.
        x_train, x_val, y_train, y_val = train_test_split(
            x_train, y_train, test_size=0.2, stratify=y_train, random_state=0
        )
        parts = [x_train, y_train, x_val, y_val]
    return tuple(torch.from_numpy(part) for part in (*parts, x_test, y_test))
