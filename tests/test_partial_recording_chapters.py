"""The chapters that show the next CIFAR-10 recording, fed a partial results file at every named
stage of its plan: their own cells and checks, in a kernel, from nothing recorded to all of it.

*The photo recipe ladder* (the next ladder's table) and *Can a ViT beat the CNN that taught it?*
(its CIFAR-10 rows and the paired answers) read ``vitbook.studies.ladder.NEXT_RESULTS_PATH``. A
recording made in GPU sessions ships while incomplete, so each chapter's cells and asserts must
hold at every stage; a cell before each stage points the module's path at a file holding the
first runs of the plan order (``tests/test_ladder.py``'s made-up runs).
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from booktools import ROOT, kernel_env
from test_ladder import PROVENANCE, fake_run, stages

from vitbook.studies.ladder import FIRST_ROWS, recording_order

pytestmark = pytest.mark.book

CHAPTERS = {  # page: (the set-up cells, the cells that show the recording and check it)
    "book/photo_ladder": (("photo-ladder-02", "photo-ladder-status"),
                          ("photos-plan", "photos-plan-check")),
    "book/data_efficient": (("data-efficient-02",), ("data-efficient-42a", "data-efficient-42b")),
}


def cells_by_id(page: str, ids: tuple[str, ...]) -> list[nbformat.NotebookNode]:
    notebook = nbformat.read(ROOT / f"{page}.ipynb", as_version=4)
    found = {cell.get("id"): cell for cell in notebook.cells}
    missing = [i for i in ids if i not in found]
    assert not missing, f"{page} has no cells {missing}: update CHAPTERS"
    # a fresh id for each copy: the same cells run once per stage
    return [nbformat.v4.new_code_cell(found[i].source) for i in ids]


@pytest.mark.parametrize("page", CHAPTERS)
def test_the_chapter_shows_every_stage_of_a_partial_recording(page, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    order = recording_order()
    setup, shown = CHAPTERS[page]
    cells, spans = cells_by_id(page, setup), {}
    for stage, count in stages().items():
        path = tmp_path / f"{count}.json"
        runs = [fake_run(row, seed) for row, seed in order[:count]]
        path.write_text(json.dumps({"runs": runs, "provenance": PROVENANCE}), encoding="utf-8")
        point = (f"import vitbook.studies.ladder\nfrom pathlib import Path\n"
                 f"vitbook.studies.ladder.NEXT_RESULTS_PATH = Path({str(path)!r})")  # fmt: skip
        first = len(cells)
        cells += [nbformat.v4.new_code_cell(point), *cells_by_id(page, shown)]
        spans[stage] = (first, len(cells), count)
    for name, value in kernel_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no figures in these cells
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).metadata
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "book")}}).execute()  # fmt: skip
    for stage, (first, last, count) in spans.items():
        text = "\n".join(
            output.get("text", "") + output.get("data", {}).get("text/plain", "")
            for cell in notebook.cells[first:last] for output in cell.get("outputs", [])
        )  # fmt: skip
        if page == "book/photo_ladder":
            runs = len(order)
            head = (f"Nothing of the plan's {runs} runs is recorded yet." if count == 0
                    else f"Recorded: all {runs} runs of the plan." if count == len(order)
                    else f"Recorded so far: {count} of {runs} runs of the plan")  # fmt: skip
            assert head in text, (stage, text[:500])
            assert f"{count} of {runs} planned runs recorded" in text, stage
        else:
            # five questions: the student against its teacher, the plain ViT and its two
            # controls (the token alone, mean pooling), and the stem against the plain ViT
            answered = len(re.findall(r"is ahead of|cannot tell", text))
            waiting = text.count("not recorded yet")
            assert answered + waiting == 5, (stage, text[-800:])
            assert (waiting == 5) == (count < 3), stage  # the student is the third row
            if count == 0:
                assert text.count("none yet") == len(FIRST_ROWS), stage
        assert "Traceback" not in text and "Error" not in text, (stage, text[-800:])

