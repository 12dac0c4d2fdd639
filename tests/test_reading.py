"""scripts/reading.py and the reading times the book states: the first-read route of the intro
quotes each chapter's core minutes and the minutes to the reader's first trained ViT, and those
numbers must stay what the script measures (an edit that lengthens a core shows up here)."""

from __future__ import annotations

import importlib.util
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
