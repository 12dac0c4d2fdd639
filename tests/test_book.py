"""The book: its structure, configuration and strict build, and every notebook run by nbval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from booktools import (
    CELL_TIMEOUT_S,
    ROOT,
    book_sources,
    execute_notebook,
    read_yaml,
    source_files,
    tail,
    toc_entries,
    toc_notebooks,
)

NOTEBOOKS = [path for path in book_sources() if path.suffix == ".ipynb"]
COLAB_INSTALL = re.compile(
    r'^import sys\n\nif "google\.colab" in sys\.modules:'
    r"  # tested with torch 2\.13 and Colab's 2\.11\n"  # as pyproject.toml and the README say
    r'    %pip install -q "vitbook @ git\+(?P<url>[^"@]+)"\n?$'
)
FENCE = re.compile(r"^\s*(```|~~~|:::)")
# The part of _toc.yml whose pages are chapters: each keeps a Common pitfalls and an Exercises
# section. The first page (the intro), the appendix (comparing runs, how the numbers were made,
# the notation and glossary, the interactive figures) and the bibliography are reference pages,
# not chapters, and have neither.
CHAPTER_PART = "Building a Vision Transformer"
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
PITFALL_BOX = re.compile(r"^\s*```\{admonition\} Common pitfall")


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def load_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    text = cell["source"]
    return text if isinstance(text, str) else "".join(text)


def titles(markdown: str) -> list[str]:
    """Top-level `# ` headings of a markdown text, ignoring fenced blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            found.append(line[2:].strip())
    return found


def page_titles(path: Path) -> list[str]:
    if path.suffix == ".md":
        return titles(path.read_text(encoding="utf-8"))
    cells = load_notebook(path)["cells"]
    return [t for cell in cells if cell["cell_type"] == "markdown" for t in titles(source(cell))]


def chapter_notebooks() -> list[Path]:
    """The notebooks of the chapter part of _toc.yml, in reading order (none if it is missing)."""
    parts = read_yaml("_toc.yml").get("parts", [])
    chapters = [
        c for part in parts if part.get("caption") == CHAPTER_PART for c in part["chapters"]
    ]
    return [ROOT / f"{chapter['file']}.ipynb" for chapter in chapters]


def outline(notebook: Path) -> list[tuple]:
    """A notebook as a list of events, in order: ("heading", level, text) and ("pitfall",) for
    markdown outside fenced blocks (a pitfall box is the fence that opens it), ("code", cell)."""
    events: list[tuple] = []
    for cell in load_notebook(notebook)["cells"]:
        if cell["cell_type"] == "code":
            events.append(("code", cell))
            continue
        if cell["cell_type"] != "markdown":
            continue
        fenced = False
        for line in source(cell).splitlines():
            if FENCE.match(line):
                if not fenced and PITFALL_BOX.match(line):
                    events.append(("pitfall",))
                fenced = not fenced
            elif not fenced and (match := HEADING.match(line)):
                events.append(("heading", len(match[1]), match[2]))
    return events


def section(events: list[tuple], title: str) -> list[tuple]:
    """The events under the `## title` heading, up to the next heading of level 1 or 2."""
    start = next(i for i, event in enumerate(events) if event[:3] == ("heading", 2, title))
    end = next(
        (
            i
            for i, event in enumerate(events[start + 1 :], start + 1)
            if event[0] == "heading" and event[1] <= 2
        ),
        len(events),
    )
    return events[start + 1 : end]


# --- _toc.yml and book/ ---------------------------------------------------------------------


