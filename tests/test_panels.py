"""vitbook.widgets._panels: where an interactive figure is cut into pictures, and what the cuts
keep."""

import base64
import io
import re

import numpy as np
import pytest
from booktools import explorer_frames
from matplotlib.figure import Figure
from PIL import Image

from vitbook.plotting.style import PNG_SCALE
from vitbook.widgets import _panels
from vitbook.widgets._static_page import render
from vitbook.widgets.explorer import explore


def picture(uri: str) -> np.ndarray:
    raw = uri.split(",", 1)[1]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(raw))).convert("RGB"))


def blank(height: int, width: int) -> np.ndarray:
    return np.zeros((height, width), bool)


def test_panels_side_by_side_become_columns_and_a_grid_is_read_row_by_row():
    inked = blank(60, 100)
    boxes = [(4, 4, 44, 26), (56, 4, 96, 26), (4, 34, 44, 56), (56, 34, 96, 56)]
    for x0, y0, x1, y1 in boxes:
        inked[y0:y1, x0:x1] = True
    plan = _panels.plan(inked, boxes, narrow=40)
    assert plan.tree == (
        "rows",
        [("columns", [("piece", 0), ("piece", 1)]), ("columns", [("piece", 2), ("piece", 3)])],
    )
    slots = [piece.slot for piece in plan.pieces]
    assert slots == [(0, 0, 50, 30), (50, 0, 100, 30), (0, 30, 50, 60), (50, 30, 100, 60)]
    assert [(p.left, p.right) for p in plan.pieces] == [(0, 48), (52, 100), (0, 48), (52, 100)]


def test_no_cut_crosses_a_panel_or_ink():
    inked = blank(40, 100)
    inked[10:30, 5:45] = inked[10:30, 55:95] = True
    # One box spans both panels (a title over both, say): no vertical cut is left.
    assert _panels.plan(inked, [(5, 2, 95, 30)], narrow=10).tree == ("piece", 0)
    inked[20, 45:55] = True  # a line of ink joins them: no cut either, boxes or not
    assert _panels.plan(inked, [], narrow=10).tree == ("piece", 0)


def test_a_title_stays_with_its_panel():
    """Without its axes' box a title could be cut off its panel and wrap elsewhere."""
    inked = blank(60, 100)
    inked[2:8, 10:40] = inked[2:8, 60:90] = True  # two titles
    inked[14:58, 5:45] = inked[14:58, 55:95] = True  # two panels under them
    with_boxes = _panels.plan(inked, [(5, 2, 45, 58), (55, 2, 95, 58)], narrow=10)
    assert with_boxes.tree == ("columns", [("piece", 0), ("piece", 1)])
    assert [p.slot[1::2] for p in with_boxes.pieces] == [(0, 60), (0, 60)]


def test_narrow_neighbours_stay_one_picture():
    inked = blank(20, 120)
    for x in range(4, 120, 20):
        inked[4:16, x : x + 12] = True
    assert len(_panels.plan(inked, [], narrow=1000).pieces) == 1
    assert len(_panels.plan(inked, [], narrow=64).pieces) == 2  # 3 of 20 px, then 3 more
    assert len(_panels.plan(inked, [], narrow=8).pieces) == 6


def test_the_blank_border_is_left_out_and_cuts_fall_on_even_pixels():
    inked = blank(101, 201)
    inked[30:70, 41:91] = inked[30:70, 121:171] = True
    plan = _panels.plan(inked, [], narrow=10)
    (x0, y0, _, _), (_, _, x1, y1) = plan.pieces[0].slot, plan.pieces[-1].slot
    assert (x0, y0, x1, y1) == (36, 26, 176, 74)
    edges = [v for p in plan.pieces for v in (*p.slot, p.left, p.right)]
    assert all(v % 2 == 0 for v in edges), edges


