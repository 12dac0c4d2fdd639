"""The Colab-ready notebooks (book/_ext/colab.py): plain Markdown, every code cell, working links.

The chapters are MyST; front ends other than the HTML book show MyST as raw text. The converter
writes a plain copy of each chapter. These tests check the copies of the real chapters (no role or
directive left, every code cell in order, solutions collapsed, the install cell first, links to
pages that exist), the conversion rules on small inputs, the Colab launch button's rewrite, and
that a generated chapter runs top to bottom in a kernel.
"""

from __future__ import annotations

import json
import re
import sys
import time
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from booktools import ROOT, kernel_env, read_yaml, toc_entries

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import colab  # noqa: E402  (book/_ext is Sphinx's extension folder, not a package)

LINK = re.compile(r"\]\((?P<url>[^)\s]+)\)")
ROLE = re.compile(r"\{[a-zA-Z][\w:+-]*\}`")
DIRECTIVE_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{")
TARGET = re.compile(r"^\s*\([^()\s]+\)=\s*$", re.M)
PLAIN_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def text(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def outside_code(markdown: str) -> list[str]:
    """Lines of Markdown outside code blocks, with code spans blanked out."""
    lines, fence = [], None
    for line in markdown.splitlines():
        opening = PLAIN_FENCE.match(line)
        if fence is None and opening:
            fence = opening[1]
            continue
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            continue
        lines.append(re.sub(r"(`+)(?!\{).+?\1", "``", line))
    return lines


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """{page: (source notebook, generated notebook)} for every notebook chapter of _toc.yml."""
    out = tmp_path_factory.mktemp("colab")
    written = colab.write_all(out)
    pairs = {}
    for path in written:
        page = path.relative_to(out).with_suffix("").as_posix()
        source = json.loads((ROOT / f"{page}.ipynb").read_text(encoding="utf-8"))
        pairs[page] = (source, json.loads(path.read_text(encoding="utf-8")))
    return pairs


def test_every_notebook_chapter_is_written_as_a_valid_notebook(generated):
    import nbformat

    notebooks = [e for e in toc_entries(read_yaml("_toc.yml")) if (ROOT / f"{e}.ipynb").exists()]
    assert list(generated) == notebooks and len(notebooks) >= 10
    for _, notebook in generated.values():
        nbformat.validate(nbformat.from_dict(notebook))  # raises ValidationError


def test_no_myst_role_or_directive_survives(generated):
    left = []
    for page, (_, notebook) in generated.items():
        for i, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            body = text(cell)
            left += [(page, i, line) for line in body.splitlines() if DIRECTIVE_FENCE.match(line)]
            left += [(page, i, m[0]) for m in TARGET.finditer(body)]
            # A role's markup anywhere but inside a code span of its own: `{cite}` is text.
            left += [(page, i, m[0]) for m in re.finditer(r"(?<!`)\{[a-z][\w:]*\}`", body)]
            for line in outside_code(body):
                left += [(page, i, line) for _ in ROLE.finditer(line)]
                if re.match(r"^\s*:[\w-]+:", line):  # a directive's option line
                    left.append((page, i, line))
    assert not left, f"MyST left in the Colab notebooks (page, cell, text): {left[:10]}"
    sources = "".join(text(c) for s, _ in generated.values() for c in s["cells"])
    assert "{cite}`" in sources and "```{admonition}" in sources, "the sources are still MyST"


def test_every_code_cell_is_there_in_order_and_the_install_cell_first(generated):
    commit = colab.source_commit(ROOT)
    assert commit, "the tests run in a git checkout"
    url = read_yaml("_config.yml")["repository"]["url"]
    for page, (source, notebook) in generated.items():
        theirs = [text(c) for c in source["cells"] if c["cell_type"] == "code"]
        ours = [text(c) for c in notebook["cells"] if c["cell_type"] == "code"]
        # A folded cell only gains its title line (after any cell magic); the install cell
        # installs the copy's commit.
        ours = [re.sub(r"^((?:%%.*\n)*)#@title [^\n]+\n", r"\1", code) for code in ours]
        assert f'git+{url}@{commit}"' in ours[0] and f'git+{url}"' in theirs[0], page
        ours[0] = ours[0].replace(f"@{commit}", "")
        assert ours == theirs, f"{page}: the code cells differ from the source's"
        first = notebook["cells"][0]
        assert first["cell_type"] == "code" and '"google.colab" in sys.modules' in text(first)
        assert all(not c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code")
        assert notebook["metadata"]["kernelspec"]["name"] == "python3"


def tagged(cells: list[dict], tag: str) -> list[dict]:
    return [c for c in cells if c["cell_type"] == "code" and tag in c["metadata"].get("tags", [])]


def test_solutions_are_collapsed_cells_after_their_stub(generated):
    """Every cell the HTML book folds whole (``hide-cell``) is collapsed in the copy: an
    exercise's solution, titled "Solution", or a long table folded with its code, titled as its
    button reads in the HTML book ("Show the two tables" gives "The two tables")."""
    solutions = 0
    for page, (source, notebook) in generated.items():
        hidden = tagged(source["cells"], "hide-cell")
        forms = tagged(notebook["cells"], "hide-cell")
        assert len(forms) == len(hidden), f"{page}: {len(hidden)} solutions, {len(forms)} copied"
        for original, cell in zip(hidden, forms, strict=True):
            prompt = original["metadata"].get("mystnb", {}).get("code_prompt_show")
            words = prompt.removeprefix("Show ") if prompt else "Solution"
            title = words[:1].upper() + words[1:]
            assert text(cell).startswith(f"#@title {title}\n"), text(cell)[:80]
            assert cell["metadata"]["cellView"] == "form"
            assert cell["metadata"]["jupyter"]["source_hidden"] is True
            solutions += title == "Solution"
    assert solutions >= 20


def test_folded_checks_are_collapsed_cells_titled_by_their_button(generated):
    """A cell the HTML book folds (``hide-input``: a check, a table read from a recorded file)
    is collapsed in the copy too, titled as its button reads there ("Show the check" gives
    "The check"), and keeps its output in view: only the source is hidden."""
    folded = 0
    titles = set()
    for page, (source, notebook) in generated.items():
        theirs = tagged(source["cells"], "hide-input")
        ours = tagged(notebook["cells"], "hide-input")
        assert len(ours) == len(theirs), page
        for original, cell in zip(theirs, ours, strict=True):
            prompt = original["metadata"].get("mystnb", {}).get("code_prompt_show")
            words = prompt.removeprefix("Show ") if prompt else "the code"
            title = words[:1].upper() + words[1:]
            first = text(cell).split("\n", 1)[0]
            assert first == f"#@title {title}", (page, first, prompt)
            assert cell["metadata"]["cellView"] == "form", page
            assert cell["metadata"]["jupyter"]["source_hidden"] is True, page
            assert "outputs_hidden" not in cell["metadata"]["jupyter"], page
            titles.add(title)
        folded += len(ours)
        shown = [
            c for c in notebook["cells"]
            if c["cell_type"] == "code" and not {"hide-cell", "hide-input"} & set(
                c["metadata"].get("tags", []))
        ]  # fmt: skip
        assert not [c for c in shown if c["metadata"].get("cellView")], page
        assert not [c for c in shown if text(c).startswith("#@title")], page
    assert folded >= 100 and "The check" in titles


def test_pitfalls_citations_and_links_read_as_plain_markdown(generated):
    _, notebook = generated["book/pretrained"]
    markdown = "\n".join(text(c) for c in notebook["cells"] if c["cell_type"] == "markdown")
    site = colab.site_url(read_yaml("_config.yml"))
    assert site == "https://vitbook.github.io/vitbook/"
    assert (
        "> **Common pitfall: loading with strict=False**\n>\n> `model.load_state_dict(weights, "
        "strict=False)` accepts"
    ) in markdown
    bibliography = f"{site}book/bibliography.html"
    assert f"([Dosovitskiy et al., 2021]({bibliography}#cite-dosovitskiy2021vit))" in markdown
    assert f"[The full model]({site}book/full_model.html)" in markdown
    assert "$\\sqrt{\\sigma^2 + \\epsilon}$" in markdown, "maths is kept as it is"
    assert f"[vitbook: Vision Transformers from scratch]({site}book/pretrained.html)" in markdown


def published_links(generated) -> set[str]:
    site = colab.site_url(read_yaml("_config.yml"))
    links = set()
    for _, notebook in generated.values():
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                links |= {m["url"] for m in LINK.finditer(text(cell))}
    ours = {url for url in links if url.startswith(site)}
    assert len(ours) >= 10, "the chapters link to other pages of the book"
    return ours


def test_links_name_pages_of_the_book(generated):
    site = colab.site_url(read_yaml("_config.yml"))
    pages = set(toc_entries(read_yaml("_toc.yml")))
    for url in published_links(generated):
        path = urlsplit(url).path.removeprefix(urlsplit(site).path)
        assert path.removesuffix(".html") in pages, f"{url} is not a page of _toc.yml"


@pytest.mark.book
@pytest.mark.xdist_group("book")  # with the other users of the build, on one pytest-xdist worker
def test_links_resolve_to_pages_of_the_built_book(generated, built_book):
    site = colab.site_url(read_yaml("_config.yml"))
    for url in published_links(generated):
        parts = urlsplit(url)
        page = built_book / parts.path.removeprefix(urlsplit(site).path)
        assert page.is_file(), f"{url} is not a page of the built book ({page})"
        if parts.fragment:
            html = page.read_text(encoding="utf-8")
            assert f'id="{parts.fragment}"' in html, f"{url}: no such anchor on the page"


# --- the rules, on small inputs ----------------------------------------------------------------


@pytest.fixture(scope="module")
def chapter():
    book = colab.load_book(ROOT)
    book.labels["fig-demo"] = colab.Target("book/patches", "fig-demo", "A demo", "1.2")
    return colab.Chapter(book, "book/attention")


def test_roles_become_links_and_code_spans_stay_literal(chapter):
    site = chapter.book.site
    bib = f"{site}book/bibliography.html#cite-"
    assert chapter.markdown("a `call(x,\ny)` {cite}`vaswani2017attention`.\n\n`z`") == (
        f"a `call(x,\ny)` ([Vaswani et al., 2017]({bib}vaswani2017attention)).\n\n`z`"
    ), "a code span that wraps onto the next line"
    assert chapter.markdown("As {cite:t}`vaswani2017attention` show") == (
        f"As [Vaswani et al. (2017)]({bib}vaswani2017attention) show"
    )
    assert chapter.markdown("{cite:p}`ho2019axial,abnar2020rollout`") == (
        f"([Ho et al., 2019]({bib}ho2019axial); [Abnar and Zuidema, 2020]({bib}abnar2020rollout))"
    )
    assert chapter.markdown("see {doc}`the notation <notation>`") == (
        f"see [the notation]({site}book/notation.html)"
    )
    demo = f"{site}book/patches.html#fig-demo"
    assert chapter.markdown("{numref}`fig-demo` and {ref}`fig-demo`") == (
        f"[Fig. 1.2]({demo}) and [A demo]({demo})"
    )
    assert chapter.markdown("write `{cite}` for a citation, {math}`x^2` inline") == (
        "write `{cite}` for a citation, $x^2$ inline"
    )
    assert chapter.markdown("$\\operatorname{softmax}(x)_{i}$ and `blocks.{i}.norm1`") == (
        "$\\operatorname{softmax}(x)_{i}$ and `blocks.{i}.norm1`"
    )


def test_directives_become_quotes_and_maths(chapter):
    source = (
        "(my-label)=\n% a comment\n:::{note}\nA {doc}`notation` note.\n\n```python\nx = 1\n```\n:::"
        "\n\n````{warning}\nKeep `{x}`.\n````\n\n```{math}\na^2\n```"
    )
    assert chapter.markdown(source) == (
        "> **Note**\n>\n> A "
        f"[Notation, shapes and glossary]({chapter.book.site}book/notation.html) note.\n>\n"
        "> ```python\n> x = 1\n> ```\n\n> **Warning**\n>\n> Keep `{x}`.\n\n$$\na^2\n$$"
    )


def test_unknown_markup_stops_the_conversion(chapter):
    with pytest.raises(colab.ConversionError, match=r"book/attention: the role \{term\}"):
        chapter.markdown("a {term}`token`")
    with pytest.raises(colab.ConversionError, match=r"the directive \{figure\}"):
        chapter.markdown("```{figure} a.png\nA caption\n```")
    with pytest.raises(colab.ConversionError, match=r"not in the bibliography"):
        chapter.markdown("{cite}`nobody1999`")
    with pytest.raises(colab.ConversionError, match=r"not in _toc.yml"):
        chapter.markdown("{doc}`nowhere`")


def test_captions_follow_their_figure_and_cell_magics_stay_first():
    book = colab.load_book(ROOT)
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# Title\n\nText.", "id": "a"},
        {
            "cell_type": "code",
            "metadata": {"mystnb": {"figure": {"caption": "A {doc}`notation` map"}}},
            "source": "plot()", "outputs": [], "execution_count": None, "id": "b",
        },
        {
            "cell_type": "code", "metadata": {"tags": ["hide-cell"]}, "source": "%%time\nsolve()",
            "outputs": [], "execution_count": None, "id": "c",
        },
        {
            "cell_type": "code",
            "metadata": {"tags": ["hide-input"], "mystnb": {"code_prompt_show": "Show the check"}},
            "source": "%%time\nassert check()", "outputs": [], "execution_count": None, "id": "d",
        },
        {
            "cell_type": "code", "metadata": {"tags": ["hide-input"]}, "source": "table()",
            "outputs": [], "execution_count": None, "id": "e",
        },
        {
            "cell_type": "code", "metadata": {"tags": ["hide-output"]}, "source": "shown()",
            "outputs": [], "execution_count": None, "id": "f",
        },
    ]  # fmt: skip
    source = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = colab.convert_notebook(book, "book/attention", source)["cells"]
    kinds = ["markdown", "code", "markdown", "code", "code", "code", "code"]
    assert [c["cell_type"] for c in out] == kinds
    notation = f"{book.site}book/notation.html"
    chapter = colab.chapter_numbers()["book/attention"]
    assert out[2]["source"] == (
        f"**Fig. {chapter}.1:** A [Notation, shapes and glossary]({notation}) map"
    )
    assert out[3]["source"] == "%%time\n#@title Solution\nsolve()"
    # A folded check: collapsed (Colab's form view shows its title and its output), titled by
    # its button in the HTML book, or "The code" where it names none.
    assert out[4]["source"] == "%%time\n#@title The check\nassert check()"
    assert out[5]["source"] == "#@title The code\ntable()"
    for cell in out[3:6]:
        assert cell["metadata"]["cellView"] == "form"
        assert cell["metadata"]["jupyter"] == {"source_hidden": True}
    assert out[6]["source"] == "shown()" and "cellView" not in out[6]["metadata"]


def write_book(folder, toc: str, multitoc: bool = True) -> None:
    (folder / "_toc.yml").write_text(toc, encoding="utf-8")
    html = "html:\n  use_multitoc_numbering: true\n" if multitoc else ""
    (folder / "_config.yml").write_text(f"title: t\n{html}", encoding="utf-8")


TOC = """format: jb-book
root: intro
parts:
  - caption: Front
    chapters:
      - file: preface
  - caption: Main
    numbered: 1
    chapters:
      - file: one
      - file: two
        sections:
          - file: two_a
  - caption: More
    numbered: true
    chapters:
      - file: three
  - caption: Back
    chapters:
      - file: references
"""


def test_chapter_numbers_come_from_the_toc(tmp_path):
    write_book(tmp_path, TOC)
    assert colab.chapter_numbers(tmp_path) == {"one": 1, "two": 2, "two_a": 2, "three": 3}
    write_book(tmp_path, TOC, multitoc=False)  # each numbered part starts again at 1
    assert colab.chapter_numbers(tmp_path) == {"one": 1, "two": 2, "two_a": 2, "three": 1}
    write_book(tmp_path, TOC.replace("numbered: 1", "numbered: false"))
    assert colab.chapter_numbers(tmp_path) == {"three": 1}


def test_figures_are_numbered_within_their_chapter():
    book = colab.load_book(ROOT)
    numbers = colab.chapter_numbers()
    assert numbers["book/whole_vit"] == 1 and numbers["book/patches"] == 2
    assert numbers["book/notation"] > numbers["book/attention_cost"], "the appendix comes last"
    assert "book/intro" not in numbers and "book/bibliography" not in numbers
    checked = 0
    for page in colab.chapters(book):
        source = json.loads((ROOT / f"{page}.ipynb").read_text(encoding="utf-8"))
        names = [
            c["metadata"]["mystnb"]["figure"].get("name")
            for c in source["cells"]
            if c["metadata"].get("mystnb", {}).get("figure", {}).get("caption")
        ]
        for nth, name in enumerate(names, start=1):
            if name and page in numbers:
                assert book.labels[name].number == f"{numbers[page]}.{nth}", (page, name)
                checked += 1
    assert checked >= 40, "the chapters' figures are named, so that {numref} can cite them"


def test_captions_carry_the_numbers_that_numref_shows(generated):
    book = colab.load_book(ROOT)
    captions = 0
    for page, (_, notebook) in generated.items():
        shown = [
            re.match(r"\*\*Fig\. ([\d.]+):\*\* ", text(c))
            for c in notebook["cells"]
            if c["cell_type"] == "markdown" and text(c).startswith("**Fig. ")
        ]
        assert all(shown), f"{page}: a caption without its number"
        labelled = sorted(
            (t.number for t in book.labels.values() if t.page == page and t.number),
            key=lambda n: [int(x) for x in n.split(".")],
        )
        numbers = [m[1] for m in shown]
        assert set(labelled) <= set(numbers), f"{page}: {labelled} not among {numbers}"
        assert len(set(numbers)) == len(numbers), f"{page}: a number used twice: {numbers}"
        captions += len(numbers)
    assert captions >= 40, "the chapters' figures are captioned"


FIGURE_NUMBER = re.compile(
    r'<figure[^>]*\sid="(?P<id>[^"]+)"[^>]*>.*?<span class="caption-number">Fig\. (?P<n>[\d.]+) ',
    re.S,
)


@pytest.mark.book
@pytest.mark.xdist_group("book")
def test_figure_numbers_are_those_of_the_html_book(generated, built_book):
    """Every figure of the Colab copies has the number that the HTML book gives it."""
    book = colab.load_book(ROOT)
    compared = 0
    for page in colab.chapters(book):
        html = (built_book / f"{page}.html").read_text(encoding="utf-8")
        in_html = {m["id"]: m["n"] for m in FIGURE_NUMBER.finditer(html)}
        ours = {t.anchor: t.number for t in book.labels.values() if t.page == page and t.number}
        assert ours == {anchor: in_html.get(anchor) for anchor in ours}, page
        _, notebook = generated[page]
        captions = [
            re.match(r"\*\*Fig\. ([\d.]+):", text(c))[1]
            for c in notebook["cells"]
            if c["cell_type"] == "markdown" and text(c).startswith("**Fig. ")
        ]
        html_numbers = sorted(in_html.values(), key=lambda n: [int(x) for x in n.split(".")])
        assert captions == html_numbers, f"{page}: Colab {captions}, HTML book {html_numbers}"
        compared += len(captions)
    assert compared >= 40


def test_the_colab_button_is_pointed_at_the_generated_copy():
    url = "https://colab.research.google.com/github/vitbook/vitbook/blob/main/book/patches.ipynb"
    context = {
        "header_buttons": [
            {"label": "download-buttons", "buttons": [{"url": "_sources/book/patches.ipynb"}]},
            {"label": "launch-buttons", "buttons": [{"text": "Colab", "url": url}]},
        ]
    }
    theme = {"repository_branch": "main"}
    app = SimpleNamespace(config=SimpleNamespace(colab_branch="colab", html_theme_options=theme))
    colab.point_colab_at_generated_copy(app, "book/patches", "page.html", context, None)
    button = context["header_buttons"][1]["buttons"][0]
    assert button["url"] == url.replace("/blob/main/", "/blob/colab/")
    assert context["header_buttons"][0]["buttons"][0]["url"] == "_sources/book/patches.ipynb"
    config = read_yaml("_config.yml")
    assert colab.colab_url(config, "book/patches") == button["url"]


# --- written for Colab: every copy, chapters added later included -----------------------------

# What a notebook must not say: it is not a page of the HTML book, nor a "copy of the book" that
# was built, and a reader of a notebook has no rocket button (only the HTML book has one).
HTML_PAGE_WORDING = re.compile(
    r"\bthis\s+page\b|\bthe\s+page\s+you\s+are\s+reading\b|\bthis\s+copy\s+of\s+the\s+book\b"
    r"|\bbuilt\s+this\s+page\b|\bwhen\s+the\s+page\s+was\s+built\b|\bhidden\s+on\s+the\s+page\b"
    r"|\bthe\s+published\s+page\b|\brocket\s+button",
    re.IGNORECASE,
)
# A citation as the copies write it, "Author et al., 2021" (the link's text), several with "; ".
CITATION = re.compile(r"[^()\[\]]+, (?:19|20)\d\d[a-z]?(?:; [^()\[\]]+, (?:19|20)\d\d[a-z]?)*")


def nested_citations(markdown: str) -> list[str]:
    """Citations in parentheses inside other parentheses: "(Section 3 of (X, 2021)" of each."""
    found = []
    for paragraph in re.split(r"\n\s*\n", "\n".join(outside_code(markdown))):
        plain = re.sub(r"\$[^$]*\$", "", paragraph)  # maths
        plain = re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", plain)  # a link by its text
        opened: list[int] = []
        for i, char in enumerate(plain):
            if char == "(":
                opened.append(i)
            elif char == ")" and opened:
                start = opened.pop()
                if opened and CITATION.fullmatch(plain[start + 1 : i]):
                    found.append(plain[opened[-1] : i + 1])
    return found


def test_gpu_chapters_ask_colab_for_a_t4_and_say_how_to_switch(generated):
    gpu_pages = []
    for page, (source, notebook) in generated.items():
        metadata = notebook["metadata"]
        head = "\n".join(text(c) for c in notebook["cells"][:3] if c["cell_type"] == "markdown")
        if colab.runs_on_a_gpu(source):
            gpu_pages.append(page)
            assert metadata["accelerator"] == "GPU", page  # Colab's own format
            assert metadata["colab"]["gpuType"] == "T4", page
            assert "**Runtime > Change runtime type**" in head and "**T4 GPU**" in head, page
        else:
            assert "accelerator" not in metadata and "gpuType" not in metadata["colab"], page
            assert "Change runtime type" not in head, page
    assert {"book/photos", "book/finetuning"} <= set(gpu_pages), gpu_pages


def test_no_copy_speaks_of_the_html_page_or_its_buttons(generated):
    found = []
    for page, (_, notebook) in generated.items():
        for i, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "markdown":
                found += [(page, i, m[0]) for m in HTML_PAGE_WORDING.finditer(text(cell))]
    assert not found, f"(page, cell, words) that read wrong in a notebook: {found}"
    sources = "".join(text(c) for s, _ in generated.values() for c in s["cells"])
    assert HTML_PAGE_WORDING.search(sources), "the sources still speak of the page: reworded"


def test_no_copy_nests_a_citation_in_parentheses(generated):
    found = []
    for page, (_, notebook) in generated.items():
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                found += [(page, nested) for nested in nested_citations(text(cell))]
    assert not found, found
    assert nested_citations("(Section 3.2 of ([A et al., 2021](u))), (B, 2020)") == [
        "(Section 3.2 of (A et al., 2021)"
    ], "the check finds a nested citation, and only that one"


def test_copies_install_the_commit_they_were_made_from(tmp_path, monkeypatch):
    monkeypatch.delenv(colab.COMMIT_VARIABLE, raising=False)
    head = colab.source_commit(ROOT)
    assert re.fullmatch(r"[0-9a-f]{40}", head)
    monkeypatch.setenv(colab.COMMIT_VARIABLE, "0123abc")  # the publish workflow's commit
    assert colab.source_commit(ROOT) == "0123abc"
    written = colab.write_all(tmp_path / "out", ROOT)
    copy = json.loads((tmp_path / "out" / "book" / "notation.ipynb").read_text("utf-8"))
    assert "vitbook/vitbook@0123abc" in text(copy["cells"][0]), "a copy installs its commit"
    assert "from commit 0123abc of the book's source" in text(copy["cells"][1])
    assert len(written) == len(colab.chapters(colab.load_book(ROOT)))
    monkeypatch.setenv(colab.COMMIT_VARIABLE, "main; rm -rf /")
    with pytest.raises(ValueError, match=r"VITBOOK_COMMIT=.* is not a commit hash"):
        colab.source_commit(ROOT)
    monkeypatch.delenv(colab.COMMIT_VARIABLE)
    assert colab.source_commit(tmp_path) is None, "outside git: no commit to pin"
    book = colab.load_book(ROOT)  # commit None: the install cell installs the default branch
    unpinned = colab.convert_notebook(book, "book/notation")
    assert text(unpinned["cells"][0]).endswith('git+https://github.com/vitbook/vitbook"')
    assert "generated from the book's source" in text(unpinned["cells"][1])
    book.commit = "0123abc"
    with pytest.raises(colab.ConversionError, match=r"installs git\+\S+ 0 times"):
        colab.pin_install('%pip install -q "vitbook"', book)


def test_the_publish_workflow_passes_the_commit_it_builds():
    workflow = read_yaml(".github/workflows/publish.yml")
    steps = {step.get("run"): step for step in workflow["jobs"]["build"]["steps"]}
    for command in ("python3 tasks.py book", "python3 tasks.py colab"):
        assert steps[command]["env"][colab.COMMIT_VARIABLE] == "${{ github.sha }}", command


def test_citations_inside_parentheses_keep_one_pair(chapter):
    bib = f"{chapter.book.site}book/bibliography.html#cite-dosovitskiy2021vit"
    assert chapter.markdown("(Section 3.2 of\n{cite}`dosovitskiy2021vit`), then") == (
        f"(Section 3.2 of\n[Dosovitskiy et al., 2021]({bib})), then"
    ), "the parenthesis opened on the line before counts"
    assert chapter.markdown("as shown {cite:p}`dosovitskiy2021vit`.") == (
        f"as shown ([Dosovitskiy et al., 2021]({bib}))."
    )
    assert chapter.markdown("(a)\n\n{cite}`dosovitskiy2021vit`") == (
        f"(a)\n\n([Dosovitskiy et al., 2021]({bib}))"
    ), "a closed parenthesis, a new paragraph"
    assert chapter.markdown("(see {cite:alp}`dosovitskiy2021vit`)") == (
        f"(see [Dosovitskiy et al., 2021]({bib}))"
    )


def test_only_blocks_and_reworded_sentences(chapter):
    source = (
        "Open it.\n\n:::{only} html\nThe rocket button.\n:::\n\n:::{only} notebook\n"
        "You are in a notebook.\n:::\n\nOn the machine that built\nthis page, so."
    )
    assert chapter.markdown(source) == (
        "Open it.\n\n\nYou are in a notebook.\n\nOn the machine that ran this notebook, so."
    )
    with pytest.raises(colab.ConversionError, match=r"\{only\} latex"):
        chapter.markdown(":::{only} latex\nx\n:::")
    assert colab.reword("set by this page's budget") == "set by this chapter's budget"


def test_the_download_button_serves_the_plain_copy(tmp_path):
    context = {
        "page_source_suffix": ".ipynb",
        "pathto": lambda name, resource: f"../{name}",
        "header_buttons": [
            {"label": "download-buttons", "buttons": [
                {"label": "download-source-button", "url": "../_sources/book/patches.ipynb"},
                {"label": "download-pdf-button", "javascript": "window.print()"},
            ]},
        ],
    }  # fmt: skip
    colab.download_the_copy(None, "book/patches", "page.html", context, None)
    buttons = context["header_buttons"][0]["buttons"]
    assert buttons[0]["url"] == "../_notebooks/book/patches.ipynb"
    assert "url" not in buttons[1]
    page = {**context, "page_source_suffix": ".md", "header_buttons": []}
    colab.download_the_copy(None, "book/intro", "page.html", page, None)  # no copy: untouched
    app = SimpleNamespace(outdir=str(tmp_path), srcdir=str(ROOT),
                          builder=SimpleNamespace(format="html"))  # fmt: skip
    colab.write_copies_into_the_book(app, None)
    served = json.loads((tmp_path / "_notebooks" / "book" / "patches.ipynb").read_text("utf-8"))
    assert served == colab.convert_notebook(load_with_commit(), "book/patches")


def load_with_commit() -> colab.Book:
    book = colab.load_book(ROOT)
    book.commit = colab.source_commit(ROOT)
    return book


@pytest.mark.book
@pytest.mark.xdist_group("book")
def test_the_built_books_download_buttons_serve_the_copies(built_book):
    book = load_with_commit()
    for page in colab.chapters(book):
        html = (built_book / f"{page}.html").read_text(encoding="utf-8")
        href = re.search(r'<a href="([^"]+)"[^>]*\s+class="[^"]*btn-download-source-button', html)
        assert href, f"{page}: no download button"
        served = (built_book / page).parent / href[1]
        assert served.resolve() == (built_book / "_notebooks" / f"{page}.ipynb").resolve()
        copy = json.loads(served.read_text(encoding="utf-8"))
        assert copy["cells"] == colab.convert_notebook(book, page)["cells"], page
        assert "{cite}`" not in served.read_text(encoding="utf-8")


# --- a generated chapter runs --------------------------------------------------------------------


@pytest.mark.book
def test_a_generated_chapter_runs_top_to_bottom(generated, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    page = "book/notation"
    path = tmp_path / "notation.ipynb"
    path.write_text(json.dumps(generated[page][1]), encoding="utf-8")
    notebook = nbformat.read(path, as_version=4)
    for name, value in kernel_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    start = time.monotonic()
    where = {"metadata": {"path": str(tmp_path)}}
    # Raises CellExecutionError, with the cell and its traceback, on the first failing cell.
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources=where).execute()
    install = notebook.cells[0]
    assert "%pip install" in install.source and install.outputs == [], "install cell skipped"
    ran = [c for c in notebook.cells if c.cell_type == "code" and c.execution_count]
    assert len(ran) == sum(c.cell_type == "code" for c in notebook.cells)
    print(f"{page} (Colab copy) ran in {time.monotonic() - start:.1f} s")