def test_toc_lists_every_page_in_book_and_nothing_else(toc):
    entries = toc_entries(toc)
    assert toc["format"] == "jb-book"
    assert len(entries) == len(set(entries)), f"listed twice in _toc.yml: {entries}"
    outside = [entry for entry in entries if not entry.startswith("book/")]
    assert not outside, f"_toc.yml lists pages outside book/: {outside}"
    resolved = {entry: source_files(entry) for entry in entries}
    missing = [entry for entry, files in resolved.items() if not files]
    assert not missing, f"_toc.yml lists pages that do not exist: {missing}"
    ambiguous = [entry for entry, files in resolved.items() if len(files) > 1]
    assert not ambiguous, f"both a .md and an .ipynb exist for: {ambiguous}"
    listed = {relative(files[0]) for files in resolved.values()}
    unlisted = sorted({relative(path) for path in book_sources()} - listed)
    assert not unlisted, f"pages in book/ missing from _toc.yml: {unlisted}"


@pytest.mark.parametrize("page", book_sources(), ids=relative)
def test_page_has_exactly_one_title(page):
    found = page_titles(page)
    assert len(found) == 1, f"{relative(page)} needs one top-level '# ' title, has {found}"


def test_the_chapter_part_of_the_toc_lists_the_chapters(toc):
    captions = [part.get("caption") for part in toc.get("parts", [])]
    assert captions.count(CHAPTER_PART) == 1, (
        f"_toc.yml needs one part captioned {CHAPTER_PART!r} (the chapters); it has {captions}"
    )
    chapters = chapter_notebooks()
    assert len(chapters) >= 5, f"the part {CHAPTER_PART!r} lists only {chapters}"
    missing = [relative(path) for path in chapters if not path.is_file()]
    assert not missing, f"every chapter is a notebook; no notebook for {missing}"


def is_stub(code: str) -> bool:
    """A cell for the reader to complete: a function that raises NotImplementedError, or only
    names set to None (``tokens_p2 = None  # N for ...``)."""
    if "raise NotImplementedError" in code:
        return True
    statements = [
        line.split("#")[0].strip() for line in code.splitlines() if line.split("#")[0].strip()
    ]
    return bool(statements) and all(
        re.fullmatch(r"[A-Za-z_]\w*\s*=\s*None", line) for line in statements
    )


def test_a_stub_is_told_from_other_code():
    assert is_stub("def f(x):\n    raise NotImplementedError('Exercise 1')")
    assert is_stub("seven = None  # paste the ink\nbar = None")
    assert not is_stub("seven = [[0] * 8] * 8")
    assert not is_stub("x = None\nprint(x)")
    assert not is_stub("# only a comment")


@pytest.mark.parametrize("chapter", chapter_notebooks(), ids=relative)
def test_chapter_keeps_its_pitfalls_and_exercises(chapter):
    """Every chapter has one `## Common pitfalls` section with at least one pitfall box, and one
    `## Exercises` section with at least two `### Exercise` subsections, each a stub that raises
    NotImplementedError, a solution hidden with the `hide-cell` tag, and after it a check that
    asserts (BOOK.md, "A chapter")."""
    name = relative(chapter)
    events = outline(chapter)
    level_2 = [event[2] for event in events if event[:2] == ("heading", 2)]
    for title in ("Common pitfalls", "Exercises"):
        assert level_2.count(title) == 1, (
            f"{name} needs one '## {title}' heading, has {level_2.count(title)}: {level_2}"
        )
    pitfalls = section(events, "Common pitfalls")
    assert ("pitfall",) in pitfalls, (
        f"{name}: the Common pitfalls section has no '```{{admonition}} Common pitfall: ...' box"
    )
    exercises = section(events, "Exercises")
    starts = [
        i
        for i, event in enumerate(exercises)
        if event[:2] == ("heading", 3) and event[2].startswith("Exercise")
    ]
    assert len(starts) >= 2, f"{name}: the Exercises section has {len(starts)} '### Exercise'"
    for start, end in zip(starts, [*starts[1:], len(exercises)], strict=True):
        title = exercises[start][2]
        cells = [event[1] for event in exercises[start + 1 : end] if event[0] == "code"]
        hidden = [
            i for i, cell in enumerate(cells) if "hide-cell" in cell["metadata"].get("tags", [])
        ]
        stubs = [i for i, cell in enumerate(cells) if is_stub(source(cell))]
        assert stubs, (
            f"{name}, {title!r}: no stub cell (one that raises NotImplementedError, or that only "
            "sets the names to fill in to None)"
        )
        assert hidden, f"{name}, {title!r}: no solution cell tagged hide-cell"
        assert stubs[0] < hidden[0], f"{name}, {title!r}: the stub must come before the solution"
        checks = [
            cell
            for cell in cells[hidden[-1] + 1 :]
            if "hide-cell" not in cell["metadata"].get("tags", []) and "assert" in source(cell)
        ]
        assert checks, f"{name}, {title!r}: no check cell with an assert after the solution"


