"""explore() and Explorer: live widgets, the static HTML, the MIME bundle, and clear errors."""

import base64
import io
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import ipywidgets
import numpy as np
import pytest
import torch
from booktools import explorer_frames
from matplotlib.figure import Figure
from PIL import Image

from vitbook.widgets.explorer import MAX_FRAMES, explore

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
calls = []


def plot_line(slope, colour="C0"):
    calls.append((slope, colour))
    fig = Figure(figsize=(2, 1.5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, slope], color=colour)
    ax.set_ylim(-3, 3)
    return fig


@pytest.fixture
def lines():
    calls.clear()
    return explore(plot_line, slope=[-2, -1, 0, 1, 2], colour=["C0", "C3"])


def shown_png(picture: ipywidgets.Image) -> bytes:
    assert picture.format == "png" and picture.layout.display != "none"
    return bytes(picture.value)


def png(uri: str) -> Image.Image:
    assert uri.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


# --- live mode -------------------------------------------------------------------------------


def test_live_controls_are_a_slider_for_numbers_and_a_menu_for_strings(lines):
    box = lines.live()
    slider, menu, picture, error = box.children
    assert isinstance(slider, ipywidgets.SelectionSlider)
    assert isinstance(menu, ipywidgets.Dropdown)
    # An Image, not an Output: the Output model fails to load in the classic notebook with
    # widgetsnbextension 3.6.7 to 3.6.10 (tests/test_frontends.py runs both for real).
    assert isinstance(picture, ipywidgets.Image) and isinstance(error, ipywidgets.HTML)
    assert error.value == "" and error.layout.display == "none"
    assert list(slider.options) == ["-2", "-1", "0", "1", "2"] and slider.value == "0"  # middle
    assert list(menu.options) == ["C0", "C3"] and menu.value == "C0"  # first entry
    assert slider.continuous_update is False
    assert (slider.description, menu.description) == ("slope", "colour")
    assert calls == [(0, "C0")]  # the default figure, drawn once
    assert shown_png(picture) == lines.png((2, 0))  # slope 0 (index 2), colour C0


def test_live_moving_a_control_redraws_the_figure(lines):
    slider, menu, picture, _ = lines.live().children
    before = shown_png(picture)
    slider.value = "2"
    assert calls[-1] == (2, "C0")
    after_slider = shown_png(picture)
    assert after_slider != before and after_slider == lines.png((4, 0))  # slope 2
    menu.value = "C3"
    assert calls[-1] == (2, "C3")
    assert shown_png(picture) not in (before, after_slider)
    assert shown_png(picture) == lines.png((4, 1))
    assert Image.open(io.BytesIO(shown_png(picture))).format == "PNG"


def test_live_errors_show_under_the_controls():
    def fails_on_one(value):
        if value == 1:
            raise ValueError("value 1 is not drawable")
        return plot_line(value)

    explorer = explore(fails_on_one, value=[0, 1, 2, 3, 4], defaults={"value": 0})
    slider, picture, error = explorer.live().children
    slider.value = "1"
    assert picture.layout.display == "none" and error.layout.display != "none"
    assert error.value.startswith("<pre") and "Traceback (most recent call last)" in error.value
    assert "ValueError: value 1 is not drawable" in error.value
    slider.value = "2"
    assert shown_png(picture) == explorer.png((2,))
    assert error.value == "" and error.layout.display == "none"


def test_labels_name_the_controls_and_continuous_update_is_passed_on():
    explorer = explore(
        plot_line, slope=range(1, 6), labels={"slope": "slope m"}, continuous_update=True
    )
    slider, _, _ = explorer.live().children
    assert slider.description == "slope m" and slider.continuous_update is True


# --- static HTML and the MIME bundle --------------------------------------------------------


def test_static_html_has_one_frame_per_combination(lines):
    html = lines.to_html()
    frames, first = explorer_frames(html)
    assert set(frames) == {f"{i},{j}" for i in range(5) for j in range(2)}
    assert html.count("data:image/png;base64,") == lines.num_frames == 10  # one panel each
    assert first == "2,0"  # slope 0 (middle value), colour C0 (first entry)
    assert len(set(frames.values())) == 10, "every combination gives its own picture"
    pictures = [png(uri) for pieces in frames.values() for uri in pieces]
    assert all(picture.mode == "P" for picture in pictures), "frames are palette PNGs"
    corners = {picture.convert("RGB").getpixel((0, 0)) for picture in pictures}
    assert corners == {(255, 255, 255)}, "the background is the page's white"
    assert sorted(calls) == sorted((s, c) for s in (-2, -1, 0, 1, 2) for c in ("C0", "C3"))


