"""The panels of an interactive figure: where its frames can be cut into pictures that wrap.

Cut into one picture per panel in rows that wrap, a figure drawn for the 680 px column shows
side by side on a desktop and one panel under the other on a phone. :func:`plan` finds
guillotine cuts (rows first, then columns) that cross no panel (:func:`element_boxes`: an axes
with its labels and colour bar, or a figure-level text or legend) and no ink in any frame;
:func:`cut` crops every frame into the plan's pieces.

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import hashlib
import io
import zlib
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "Box",
    "Drawn",
    "Piece",
    "Pictures",
    "Plan",
    "collect",
    "cut",
    "element_boxes",
    "encode",
    "encode_pieces",
    "ink",
    "plan",
]

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels from the top left; x1, y1 excluded
MIN_GAP = 4  # pixels: a gap narrower than this is not a place to cut
PAD = 4  # pixels of background kept on either side of a piece's ink
# The text column of the book in a phone's 390 px window is 358 CSS px: 716 pixels of a frame
# drawn at 2 pixels per CSS px. Pieces up to this wide need not be cut further.
NARROW = 716
WHITE_ENOUGH = 252  # a palette colour this close to white in every channel is shown as white
# zlib's level for the pictures: 7 encodes about four times as fast as 9 (PIL's optimize=True),
# for files 1 to 15 % larger (measured on the book's explorers; every page stays far under 5 MB)
PNG_COMPRESS_LEVEL = 7


@dataclass(frozen=True)
class Piece:
    """One picture of the figure: its slot (a rectangle of the frame) and the columns it shows.

    ``left`` .. ``right``: the part of the slot's width that holds ink in some frame.
    """

    slot: Box
    left: int
    right: int


@dataclass(frozen=True)
class Plan:
    """Where a figure is cut: a tree of rows and columns of pieces.

    ``tree`` is ``("piece", k)`` for ``pieces[k]``, ``("rows", [...])`` for parts stacked from
    top to bottom, or ``("columns", [...])`` for parts side by side, from left to right.
    """

    size: tuple[int, int]  # (W, H) of every frame, in pixels
    tree: tuple
    pieces: tuple[Piece, ...]


@dataclass(frozen=True)
class Pictures:
    """Every frame of an interactive figure as pieces: what its static HTML holds.

    ``variants[k]`` are the distinct PNGs of piece ``k`` over all frames, and ``frames`` maps
    each frame's key (the indices of the values, ``"2,0"``) to the variant of each piece.
    """

    plan: Plan
    variants: tuple[tuple[bytes, ...], ...]
    frames: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Drawn:
    """One drawn frame, kept between drawing it and cutting it: its pixels (compressed), which
    of them hold ink (packed bits) and the boxes of its panels."""

    shape: tuple[int, int, int]
    pixels: bytes
    ink: np.ndarray
    boxes: tuple[Box, ...]

    @classmethod
    def of(cls, rgb: np.ndarray, boxes: list[Box]) -> Drawn:
        return cls(rgb.shape, zlib.compress(rgb.tobytes(), 1), np.packbits(ink(rgb)), tuple(boxes))

    def rgb(self) -> np.ndarray:
        """The frame again, (H, W, 3) uint8."""
        return np.frombuffer(zlib.decompress(self.pixels), np.uint8).reshape(self.shape)


def ink(rgb: np.ndarray) -> np.ndarray:
    """(H, W) bool: the pixels of a frame (H, W, 3) uint8 that differ from its white background."""
    # the three channels and-ed one by one: a tenth of the time of a reduce over the last axis
    return (rgb[..., 0] & rgb[..., 1] & rgb[..., 2]) != 255


def element_boxes(fig: Figure, renderer: object, *, narrow: int = NARROW) -> list[Box]:
    """The boxes that no cut may cross, in the pixels of ``fig`` as ``renderer`` (the canvas's)
    last drew it, from the top left.

    A colour bar stays with its axes when the pair fits in ``narrow`` pixels.
    """
    height = fig.bbox.height

    def box(extent) -> Box:
        return (
            int(np.floor(extent.x0)), int(np.floor(height - extent.y1)),
            int(np.ceil(extent.x1)), int(np.ceil(height - extent.y0)),
        )  # fmt: skip

    found: dict[object, Box] = {}
    colorbars = []
    for ax in fig.axes:
        extent = ax.get_tightbbox(renderer) if ax.get_visible() else None
        if extent is None or extent.width <= 0 or extent.height <= 0:
            continue
        found[ax] = box(extent)
        parent = getattr(getattr(getattr(ax, "_colorbar", None), "mappable", None), "axes", None)
        if parent is not None and parent is not ax:
            colorbars.append((ax, parent))
    for artist in fig.get_children():
        if artist is fig.patch or artist in fig.axes or not artist.get_visible():
            continue
        if hasattr(artist, "get_text") and not artist.get_text():
            continue
        extent = artist.get_window_extent(renderer)
        if extent.width > 0 and extent.height > 0:
            found[artist] = box(extent)
    for colorbar, parent in colorbars:
        if colorbar in found and parent in found:
            a, b = found[colorbar], found[parent]
            joined = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
            if joined[2] - joined[0] <= narrow:
                found[parent] = joined
                del found[colorbar]
    return list(found.values())


def plan(inked: np.ndarray, boxes: list[Box], *, narrow: int = NARROW) -> Plan:
    """Cut a figure into pieces along lines that cross no box and no ink.

    Args:
        inked: (H, W) bool, the pixels that hold ink in at least one frame (see :func:`ink`).
        boxes: the panels of every frame (see :func:`element_boxes`), in the same pixels.
        narrow: the narrowest column's width in frame pixels (716: 358 CSS px at 2x); pieces
            side by side that fit it stay one piece.

    Returns:
        A :class:`Plan`, without the blank border; a figure with nowhere to cut is one piece.

    Example:
        >>> inked = np.zeros((10, 40), bool)
        >>> inked[2:8, 2:12] = inked[2:8, 28:38] = True
        >>> [p.slot for p in plan(inked, [(2, 2, 12, 8), (28, 2, 38, 8)], narrow=20).pieces]
        [(0, 0, 20, 10), (20, 0, 40, 10)]
        >>> [p.slot for p in plan(inked, [(2, 2, 12, 8), (28, 2, 38, 8)], narrow=40).pieces]
        [(0, 0, 40, 10)]
    """
    height, width = inked.shape
    rows, columns = np.flatnonzero(inked.any(axis=1)), np.flatnonzero(inked.any(axis=0))
    if not len(rows):
        return Plan((width, height), ("piece", 0), (Piece((0, 0, width, height), 0, width),))
    figure = (
        max(0, int(columns[0] - PAD) // 2 * 2),
        max(0, int(rows[0] - PAD) // 2 * 2),
        min(width, -(-int(columns[-1] + 1 + PAD) // 2) * 2),
        min(height, -(-int(rows[-1] + 1 + PAD) // 2) * 2),
    )

    def split(region: Box, inside: list[Box]) -> tuple:
        for axis in (1, 0):  # rows first (cut along y), then columns (along x)
            cuts = _cuts(region, inside, inked, axis)
            if cuts:
                x0, y0, x1, y1 = region
                edges = [(y0 if axis else x0), *cuts, (y1 if axis else x1)]
                parts = []
                for lo, hi in zip(edges, edges[1:], strict=False):
                    part = (x0, lo, x1, hi) if axis else (lo, y0, hi, y1)
                    parts.append(split(part, [b for b in inside if _within(b, part)]))
                if axis == 0:
                    parts = _merge(parts, narrow)
                return parts[0] if len(parts) == 1 else ("rows" if axis else "columns", parts)
        return ("piece", region)

    pieces: list[Piece] = []

    def number(node: tuple) -> tuple:
        if node[0] != "piece":
            return (node[0], [number(child) for child in node[1]])
        x0, y0, x1, y1 = region = node[1]
        used = np.flatnonzero(inked[y0:y1, x0:x1].any(axis=0))
        left, right = (x0, x1) if not len(used) else (x0 + used[0], x0 + used[-1] + 1)
        left = max(x0, (left - PAD) // 2 * 2)
        right = min(x1, -(-(right + PAD) // 2) * 2)
        pieces.append(Piece(region, int(left), int(right)))
        return ("piece", len(pieces) - 1)

    fx0, fy0, fx1, fy1 = figure
    clipped = [
        (max(fx0, x0), max(fy0, y0), min(fx1, x1), min(fy1, y1)) for x0, y0, x1, y1 in boxes
    ]
    tree = number(split(figure, [b for b in clipped if b[0] < b[2] and b[1] < b[3]]))
    return Plan((width, height), tree, tuple(pieces))


def _merge(parts: list[tuple], narrow: int) -> list[tuple]:
    """Side by side pieces joined into one while together no wider than ``narrow``."""
    merged: list[tuple] = []
    for part in parts:
        last = merged[-1] if merged else None
        if last and last[0] == part[0] == "piece" and part[1][2] - last[1][0] <= narrow:
            merged[-1] = ("piece", (last[1][0], last[1][1], part[1][2], last[1][3]))
        else:
            merged.append(part)
    return merged


def _within(box: Box, region: Box) -> bool:
    x0, y0, x1, y1 = box
    return x0 >= region[0] and y0 >= region[1] and x1 <= region[2] and y1 <= region[3]


def _cuts(region: Box, boxes: list[Box], inked: np.ndarray, axis: int) -> list[int]:
    """Where to cut ``region`` across ``axis`` (1: horizontal lines at these y, 0: vertical
    lines at these x): the middle of every free run with a panel on both sides, on an even
    pixel so that both pieces keep whole CSS pixels."""
    x0, y0, x1, y1 = region
    lo, hi = (y0, y1) if axis else (x0, x1)
    free = ~inked[y0:y1, x0:x1].any(axis=axis)
    for box in boxes:
        start, stop = (box[1], box[3]) if axis else (box[0], box[2])
        free[max(start, lo) - lo : max(min(stop, hi), lo) - lo] = False
    cuts = []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], free.astype(np.int8), [0]])))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        if start == 0 or stop == len(free) or stop - start < MIN_GAP:
            continue  # a margin at the edge of the region, or too narrow a gap
        middle = lo + (start + stop) // 2 // 2 * 2
        if lo + start <= middle < lo + stop:
            cuts.append(int(middle))
    return cuts


def cut(plan: Plan, frame: np.ndarray) -> list[np.ndarray]:
    """The pieces of one frame ((H, W) or (H, W, C) array), in the order of ``plan.pieces``.

    Raises:
        ValueError: the frame is not the size the plan was made for.

    Example:
        >>> inked = np.zeros((10, 30), bool)
        >>> inked[2:8, 2:12] = inked[2:8, 18:28] = True
        >>> [p.shape for p in cut(plan(inked, [], narrow=20), np.zeros((10, 30, 3)))]
        [(10, 14, 3), (10, 16, 3)]
    """
    if frame.shape[1::-1] != plan.size:
        raise ValueError(
            f"a frame of {frame.shape[1]} x {frame.shape[0]} pixels does not fit a plan for "
            f"{plan.size[0]} x {plan.size[1]}; every frame of a figure must be the same size."
        )
    return [frame[p.slot[1] : p.slot[3], p.left : p.right] for p in plan.pieces]


def encode(rgb: np.ndarray) -> bytes:
    """A picture (H, W, 3) uint8 as a palette PNG: at most 256 colours, no dithering, and a
    palette of the colours used only."""
    from PIL import Image

    quantised = Image.fromarray(np.ascontiguousarray(rgb)).quantize(
        256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
    )
    indices = np.asarray(quantised)
    used = np.flatnonzero(np.bincount(indices.ravel(), minlength=256))
    compact = np.zeros(256, np.uint8)
    compact[used] = np.arange(len(used))  # old palette index -> new
    palette = np.asarray(quantised.getpalette()[: 3 * 256], np.uint8).reshape(-1, 3).copy()
    # The quantiser rounds the white background to (254, 254, 254): back to the page's white.
    palette[(palette >= WHITE_ENOUGH).all(axis=1)] = 255
    height, width = indices.shape
    picture = Image.frombytes("P", (width, height), compact[indices].tobytes())
    picture.putpalette(palette[used].tobytes())
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def encode_pieces(
    plan: Plan, rgb: np.ndarray, encoded: set[tuple[int, bytes]] | None = None
) -> list[tuple[bytes, bytes | None]]:
    """Each piece of one frame as (a digest of its pixels, its PNG).

    A piece already in ``encoded`` ((piece index, digest) of earlier frames) comes back as
    (digest, ``None``); this frame's new pieces are added to it.
    """
    pieces = []
    for k, piece in enumerate(cut(plan, rgb)):
        digest = hashlib.blake2b(piece.tobytes(), digest_size=16).digest()
        if encoded is not None and (k, digest) in encoded:
            pieces.append((digest, None))
            continue
        pieces.append((digest, encode(piece)))
        if encoded is not None:
            encoded.add((k, digest))
    return pieces


def collect(
    plan: Plan, keys: list[str], pieces: list[list[tuple[bytes, bytes | None]]]
) -> Pictures:
    """The :class:`Pictures` of frames ``keys``, given each frame's :func:`encode_pieces`: a
    piece whose pixels repeat another frame's is stored once."""
    variants: list[list[bytes]] = [[] for _ in plan.pieces]
    seen: list[dict[bytes, int]] = [{} for _ in plan.pieces]
    frames = {}
    for key, frame in zip(keys, pieces, strict=True):
        chosen = []
        for k, (digest, png) in enumerate(frame):
            if digest not in seen[k]:
                if png is None:
                    raise ValueError(f"piece {k} of frame {key} repeats no earlier frame's")
                seen[k][digest] = len(variants[k])
                variants[k].append(png)
            chosen.append(seen[k][digest])
        frames[key] = tuple(chosen)
    return Pictures(plan, tuple(map(tuple, variants)), frames)