# --- notebooks as committed -----------------------------------------------------------------


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=relative)
def test_notebook_is_committed_without_outputs(notebook):
    code_cells = [cell for cell in load_notebook(notebook)["cells"] if cell["cell_type"] == "code"]
    with_outputs = [i for i, cell in enumerate(code_cells) if cell.get("outputs")]
    with_counts = [
        i for i, cell in enumerate(code_cells) if cell.get("execution_count") is not None
    ]
    assert not with_outputs, f"code cells {with_outputs} of {relative(notebook)} have outputs"
    assert not with_counts, (
        f"code cells {with_counts} of {relative(notebook)} have execution counts"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=relative)
def test_notebook_uses_the_python3_kernel(notebook):
    assert load_notebook(notebook)["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=relative)
def test_notebook_starts_with_the_colab_install_cell(notebook, book_config):
    first = load_notebook(notebook)["cells"][0]
    assert first["cell_type"] == "code", f"{relative(notebook)} must start with a code cell"
    assert "remove-cell" in first["metadata"].get("tags", []), "tag the install cell remove-cell"
    match = COLAB_INSTALL.match(source(first))
    assert match, (
        f"first cell of {relative(notebook)} is not the Colab install cell:\n{source(first)}"
    )
    assert match["url"] == book_config["repository"]["url"], (
        "the install cell's URL must equal repository.url in _config.yml"
    )


def test_the_tested_torch_releases_are_said_alike_where_readers_look():
    """The install cells (checked above), the README and pyproject.toml name the same releases:
    the pinned one that every test run uses and Colab's."""
    pinned = re.search(r"^torch==([\d.]+)", (ROOT / "constraints.txt").read_text(), re.M)[1]
    about = (ROOT / "README.md").read_text().split("## About torch", 1)[1].split("\n## ", 1)[0]
    assert pinned == "2.13.0" and f"**{pinned}**" in about
    assert "**2.11.0**, Colab's release" in about
    assert '"torch>=2.11",' in (ROOT / "pyproject.toml").read_text()


# --- _config.yml ----------------------------------------------------------------------------


def test_config_executes_every_notebook_and_fails_on_errors(book_config):
    execute = book_config["execute"]
    assert execute["execute_notebooks"] == "force"
    assert execute["raise_on_error"] is True
    assert execute.get("allow_errors", False) is False
    assert execute["timeout"] == CELL_TIMEOUT_S
    assert book_config["only_build_toc_files"] is True


def test_config_links_to_the_repository_and_colab(book_config):
    repository = book_config["repository"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository["url"])
    assert repository["branch"] == "main"
    assert repository["path_to_book"] == ""
    launch = book_config["launch_buttons"]
    assert launch["colab_url"] == "https://colab.research.google.com"
    assert not launch.get("binderhub_url") and not launch.get("thebe")
    assert book_config["html"]["use_repository_button"] is True
    assert book_config["html"]["use_issues_button"] is True
    for bibfile in book_config["bibtex_bibfiles"]:
        assert (ROOT / bibfile).is_file(), f"bibtex file {bibfile} is missing"


def test_config_keeps_pages_offline(book_config):
    sphinx = book_config["sphinx"]
    assert "sphinx-mathjax-offline" in sphinx["extra_extensions"]
    assert sphinx["local_extensions"] == {
        "offline_book": "book/_ext",
        "figure_guard": "book/_ext",
        "colab": "book/_ext",
        "reader": "book/_ext",
    }
    config = sphinx["config"]
    assert "://" not in config["mathjax_path"], "MathJax is served from the build, not a CDN"
    assert config["nb_ipywidgets_js"] == {}, "no widget manager or require.js from a CDN"
    assert ["html", "application/vnd.jupyter.widget-view+json", None] in config[
        "nb_mime_priority_overrides"
    ], "the HTML book shows the static version of an interactive figure"


def test_offline_check_flags_remote_and_missing_resources(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "book" / "_ext"))
    import offline_book
    (tmp_path / "here.js").write_text("", encoding="utf-8")
    page = tmp_path / "page.html"
    page.write_text(
        '<script src="here.js?v=1"></script><script src="https://cdn.example.org/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/f.css"><link rel="canonical" '
        'href="https://example.org/"><img src="data:image/png;base64,AAAA"><img src="gone.png">'
        '<a href="https://example.org/elsewhere">a link is not a request</a>',
        encoding="utf-8",
    )
    assert offline_book.problems(page) == [
        "loads https://cdn.example.org/x.js from another machine",
        "loads //fonts.example.org/f.css from another machine",
        "refers to gone.png, which is not in the build",
    ]