def test_static_html_controls_match_the_parameters(lines):
    html = lines.to_html()
    assert re.search(r'<input type="range" data-param="slope" min="0" max="4"[^>]*value="2"', html)
    assert "<output>0</output>" in html
    assert re.search(
        r'<select data-param="colour"[^>]*><option value="0" selected>C0</option>'
        r'<option value="1">C3</option></select>',
        html,
    )
    assert "://" not in html, "the static figure must not name any URL"


def test_static_html_starts_at_the_defaults():
    html = explore(
        plot_line,
        slope=[-2, -1, 0, 1, 2],
        colour=["C0", "C3"],
        defaults={"slope": 2, "colour": "C3"},
    ).to_html()
    _, first = explorer_frames(html)
    assert first == "4,1"


def test_mime_bundle_holds_the_widget_view_and_the_static_html(lines):
    bundle = lines._repr_mimebundle_()
    view = bundle[WIDGET_VIEW]
    assert view["version_major"] == 2 and view["version_minor"] == 0
    assert re.fullmatch(r"[0-9a-f]{32}", view["model_id"])
    assert explorer_frames(bundle["text/html"])[0].keys() == {
        f"{i},{j}" for i in range(5) for j in range(2)
    }
    assert bundle["text/plain"] == repr(lines)
    assert repr(lines) == "Explorer(plot_line; slope: 5 values, colour: 2 values; 10 frames)"


