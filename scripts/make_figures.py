#!/usr/bin/env python3
"""Draw the figures that Markdown pages show, which cannot run code: into book/_static.

    python scripts/make_figures.py            # (re)draw every figure
    python scripts/make_figures.py --check    # exit 1 if a committed figure differs from a new draw

The book's first page (book/intro.md) shows the ViT pipeline: ViT-B/16 on the photo of Grace
Hopper that ships with matplotlib, drawn by ``vitbook.plotting.plot_pipeline`` in the book's
house style and stored as a 2x PNG (``book/_static/pipeline.png``, shown 680 CSS px wide).
tests/test_figures.py draws it again and compares the pixels.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "book" / "_static"
# PNG metadata without the matplotlib version, so that a redraw with the same pixels gives the
# same file.
PNG_METADATA = {"Software": None}


def pipeline_png() -> bytes:
    """The intro's pipeline figure as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from vitbook import ViTConfig
    from vitbook.data import sample_image
    from vitbook.plotting import plot_pipeline
    from vitbook.plotting.style import STYLE

    base = ViTConfig.from_name("ViT-B/16")
    fig = plot_pipeline(base, sample_image("grace_hopper", size=base.img_size))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=STYLE["savefig.dpi"], metadata=PNG_METADATA)
    return buffer.getvalue()


FIGURES = {"pipeline.png": pipeline_png}


def pixels(png: bytes) -> np.ndarray:
    """A PNG's pixels as floats in [0, 1], (H, W, channels)."""
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def differs(committed: bytes, drawn: bytes, tolerance: float = 0.02) -> str | None:
    """Why two drawings of one figure differ, or None when they agree.

    They agree when they have the same size and their pixels differ by at most ``tolerance``
    on average (a font renderer of another release moves a few edge pixels, nothing more).
    """
    old, new = pixels(committed), pixels(drawn)
    if old.shape != new.shape:
        return f"size {old.shape} against a new drawing of {new.shape}"
    mean = float(np.abs(old - new).mean())
    if mean > tolerance:
        return f"pixels differ by {mean:.4f} on average (tolerance {tolerance})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare the committed figures with new drawings; write nothing")
    args = parser.parse_args(argv)
    failed = False
    for name, draw in FIGURES.items():
        path = STATIC / name
        drawn = draw()
        if args.check:
            problem = differs(path.read_bytes(), drawn) if path.exists() else "missing"
            if problem:
                print(f"{path.relative_to(ROOT)}: {problem}; run scripts/make_figures.py")
                failed = True
        else:
            path.write_bytes(drawn)
            print(f"wrote {path.relative_to(ROOT)} ({len(drawn):,} bytes)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