# --- the strict build and the executed notebooks --------------------------------------------


@pytest.mark.book
@pytest.mark.xdist_group("book")  # with the other users of the build, on one pytest-xdist worker
def test_book_builds_with_every_toc_page(built_book, toc):
    assert (built_book / "index.html").is_file()
    missing = [entry for entry in toc_entries(toc) if not (built_book / f"{entry}.html").is_file()]
    assert not missing, f"pages missing from {built_book}: {missing}"


@pytest.mark.xdist_group("book")
def test_the_tests_that_share_the_build_share_one_worker(request):
    """Under pytest-xdist's ``--dist loadgroup``, every test of the group "book" runs on one
    worker, which builds the book once; without the grouping, the other worker would sit waiting
    for the build's lock and then repeat the browser tests."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup (python3 tasks.py test does)")
    assert request.node.nodeid.endswith("@book"), (
        f"pytest-xdist did not group {request.node.nodeid!r}: with pytest 9.2 its loadgroup "
        "mode stops grouping (pytest-dev/pytest-xdist#1386); keep the pytest pin of "
        "constraints.txt"
    )


@pytest.mark.book
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("notebook", toc_notebooks(), ids=relative)
def test_built_notebook_page_is_executed_and_opens_in_colab(notebook, built_book, book_config):
    page = relative(notebook.with_suffix(".html"))
    html = (built_book / page).read_text(encoding="utf-8")
    assert "cell_output" in html, f"{page} shows no executed output"
    repository = book_config["repository"]
    owner_repo = repository["url"].removeprefix("https://github.com/")
    # The button opens the generated, plain-Markdown copy on the colab branch (book/_ext/colab.py),
    # never the MyST source on the main branch.
    branch = book_config["sphinx"]["config"]["colab_branch"]
    assert branch != repository["branch"]
    colab = f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/"
    assert f'href="{colab}{relative(notebook)}"' in html, f"{page} has no launch button to {colab}"
    assert f"/blob/{repository['branch']}/{relative(notebook)}" not in html


@pytest.mark.book
@pytest.mark.parametrize("notebook", toc_notebooks(), ids=relative)
def test_notebook_runs_under_nbval(notebook):
    # Once per test run: the strict build reads the notebook as this run executed it (and draws
    # nothing again), so the two share one execution (tests/booktools.py).
    execution = execute_notebook(notebook)
    assert execution.returncode == 0, (
        f"nbval failed on {relative(notebook)} (exit code {execution.returncode}):\n"
        f"{tail(execution.log)}"
    )
    assert execution.executed.is_file(), f"nbval kept no executed copy of {relative(notebook)}"
