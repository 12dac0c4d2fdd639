"""Figures survive MPLBACKEND=Agg, and a build that would publish a page without them fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from booktools import ROOT, kernel_env, tail, venv_executable

sys.path.insert(0, str(ROOT / "book" / "_ext"))
from figure_guard import figure_problem  # noqa: E402

FIGURE = "<Figure size 640x480 with 1 Axes>"


@pytest.mark.parametrize(
    ("source", "metadata", "outputs", "problem"),
    [
        ("plt.plot([1, 2])\nplt.show()", {}, [{"image/png": "", "text/plain": FIGURE}], None),
        ("explorer", {}, [{"text/html": '<div><img src="data:..."></div>'}], None),
        ("playground", {}, [{"text/html": '<div><canvas width="8"></canvas></div>'}], None),
        ("x = 1", {}, [{"text/plain": "1"}], None),
        ("plot_sincos(1, 2)", {}, [{"text/plain": FIGURE}], "a figure's text form"),
        ("plt.plot([1, 2])\nplt.show()", {}, [], "calls plt.show() but produced no image"),
        (
            "fig.show()",
            {},
            [{"stderr": "FigureCanvasAgg is non-interactive, and thus cannot be shown"}],
            "matplotlib could not show its figure",
        ),
        (
            "draw()",
            {"mystnb": {"figure": {"caption": "A map."}}},
            [{"text/plain": "None"}],
            "a figure caption (mystnb.figure) but no image output",
        ),
    ],
)
def test_the_guard_finds_cells_that_draw_a_figure_and_show_none(source, metadata, outputs, problem):
    found = figure_problem(source, metadata, outputs)
    if problem is None:
        assert found is None, found
    else:
        assert found is not None and problem in found, found


def notebook(*cells: str) -> dict:
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# A page"},
            *(
                {
                    "cell_type": "code",
                    "metadata": {},
                    "source": c,
                    "outputs": [],
                    "execution_count": None,
                }
                for c in cells
            ),
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.mark.book
def test_a_build_under_agg_keeps_its_figures_and_fails_on_a_cell_without_one(tmp_path):
    (tmp_path / "_config.yml").write_text(
        "title: guard\nonly_build_toc_files: true\n"
        "execute:\n  execute_notebooks: force\n  timeout: 120\n"
        f"sphinx:\n  local_extensions:\n    figure_guard: {ROOT / 'book' / '_ext'}\n"
    )
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: good\nchapters:\n  - file: bad\n")
    draw = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    (tmp_path / "good.ipynb").write_text(json.dumps(notebook(draw)))
    # The bad page's kernel switches to Agg itself, as a notebook could: its figure is lost.
    (tmp_path / "bad.ipynb").write_text(json.dumps(notebook("%matplotlib agg", draw)))
    env = {**kernel_env(), "MPLBACKEND": "Agg"}  # what a headless CI runner may set
    build = [venv_executable("jupyter-book"), "build", str(tmp_path), "-W", "-n", "--keep-going"]
    result = subprocess.run(build, env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode != 0, f"the guard let a page without its figure through:\n{tail(log)}"
    assert "bad: code cell 2 draws a figure but shows no picture" in log, tail(log)
    assert "good: code cell" not in log, tail(log)
    good = (tmp_path / "_build" / "html" / "good.html").read_text(encoding="utf-8")
    assert "<img alt=" in good or "<img src=" in good, (
        "the Agg setting cost the good page its figure"
    )


def test_use_book_style_draws_inline_at_2x_even_under_agg(monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from vitbook.plotting import use_book_style\nuse_book_style()"
            ),
            nbformat.v4.new_code_cell(
                "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"
            ),
        ]
    )
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    (shown,) = nb.cells[1].outputs
    assert "image/png" in shown["data"], shown
    width = shown["metadata"]["image/png"]["width"]  # shown at half the PNG's pixels
    assert 0 < width <= 680
