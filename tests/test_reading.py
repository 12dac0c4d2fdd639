"""scripts/reading.py and the reading times the book states: the first-read route of the intro
quotes each chapter's core minutes and the minutes to the reader's first trained ViT, and those
numbers must stay what the script measures (an edit that lengthens a core shows up here)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INTRO = ROOT / "book" / "intro.md"
# The intro rounds the minutes; a chapter may drift this far before its number must be updated.
SLACK_MINUTES = 2.0


def load_reading():
    spec = importlib.util.spec_from_file_location("reading", ROOT / "scripts" / "reading.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reading():
    return load_reading()


def route() -> dict[str, int]:
    """The intro's first-read route: {"book/<page>": minutes} from its table."""
    section = INTRO.read_text(encoding="utf-8").split("## A first read", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| \{doc\}`(\w+)` \| [^|]+ \| (\d+) \|$", section, re.MULTILINE)
    return {f"book/{page}": int(minutes) for page, minutes in rows}


def test_the_route_lists_the_chapters_through_training_in_reading_order(reading):
    pages = reading.toc_pages()
    listed = list(route())
    assert listed[0] == "book/whole_vit" and listed[-1] == "book/training"
    chapters = pages[pages.index("book/whole_vit") : pages.index("book/training") + 1]
    assert listed == chapters, f"the route lists {listed}; the TOC has {chapters}"


def test_the_route_quotes_each_chapters_core_minutes(reading):
    wrong = {}
    for page, minutes in route().items():
        measured = reading.measure(page)[0].minutes
        if abs(measured - minutes) > SLACK_MINUTES:
            wrong[page] = f"the intro says {minutes}, scripts/reading.py measures {measured:.1f}"
    assert not wrong, f"update the route in book/intro.md: {wrong}"


def test_the_intro_quotes_the_minutes_to_the_first_trained_vit(reading):
    text = INTRO.read_text(encoding="utf-8")
    said = re.search(r"first training loop, in \{doc\}`(\w+)`, is about (\d+) minutes", text)
    assert said, "the intro says how long it is to the reader's first trained ViT"
    first = reading.report()["first_trained_vit"]
    assert first["page"] == f"book/{said[1]}"
    assert abs(first["minutes"] - int(said[2])) <= SLACK_MINUTES, (
        f"the intro says {said[2]} minutes; scripts/reading.py measures {first['minutes']}"
    )
    assert first["minutes"] <= 30, "the reader trains a ViT within the first half hour"


def test_the_core_leaves_out_going_deeper_exercises_and_folded_boxes(reading):
    markdown = (
        "# T\n\nOne two three.\n\n## Going deeper: more\n\nFour five six seven.\n\n"
        "```{admonition} A box\n:class: dropdown\nEight nine.\n```\n\n## Summary\n\nTen."
    )
    words = [
        len(reading._plain(b[1]).split())
        for b in reading._blocks(markdown)
        if b[0] == "para" and not b[2]
    ]
    assert words == [3, 4, 1]  # the box is folded: not counted
    assert reading.NOT_CORE.match("Going deeper: more") and reading.NOT_CORE.match("Exercises")
    assert not reading.NOT_CORE.match("Summary")


# --- what the script refuses, and what its detectors count ----------------------------------------


def _notebook(*cells: dict) -> str:
    return json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


MARKDOWN_CELL = {"cell_type": "markdown", "source": ["# B\n", "\n", "One two."], "metadata": {}}


@pytest.fixture
def small_book(reading, tmp_path, monkeypatch):
    """A book of two pages (a Markdown page and a notebook) that the script reads instead."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "a.md").write_text("# A\n\nOne two three four.\n", encoding="utf-8")
    (tmp_path / "book" / "b.ipynb").write_text(_notebook(MARKDOWN_CELL), encoding="utf-8")
    toc = "format: jb-book\nroot: book/a\nparts:\n  - chapters:\n      - file: book/b\n"
    (tmp_path / "_toc.yml").write_text(toc, encoding="utf-8")
    monkeypatch.setattr(reading, "ROOT", tmp_path)
    assert reading.toc_pages() == ["book/a", "book/b"]
    return tmp_path


def test_the_json_report_is_never_written_into_the_shipped_assets(reading, small_book,
                                                                 monkeypatch, capsys):  # fmt: skip
    from vitbook import _files

    assets = small_book / "assets"
    assets.mkdir()
    shipped = assets / "cifar10_results.json"
    shipped.write_text('{"runs": ["hours of training"]}\n', encoding="utf-8")
    monkeypatch.setattr(_files, "ASSETS", assets)
    with pytest.raises(SystemExit) as refused:
        reading.main(["--json", str(shipped), "--through", "book/b"])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert f"--json {shipped} lies in vitbook/assets" in error and "nothing was written" in error
    assert shipped.read_text(encoding="utf-8") == '{"runs": ["hours of training"]}\n'
    elsewhere = small_book / "runs" / "reading.json"  # a new folder: made, then written
    assert reading.main(["--json", str(elsewhere), "--through", "book/b"]) == 0
    written = json.loads(elsewhere.read_text(encoding="utf-8"))
    assert [p["name"] for p in written["pages"]] == ["book/a", "book/b"]
    assert written["through_minutes"] == pytest.approx(6 / 200)


@pytest.mark.parametrize("toc, said", [
    ("root: book/a\nroot: book/b\n", r"'root' is named twice in one mapping"),
    ("root: book/a\nparts:\n  - chapters:\n      - file: book/b\n      - file: book/a\n",
     r"names a page twice \(book/a at root and parts\[0\]\.chapters\[1\]\), so it would be "
     r"read and counted twice"),
    ("", r"_toc.yml is empty; a jb-book TOC names its first page"),
    ("format: jb-book\n", r"_toc.yml names no root: page"),
    ("root: book/a\nparts:\n  - chapters:\n      - book/b\n",
     r"parts\[0\]\.chapters\[0\] is 'book/b', not a chapter \(file: book/NAME\)"),
])  # fmt: skip
def test_a_table_of_contents_that_would_count_a_page_twice_or_none_is_refused(
    reading, small_book, capsys, toc, said
):
    (small_book / "_toc.yml").write_text(toc, encoding="utf-8")
    with pytest.raises(ValueError, match=said):
        reading.toc_pages()
    with pytest.raises(SystemExit) as refused:
        reading.main([])
    assert refused.value.code == 2 and "_toc.yml" in capsys.readouterr().err


@pytest.mark.parametrize("text, said", [
    (_notebook(MARKDOWN_CELL)[:40], r"b\.ipynb is not a notebook: not valid JSON \(.*\); it was "
                                    r"cut short or damaged; restore it \(git checkout -- "),
    (_notebook(MARKDOWN_CELL, {"cell_type": "code", "source": "x = 1"}),
     r"b\.ipynb: cell 1 has no metadata \(every cell of a notebook has cell_type, source and "
     r"metadata\)"),
    (json.dumps({"metadata": {}}), r"b\.ipynb holds no list of cells"),
])  # fmt: skip
def test_a_damaged_notebook_is_named_with_what_is_wrong(reading, small_book, text, said):
    (small_book / "book" / "b.ipynb").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=said):
        reading.measure("book/b")


def test_a_page_of_the_toc_without_a_file_is_named(reading, small_book):
    (small_book / "book" / "b.ipynb").unlink()
    with pytest.raises(ValueError, match=r"_toc.yml names book/b, but neither .*b\.ipynb nor "):
        reading.report()


def test_through_a_page_that_is_not_in_the_toc_is_refused_listing_the_pages(reading, small_book,
                                                                           capsys):  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        reading.main(["--through", "book/trainng"])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert "--through book/trainng is not a page of _toc.yml; its pages are book/a, book/b." in (
        error
    )
    assert reading.main(["--through", "book/a"]) == 0
    assert "cores from the first page through book/a: 0.0 minutes" in capsys.readouterr().out


@pytest.mark.parametrize("sentence", [
    "A 25-epoch run moves by more than that from one seed to the next.",
    "The spread over five runs is two points.",
    "Its standard deviation is 0.4.",
    "Seeds 0 to 19 agree.",
])  # fmt: skip
def test_the_statistics_pattern_counts_a_seed_a_spread_and_a_standard_deviation(reading, sentence):
    assert reading.STATISTICAL.search(sentence)


def test_a_bibtex_block_is_not_counted_as_code(reading):
    markdown = ("Cite it as\n\n```bibtex\n@book{vitbook,\n  title = {vitbook},\n}\n```\n\n"
                "```python\nx = 1\n```\n\n```{code-block} bibtex\n@misc{x,\n}\n```\n")  # fmt: skip
    code = [b[1] for b in reading._blocks(markdown) if b[0] == "code"]
    assert code == [["x = 1"]]
