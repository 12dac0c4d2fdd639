"""Interactive figures: live sliders in a kernel, kernel-free sliders in the HTML book.

- :mod:`vitbook.widgets.catalogue`: the book's explorers, one function per figure.
- :mod:`vitbook.widgets.explorer`: ``explore`` and ``Explorer``, the one call behind them, with
  :mod:`vitbook.widgets._panels` and :mod:`vitbook.widgets._static_page` for the page's version.
- :mod:`vitbook.widgets.playground`: the trained digits ViT running in the page while you draw.
- :mod:`vitbook.widgets.photo_playground`: the CIFAR-10 ViT running in the page on a test photo
  or a photo of your own.

Imported only on demand: ``import vitbook`` never imports ipywidgets.

See chapter: How the interactive figures work.
"""

from vitbook.widgets.catalogue import (
    attention_explorer,
    axial_reach_explorer,
    patch_explorer,
    position_similarity_explorer,
    sincos_explorer,
)
from vitbook.widgets.explorer import MAX_FRAMES, Explorer, Param, explore
from vitbook.widgets.photo_playground import PhotoPlayground, photo_playground
from vitbook.widgets.playground import DigitPlayground, digit_playground

__all__ = [
    "MAX_FRAMES",
    "DigitPlayground",
    "Explorer",
    "Param",
    "PhotoPlayground",
    "attention_explorer",
    "axial_reach_explorer",
    "digit_playground",
    "explore",
    "patch_explorer",
    "photo_playground",
    "position_similarity_explorer",
    "sincos_explorer",
]