def test_cutting_refuses_a_frame_of_another_size():
    plan = _panels.plan(blank(10, 20), [])
    with pytest.raises(ValueError, match="a frame of 30 x 10 pixels does not fit a plan for 20"):
        _panels.cut(plan, np.zeros((10, 30, 3), np.uint8))


def test_encoding_keeps_white_white_and_stores_only_the_colours_used():
    rgb = np.full((20, 30, 3), 255, np.uint8)
    rgb[5:15, 5:25] = (31, 119, 180)
    decoded = Image.open(io.BytesIO(_panels.encode(rgb)))
    assert decoded.mode == "P" and len(decoded.getpalette()) == 2 * 3
    assert np.array_equal(np.asarray(decoded.convert("RGB")), rgb)


# --- an explorer cut into pieces ------------------------------------------------------------


def two_panels(shift: int, shade: str = "C0") -> Figure:
    """Left: a fixed picture; right: a bar that moves with ``shift``, coloured ``shade``."""
    fig = Figure(figsize=(6.8, 2.2), layout="constrained")
    still, moving = fig.subplots(1, 2)
    still.imshow(np.arange(16).reshape(4, 4), cmap="Greys")
    still.set_title("the same in every frame")
    moving.bar([shift], [1], color=shade)
    moving.set(xlim=(-1, 5), title="a bar that moves")
    return fig


@pytest.fixture(scope="module")
def panels():
    return explore(two_panels, shift=range(5), shade=["C0", "C3"])


@pytest.fixture(scope="module")
def drawn(panels):
    """The figure's pictures and its static HTML, drawn once for the tests below."""
    pictures = panels.pictures(workers=1)
    return pictures, render(panels.params, pictures, description=panels.description)


def test_a_figure_of_two_panels_is_two_pictures_and_a_fixed_one_is_stored_once(drawn):
    pictures, _ = drawn
    assert pictures.plan.tree == ("columns", [("piece", 0), ("piece", 1)])
    assert [len(variants) for variants in pictures.variants] == [1, 10]
    assert {chosen[0] for chosen in pictures.frames.values()} == {0}


def test_the_pieces_of_a_frame_are_its_pixels(panels, drawn):
    pictures, html = drawn
    frames, first = explorer_frames(html)
    plan = pictures.plan
    for key in (first, "4,1"):
        rgb = panels.pixels(tuple(int(i) for i in key.split(",")))
        pieces = _panels.cut(plan, rgb)
        for piece, uri, expected in zip(plan.pieces, frames[key], pieces, strict=True):
            shown = picture(uri)
            assert shown.shape == expected.shape, piece
            # palette-quantised: the colours close, white exactly
            error = np.abs(shown.astype(int) - expected)
            assert error.max() <= 32 and error.mean() < 2
            assert (shown[~_panels.ink(expected)] == 255).all()


def test_the_html_lays_the_pieces_out_as_drawn(drawn):
    pictures, html = drawn
    plan = pictures.plan
    x0 = plan.pieces[0].slot[0]
    x1 = plan.pieces[-1].slot[2]
    assert f'<div class="vbx-figure" style="width:{(x1 - x0) / PNG_SCALE:g}px">' in html
    assert html.count('<div class="vbx-columns">') == 1
    widths = re.findall(r'<img class="vbx-piece" data-piece="\d" src="[^"]+" width="(\d+)"', html)
    assert [int(w) for w in widths] == [(p.right - p.left) // PNG_SCALE for p in plan.pieces]
    alts = re.findall(r'alt="([^"]+)"', html)
    assert alts == [
        "Left: a fixed picture; right: a bar that moves with ``shift``, coloured ``shade`` "
        f"(shift = 2, shade = C0; part {k} of 2)"
        for k in (1, 2)
    ]


def test_frames_of_different_sizes_are_refused():
    def grows(width):
        fig = Figure(figsize=(width, 1))
        fig.add_subplot().plot([0, 1])
        return fig

    with pytest.raises(ValueError, match=r"plot_fn drew frames of 2 sizes .* same figsize"):
        explore(grows, width=[2, 3]).pictures(workers=1)
