"""The figures of the Markdown pages, drawn by scripts/make_figures.py into book/_static: each is
committed, shown where it should be, and still what the script draws."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_figures():
    spec = importlib.util.spec_from_file_location(
        "make_figures", ROOT / "scripts" / "make_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_intro_shows_the_pipeline_figure_as_a_captioned_2x_picture():
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "```{figure} _static/pipeline.png\n" in intro
    figure = intro.split("```{figure} _static/pipeline.png\n", 1)[1].split("\n```", 1)[0]
    assert ":alt: " in figure and ":width: 680px" in figure  # drawn 6.8 in wide, shown 680 px
    pixels = make_figures().pixels((ROOT / "book" / "_static" / "pipeline.png").read_bytes())
    assert pixels.shape[1] == 2 * 680, "a 2x picture of a 680 px figure"


def test_every_committed_figure_is_what_the_script_draws():
    figures = make_figures()
    for name, draw in figures.FIGURES.items():
        committed = (ROOT / "book" / "_static" / name).read_bytes()
        problem = figures.differs(committed, draw())
        assert problem is None, f"book/_static/{name}: {problem}; run scripts/make_figures.py"


def test_a_changed_drawing_is_caught():
    figures = make_figures()
    drawn = figures.pipeline_png()
    assert figures.differs(drawn, drawn) is None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(6.8, 1.9), dpi=100)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=200)
    plt.close(fig)
    assert figures.differs(drawn, buffer.getvalue()) is not None  # a blank picture