def test_colab_gets_the_live_widget_only(lines, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    bundle = lines._repr_mimebundle_()
    assert "text/html" not in bundle and WIDGET_VIEW in bundle
    assert calls == [(0, "C0")], "only the live figure was drawn"


def test_explore_closes_pyplot_figures():
    import matplotlib.pyplot as plt

    def with_pyplot(n):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot(range(n))
        return fig

    before = plt.get_fignums()
    explore(with_pyplot, n=[2, 3, 4]).to_html()
    assert plt.get_fignums() == before


def test_importing_the_widgets_module_does_not_import_ipywidgets():
    probe = "import sys, vitbook.widgets; assert 'ipywidgets' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"slope": []}, ValueError, r"slope has no values; pass at least one"),
        (
            {"slope": [1], "width": [1]},
            ValueError,
            r"plot_line\(\) has no parameter 'width'; its parameters are slope, colour",
        ),
        ({"colour": ["C0"]}, ValueError, r"plot_line\(\) needs 'slope', which got no values"),
        (
            {"slope": [-2, 0, 2], "defaults": {"slope": 5}},
            ValueError,
            r"defaults\['slope'\]=5 is not one of the values of slope: -2, 0, 2",
        ),
        (
            {"slope": [1], "defaults": {"width": 1}},
            ValueError,
            r"defaults names \['width'\], which are not parameters; the parameters are slope",
        ),
        ({"slope": [1], "labels": {"sloep": "m"}}, ValueError, r"labels names \['sloep'\]"),
        (
            {"slope": range(MAX_FRAMES + 1)},
            ValueError,
            r"401 slope = 401 combinations is more than MAX_FRAMES=400",
        ),
        (
            {"slope": range(21), "colour": [f"C{i}" for i in range(20)]},
            ValueError,
            r"21 slope x 20 colour = 420 combinations",
        ),
        ({"slope": 3}, TypeError, r"slope=3 is not a list of values to choose from"),
        ({"slope": "abc"}, TypeError, r"slope='abc' is not a list"),
        ({"slope": torch.zeros(2, 2)}, TypeError, r"is not a list of values"),
        ({"slope": [1, 1.0]}, ValueError, r"slope has repeated values \['1', '1.0'\]|repeated"),
        ({"slope": [1, 2], "dpi": 0}, ValueError, r"dpi=0 must be a positive number"),
        (
            {"slope": [1], "colour": ["C0", "C3"]},
            ValueError,
            r"slope has the single value 1: a control that cannot move.*functools\.partial",
        ),
        ({}, ValueError, r"explore needs at least one parameter"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        explore(plot_line, **kwargs)


def test_plot_fn_must_be_callable_and_return_a_figure():
    with pytest.raises(TypeError, match="plot_fn must be a function returning a Figure"):
        explore("plot_line", slope=[1, 2])
    explorer = explore(lambda slope: None, slope=[1, 2])
    with pytest.raises(TypeError, match="returned NoneType, not a matplotlib Figure"):
        explorer.to_html()


def test_values_can_be_arrays_ranges_and_labelled_dicts():
    assert explore(plot_line, slope=torch.tensor([1.0, 2.0])).params[0].options == (
        ("1", 1.0),
        ("2", 2.0),
    )
    labelled = explore(plot_line, slope={"flat": 0, "steep": 3}, defaults={"slope": 3})
    (param,) = labelled.params
    assert param.options == (("flat", 0), ("steep", 3)) and param.default == 1


# --- in a real kernel -------------------------------------------------------------------------

KERNEL_CELLS = [
    "from matplotlib.figure import Figure\n"
    "from vitbook.widgets import explore\n"
    "calls = []\n\n\n"
    "def plot_line(slope, colour='C0'):\n"
    "    calls.append((slope, colour))\n"
    "    fig = Figure(figsize=(2, 1.5))\n"
    "    ax = fig.add_subplot()\n"
    "    ax.plot([0, 1], [0, slope], color=colour)\n"
    "    ax.set_ylim(-3, 3)\n"
    "    return fig",
    "explorer = explore(plot_line, slope=[-2, 0, 2])\nexplorer",
    "box = explorer.live()\nbox.children[0].value = '2'\nprint(calls)",
]


def test_in_a_kernel_a_moved_slider_redraws_the_image_widget(monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # The notebook kernel is this environment's Python (its ipykernel kernelspec runs `python`).
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in KERNEL_CELLS])
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    shown = nb.cells[1].outputs[0]["data"]
    assert set(shown) >= {WIDGET_VIEW, "text/html", "text/plain"}, "one bundle, both versions"
    # Displayed: the live default (0), then the three static frames; then a new live widget: its
    # default, and 2 once the slider moved.
    drawn = "[(0, 'C0'), (-2, 'C0'), (0, 'C0'), (2, 'C0'), (0, 'C0'), (2, 'C0')]\n"
    assert nb.cells[2].outputs[0]["text"] == drawn
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    model = shown[WIDGET_VIEW]["model_id"]
    assert state[model]["model_name"] == "VBoxModel"
    boxes = [m for m in state.values() if m["model_name"] == "VBoxModel"]
    assert len(boxes) == 2
    _, picture_id, _ = (c.removeprefix("IPY_MODEL_") for c in boxes[-1]["state"]["children"])
    picture = state[picture_id]
    assert picture["model_name"] == "ImageModel" and picture["state"]["format"] == "png"
    (buffer,) = [b for b in picture["buffers"] if b["path"] == ["value"]]
    shown_now = Image.open(io.BytesIO(base64.b64decode(buffer["data"])))
    local = explore(plot_line, slope=[-2, 0, 2])
    expected = Image.open(io.BytesIO(local.png((2,))))
    default = Image.open(io.BytesIO(local.png((1,))))
    assert np.array_equal(np.asarray(shown_now), np.asarray(expected))
    assert not np.array_equal(np.asarray(shown_now), np.asarray(default))


def test_static_figures_can_be_switched_off_for_runs_that_only_execute(lines, monkeypatch):
    monkeypatch.setenv("VITBOOK_STATIC_FIGURES", "0")
    bundle = lines._repr_mimebundle_()
    assert "text/html" not in bundle and WIDGET_VIEW in bundle
    monkeypatch.setenv("VITBOOK_STATIC_FIGURES", "1")
    assert "text/html" in lines._repr_mimebundle_()


def test_frames_drawn_by_forked_workers_equal_frames_drawn_one_by_one(lines):
    one_by_one = lines.pictures(workers=1)
    side_by_side = lines.pictures(workers=2)  # 10 frames: one worker per 5... at least 8 needed
    assert side_by_side == one_by_one
    many = explore(plot_line, slope=list(range(-8, 9)), colour=["C0", "C3"])  # 34 frames
    assert many.pictures(workers=2) == many.pictures(workers=1)


def test_a_frame_holds_the_pixels_that_savefig_would_write(lines):
    indices = (3, 1)  # slope 1, colour C3
    saved = Image.open(io.BytesIO(lines.png(indices))).convert("RGB")
    assert np.array_equal(lines.pixels(indices), np.array(saved))


def test_a_failing_plot_fn_in_a_worker_raises_in_the_caller():
    def broken(slope):
        if slope == 7:
            raise RuntimeError("slope 7 is not drawable")
        return plot_line(slope)

    explorer = explore(broken, slope=list(range(20)))
    with pytest.raises(RuntimeError, match="slope 7 is not drawable"):
        explorer.pictures(workers=2)


def test_frame_workers_are_read_from_the_environment_and_checked(lines, monkeypatch):
    monkeypatch.setenv("VITBOOK_FRAME_WORKERS", "two")
    with pytest.raises(ValueError, match="VITBOOK_FRAME_WORKERS='two' must be a whole number"):
        lines.pictures()
    monkeypatch.setenv("VITBOOK_FRAME_WORKERS", "1")
    assert lines.pictures() == lines.pictures(workers=1)
    for workers in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"workers=.* must be a positive whole number"):
            lines.pictures(workers=workers)
