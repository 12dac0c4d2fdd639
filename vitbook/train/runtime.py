"""Where a chapter runs: the device, the precision it trains in, Colab or not, and the photos.

:func:`detect_runtime` tells a chapter whether it has a GPU (and trains on CIFAR-10) or runs a
stand-in, which :func:`note` then says in a box under the cell. The tests take every branch on a
CPU through two environment variables:

- ``VITBOOK_SIMULATE_GPU=fp16`` (or ``bf16``, ``fp32``): report a GPU training in that precision,
  and run on the CPU.
- ``VITBOOK_CIFAR10=path.npz``: read CIFAR-10 from this file (``x_train``, ``y_train``,
  ``x_test``, ``y_test`` in torchvision's layout) instead of torchvision's copy.

See chapters: Real photos; Fine-tuning a pretrained ViT.
"""

from __future__ import annotations

import html
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch

from vitbook import _checks
from vitbook.data.cifar import ImageSplits, load_cifar10

__all__ = ["CIFAR10_TRAIN_PHOTOS", "Note", "Runtime", "detect_runtime", "note"]

SIMULATE_GPU = "VITBOOK_SIMULATE_GPU"
CIFAR10_FILE = "VITBOOK_CIFAR10"
CIFAR10_TRAIN_PHOTOS = 50_000  # the training photos of torchvision's CIFAR-10


@dataclass(frozen=True)
class Runtime:
    """The machine a chapter runs on, as far as its branches care.

    Fields:
        device: where models train: ``cuda`` on a GPU, else ``cpu``.
        gpu: the GPU's name, or ``None`` without one.
        precision: what ``precision="auto"`` trains in here: ``"bf16"``, ``"fp16"`` or ``"fp32"``.
        colab: running in Google Colab.
        simulated: a GPU's branch run on the CPU (``VITBOOK_SIMULATE_GPU``).
        cifar10_file: the ``.npz`` of ``VITBOOK_CIFAR10``, or ``None`` for torchvision's copy.

    Example:
        >>> runtime = Runtime(torch.device("cpu"), None, "fp32", False)
        >>> runtime.has_gpu, str(runtime)
        (False, 'no GPU: the CPU, training in fp32')

    See chapters: Real photos; Fine-tuning a pretrained ViT.
    """

    device: torch.device
    gpu: str | None
    precision: str
    colab: bool
    simulated: bool = False
    cifar10_file: Path | None = None

    @property
    def has_gpu(self) -> bool:
        return self.gpu is not None

    def __str__(self) -> str:
        where = f"a GPU: {self.gpu} ({self.device})" if self.has_gpu else "no GPU: the CPU"
        return f"{where}, training in {self.precision}" + (", in Colab" if self.colab else "")

    def load_cifar10(
        self, *, val_share: float = 0.1, download: bool = False, seed: int = 0
    ) -> ImageSplits:
        """CIFAR-10 with ``val_share`` of the training photos held out for validation.

        Reads :attr:`cifar10_file` when set, else torchvision's copy (about 170 MB with
        ``download``). The validation split takes as many photos from each class, in all
        ``val_share`` of the training photos rounded to a multiple of 10 (at least 10).

        Raises:
            vitbook.data.cifar.DataUnavailableError: no copy here and none downloadable.
            ValueError: ``val_share`` outside (0, 0.5]; a malformed file.

        Example:
            >>> Runtime(torch.device("cpu"), None, "fp32", False)._val_size(0.02)
            1000

        See chapter: Real photos.
        """
        return load_cifar10(
            self.cifar10_file, download=download, val_size=self._val_size(val_share), seed=seed
        )

    def _val_size(self, val_share: float) -> int:
        _checks.real("val_share", val_share, low=0, high=0.5, open_low=True,
                     fix="the paper holds out 0.02 of CIFAR-10, the photo chapter 0.1")
        photos = CIFAR10_TRAIN_PHOTOS
        if self.cifar10_file is not None and self.cifar10_file.is_file():
            photos = _train_labels_in(self.cifar10_file) or photos
        return max(10, round(photos * val_share / 10) * 10)


def _train_labels_in(path: Path) -> int | None:
    """How many training labels a .npz holds, or ``None`` for a file that
    :func:`vitbook.data.cifar.load_cifar10` will refuse with a better message."""
    import zipfile

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as arrays:
            return len(arrays["y_train"]) if "y_train" in arrays else None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, TypeError):
        return None


def detect_runtime() -> Runtime:
    """Where this process runs: its GPU (if any) and precision, Colab or not, and the data file.

    The precision is :func:`vitbook.train.resolve_precision`'s ``"auto"``; the module's
    environment variables override what is found.

    Raises:
        ValueError: ``VITBOOK_SIMULATE_GPU`` not ``fp16``, ``bf16`` or ``fp32``.

    Example:
        >>> import os
        >>> os.environ["VITBOOK_SIMULATE_GPU"] = "fp16"  # what the tests do
        >>> runtime = detect_runtime()
        >>> runtime.has_gpu, runtime.device.type, runtime.precision
        (True, 'cpu', 'fp16')
        >>> del os.environ["VITBOOK_SIMULATE_GPU"]

    See chapters: Real photos; Fine-tuning a pretrained ViT.
    """
    from vitbook.train import resolve_precision

    colab = "google.colab" in sys.modules
    file = os.environ.get(CIFAR10_FILE) or None
    cifar10_file = Path(file).expanduser() if file else None
    simulate = os.environ.get(SIMULATE_GPU, "")
    if simulate:
        if simulate not in ("fp16", "bf16", "fp32"):
            raise ValueError(
                f"{SIMULATE_GPU}={simulate!r} must be fp16 (a T4's precision), bf16 (a recent "
                f"GPU's) or fp32; unset it to use the real device."
            )
        return Runtime(
            device=torch.device("cpu"),
            gpu=f"a simulated GPU ({simulate} on the CPU)",
            precision=simulate,
            colab=colab,
            simulated=True,
            cifar10_file=cifar10_file,
        )
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        return Runtime(
            device=device,
            gpu=torch.cuda.get_device_name(device),
            precision=resolve_precision("auto", device),
            colab=colab,
            cifar10_file=cifar10_file,
        )
    return Runtime(torch.device("cpu"), None, "fp32", colab, cifar10_file=cifar10_file)


@dataclass(frozen=True)
class Note:
    """A boxed note for the reader, shown under a cell: what ran here instead of the real thing.

    Front ends show it as an HTML admonition; ``print`` gives the text wrapped to 76 characters.

    Example:
        >>> print(Note("Offline", "The cells below ran on a stand-in."))
        Note: Offline
        The cells below ran on a stand-in.

    See chapters: A pretrained ViT; Fine-tuning a pretrained ViT.
    """

    title: str
    text: str

    def __str__(self) -> str:
        return f"Note: {self.title}\n" + textwrap.fill(self.text, 76)

    def _repr_html_(self) -> str:
        return (
            '<div class="admonition note"><p class="admonition-title">'
            f"{html.escape(self.title)}</p><p>{html.escape(self.text)}</p></div>"
        )


def note(title: str, text: str) -> None:
    """Show a :class:`Note` under the running cell (printed outside a notebook).

    See chapters: A pretrained ViT; Fine-tuning a pretrained ViT.
    """
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # no IPython: a script
        print(Note(title, text))
        return
    if get_ipython() is None:
        print(Note(title, text))
    else:
        display(Note(title, text))
