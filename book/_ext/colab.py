"""Colab-ready notebooks from the MyST chapters, and the Colab launch buttons that open them.

The chapters are written in MyST: ``{cite}`` and ``{doc}`` roles, ``{admonition}`` boxes, hidden
solution cells. Only the Jupyter Book build reads MyST; JupyterLab, the classic notebook and Colab
show it as raw text. This module writes a plain copy of every chapter listed in ``_toc.yml``:

- a citation becomes "(Author et al., year)", linked to its entry in the published
  bibliography (the anchor that ``bibtex_cite_id`` of ``_config.yml`` gives it);
- ``{doc}``, ``{ref}`` and ``{numref}`` become links to the published pages, ``{numref}`` with
  the figure's number in the HTML book ("Fig. 3.2": chapter 3, its second figure);
- an admonition (``{admonition}``, ``{note}``, ``{warning}``, ... in backtick or colon fences)
  becomes a quoted block with a bold title; ``{math}`` becomes ``$$`` maths, which is kept;
- a solution (a code cell tagged ``hide-cell``) becomes a collapsed cell: first line
  ``#@title Solution`` and the metadata ``cellView: form`` (Colab) and
  ``jupyter.source_hidden`` (JupyterLab, Notebook);
- a folded cell (tagged ``hide-input``: a check, a table built from a recorded file, set-up)
  is collapsed the same way, titled by its button in the HTML book (``code_prompt_show``
  "Show the check" gives ``#@title The check``); its output stays in view when it runs, as in
  the HTML book;
- a figure caption (cell metadata ``mystnb.figure.caption``) becomes a Markdown cell after the
  figure's cell, "**Fig. 3.2:** caption", numbered as in the HTML book;
- every code cell is kept, in order: hidden set-up cells stay runnable and the Colab install cell
  stays first; it installs the commit the copy was made from (:func:`source_commit`);
- a citation inside parentheses loses its own ("(Section 3.2 of Dosovitskiy et al., 2021)"),
  as ``{cite:alp}`` writes it in the HTML book;
- ``{only}`` blocks: ``html`` ones are left out, ``notebook`` ones kept (Sphinx shows only the
  former), so that a sentence about the HTML page can have a notebook counterpart;
- sentences about the HTML page that the chapters do not word for both (:data:`REWORDED`) are
  reworded for a notebook;
- a chapter that runs on a GPU (its code calls ``detect_runtime()`` or
  ``torch.cuda.is_available()``) asks Colab for a T4 in its metadata (``accelerator: GPU``,
  ``colab.gpuType: T4``) and says under its title how to switch the runtime.

Anything MyST that it does not know how to write in plain Markdown stops the conversion with an
error naming the chapter, so no raw markup reaches a reader.

The numbers are Sphinx's, worked out from ``_toc.yml`` (:func:`chapter_numbers`): the chapters
of a part with ``numbered`` count up in reading order (on from one numbered part to the next
with ``html.use_multitoc_numbering``, else afresh in each part), the pages nested under a
chapter share its number, and figures count up within each chapter (``numfig_secnum_depth``
1, Sphinx's default) and through the unnumbered pages together.

    python book/_ext/colab.py [OUT]   # default OUT: _build/colab (python3 tasks.py colab)

writes ``OUT/book/<chapter>.ipynb``. The publish workflow pushes that folder to the branch
``colab_branch`` of ``_config.yml`` (``sphinx.config``), and as a Sphinx extension this module
points the Colab launch button of every page at that branch's copy, writes the same copies into
the HTML book (``_notebooks/``) and points each page's ".ipynb" download button at its copy
instead of the MyST source. The published site's URL, the one place where it is derived, is
:func:`site_url`.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from reader import author_year  # book/_ext: one place writes a citation's authors and year

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "_build" / "colab"
COLAB = "https://colab.research.google.com"
DEFAULT_COLAB_BRANCH = "colab"
NOTEBOOKS_DIR = "_notebooks"  # in the HTML book: the copies that the download buttons serve
COMMIT_VARIABLE = "VITBOOK_COMMIT"  # the commit the copies are made from (the publish workflow)
COMMIT = re.compile(r"[0-9a-f]{7,40}")
# A chapter that runs on a GPU where there is one; its copy asks Colab for a T4.
GPU_CODE = re.compile(r"\bdetect_runtime\(|\btorch\.cuda\.is_available\(")
GPU_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4"}}
GPU_NOTE = (
    "> **Run it on a GPU.** This chapter trains on photos, which takes a GPU. This copy asks "
    "Colab for one when it opens; if the runtime has none, choose **Runtime > Change runtime "
    "type**, pick **T4 GPU**, **Save**, then **Runtime > Run all**. Without a GPU the chapter "
    "runs the same code on the photos that ship with vitbook, or on a small stand-in, and says "
    "so under the cell that chooses."
)
# Sentences of chapters that speak of the HTML page, and how a notebook says them. Chapters
# word new text for both (or put the HTML wording in an ``{only} html`` block); the tests
# refuse these phrases in a copy (tests/test_colab.py).
REWORDED = (
    (
        "the numbers on this page are those of the machine that built it",
        "the numbers in this notebook are those of the machine that ran it",
    ),
    ("the machine that built this page", "the machine that ran this notebook"),
    ("this page's", "this chapter's"),
    ("so that this page stays under 5 MB", "so that its page in the HTML book stays under 5 MB"),
    ("This page, which shows every explorer", "This appendix, which shows every explorer"),
    ("here in the HTML pages, with no Python", "in the HTML pages, with no Python"),
    ("**In Colab** (the rocket button at the top of a chapter), run", "**In Colab**, run"),
    (
        "Every figure so far was drawn when the page was built.",
        "Every figure so far was drawn by Python when its cell ran.",
    ),
    ("(hidden on the page; click to show it)", "(a collapsed cell; click it to show the code)"),
    (
        "The published page runs the solutions, so every check on it has passed.",
        "The HTML book runs the solutions, so every check there has passed.",
    ),
    (
        "(The page holds a picture for every choice;",
        "(The HTML book holds a picture for every choice;",
    ),
    ("says which one built the page you are reading", "says which one this notebook runs in"),
    ("the data this page was built with", "the data this notebook ran with"),
    ("the model this page trained", "the model this notebook trained"),
    ("the live figures of this page show", "the live figures of this notebook show"),
    ("recorded number on this page", "recorded number in this notebook"),
    ("Times on this page come", "Times in this notebook come"),
    ("This page fixes one name", "This chapter fixes one name"),
)

ADMONITIONS = {
    "admonition": None,  # the title is the directive's argument
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
}
# `{name}` followed by a code span is a role; a code span alone is literal code, left as it is.
ROLE_OR_CODE = re.compile(
    r"(?:\{(?P<role>[a-zA-Z][\w:+-]*)\})?(?P<ticks>`+)(?P<body>.+?)(?P=ticks)", re.S
)  # re.S: a code span may wrap onto the next line of its paragraph
FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})\s*(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[\w:-]+)\}\s*(?P<argument>.*)$")
TARGET = re.compile(r"^\s*\((?P<label>[^()\s]+)\)=\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


CITE_ROLES = (
    "cite", "cite:p", "cite:ps", "cite:t", "cite:ts", "cite:alp", "cite:alps", "cite:author",
    "cite:year",
)  # fmt: skip


class ConversionError(ValueError):
    """MyST that has no plain-Markdown form here; the message names the chapter and the markup."""


def reword(markdown: str) -> str:
    """``markdown`` with the sentences of :data:`REWORDED` said as a notebook says them."""
    for html_wording, notebook_wording in REWORDED:
        pattern = r"\s+".join(re.escape(word) for word in html_wording.split())
        markdown = re.sub(pattern, notebook_wording.replace("\\", r"\\"), markdown)
    return markdown


# --- configuration: the one place that derives published URLs ---------------------------------


def read_config(root: Path = ROOT) -> dict:
    import yaml

    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def owner_repo(config: dict) -> tuple[str, str]:
    url = config["repository"]["url"].rstrip("/").removesuffix(".git")
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", url)
    if not match:
        raise ValueError(f"repository.url={url!r} in _config.yml is not a GitHub repository URL")
    return match[1], match[2]


def site_url(config: dict) -> str:
    """The published book: GitHub Pages of ``repository.url``, ending with a slash."""
    owner, repo = owner_repo(config)
    if repo.lower() == f"{owner.lower()}.github.io":  # a user or organisation site
        return f"https://{owner.lower()}.github.io/"
    return f"https://{owner.lower()}.github.io/{repo}/"


def colab_branch(config: dict) -> str:
    return (config.get("sphinx", {}).get("config") or {}).get("colab_branch", DEFAULT_COLAB_BRANCH)


def colab_url(config: dict, page: str) -> str:
    """Where Colab opens the generated copy of ``page`` (e.g. ``book/patches``)."""
    owner, repo = owner_repo(config)
    return f"{COLAB}/github/{owner}/{repo}/blob/{colab_branch(config)}/{page}.ipynb"


def _read_toc(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))


def _page(entry: str) -> str:
    return entry.removesuffix(".ipynb").removesuffix(".md")


def toc_pages(root: Path = ROOT) -> list[str]:
    """Every page of ``_toc.yml`` in reading order, without suffix (``book/intro``, ...)."""
    toc = _read_toc(root)
    pages = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            if "file" in item:
                pages.append(item["file"])
            for key in ("parts", "chapters", "sections"):
                walk(item.get(key, []))

    walk([{key: toc.get(key, []) for key in ("parts", "chapters")}])
    return [_page(page) for page in pages]


def chapter_numbers(root: Path = ROOT, config: dict | None = None) -> dict[str, int]:
    """The chapter number of every numbered page of ``_toc.yml`` (``{"book/attention": 2}``).

    A part is numbered when it says ``numbered`` (or ``defaults`` does); its chapters count up
    in reading order, on from the previous numbered part when ``html.use_multitoc_numbering``
    is set in ``_config.yml``, from 1 otherwise. Pages nested under a chapter (``sections``)
    share its number, which is the one their figures carry. Unnumbered pages are left out.
    """
    toc = _read_toc(root)
    config = read_config(root) if config is None else config
    continuous = bool((config.get("html") or {}).get("use_multitoc_numbering"))
    numbered_by_default = bool((toc.get("defaults") or {}).get("numbered"))
    parts = toc.get("parts") or [{"chapters": toc.get("chapters", [])}]
    numbers: dict[str, int] = {}
    last = 0

    def nested(item: dict) -> list[str]:
        found = [_page(item["file"])] if "file" in item else []
        for child in item.get("sections", []):
            found += nested(child)
        return found

    for part in parts:
        if not part.get("numbered", numbered_by_default):
            continue
        last = last if continuous else 0
        for chapter in part.get("chapters", []):
            last += 1
            numbers.update((page, last) for page in nested(chapter))
    return numbers


# --- what the book knows: page titles, labels, bibliography ------------------------------------


def _source(cell: dict) -> str:
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


def _markdown_of(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [_source(cell) for cell in cells if cell["cell_type"] == "markdown"]


def make_id(label: str) -> str:
    """The HTML id that Sphinx gives a label (docutils' rule: lower case, dashes)."""
    from docutils.nodes import make_id as docutils_make_id

    return docutils_make_id(label)


@dataclass
class Target:
    page: str  # e.g. "book/patches"
    anchor: str  # "" for the page itself
    title: str  # what {ref} shows
    number: str = ""  # what {numref} shows, e.g. "3.2" for Fig. 3.2


@dataclass
class Book:
    """The facts about the whole book that the conversion of one chapter needs."""

    root: Path
    config: dict
    pages: list[str]
    titles: dict[str, str] = field(default_factory=dict)
    labels: dict[str, Target] = field(default_factory=dict)
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)  # key: (authors, year)
    # Where each page's figure numbers start: (its chapter or None, figures before it there).
    figures_before: dict[str, tuple[int | None, int]] = field(default_factory=dict)
    commit: str | None = None  # what the install cells install (source_commit); None: the branch

    def figure_number(self, page: str, nth: int) -> str:
        """The number of the ``nth`` (1, 2, ...) captioned figure of ``page``: "3.2", or "5"."""
        chapter, before = self.figures_before[page]
        return ".".join(str(n) for n in (chapter, before + nth) if n is not None)

    @property
    def site(self) -> str:
        return site_url(self.config)

    def page_url(self, page: str, anchor: str = "") -> str:
        return f"{self.site}{page}.html" + (f"#{anchor}" if anchor else "")

    @property
    def bibliography_url(self) -> str:
        pages = [page for page in self.pages if page.rsplit("/", 1)[-1] == "bibliography"]
        if len(pages) != 1:
            raise ConversionError("_toc.yml needs exactly one page named bibliography")
        return self.page_url(pages[0])

    def citation_url(self, key: str) -> str:
        """The entry of ``key`` in the published bibliography (its id: ``bibtex_cite_id``)."""
        pattern = (self.config.get("sphinx", {}).get("config") or {}).get("bibtex_cite_id")
        if not pattern:
            raise ConversionError(
                "_config.yml sets no sphinx.config.bibtex_cite_id, so the bibliography's "
                'entries have no predictable anchors; set it, e.g. "cite-{key}".'
            )
        anchor = make_id(pattern.format(key=key, bibliography_count=1))
        return f"{self.bibliography_url}#{anchor}"


def _caption_of(cell: dict) -> dict | None:
    """A cell's ``mystnb.figure`` metadata when it has a caption (Sphinx numbers only those)."""
    figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
    return figure if figure and figure.get("caption") else None


def _source_path(root: Path, page: str) -> Path:
    for suffix in (".ipynb", ".md"):
        if (root / f"{page}{suffix}").exists():
            return root / f"{page}{suffix}"
    raise ConversionError(f"_toc.yml lists {page}, which has no .ipynb or .md source")


def _plain_title(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def read_bibliography(paths: list[Path]) -> dict[str, tuple[str, str]]:
    """``{key: (authors, year)}`` of every entry, as the book cites it (``reader.author_year``)."""
    from pybtex.database import parse_file

    found = {}
    for path in paths:
        for key, entry in parse_file(str(path)).entries.items():
            found[key] = author_year(entry)
    return found


def prose_lines(lines: list[str]):
    """The lines of Markdown that are not inside a plain code block (directives' bodies are)."""
    open_fences: list[tuple[str, bool]] = []  # (fence, is a plain code block)
    for line in lines:
        opening = FENCE_OPEN.match(line)
        if open_fences:
            fence, plain = open_fences[-1]
            if re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
                open_fences.pop()
                continue
            if plain:
                continue
        if opening:
            plain = DIRECTIVE.match(opening["info"].strip()) is None
            open_fences.append((opening["fence"], plain))
            continue
        yield line


BOXED_TARGET = re.compile(
    r"^\((?P<label>[^)\s]+)\)=[ \t]*\n(?:[ \t]*\n)*"
    r"(?:`{3,}|:{3,})\{(?P<kind>admonition|note|warning|tip|important|caution|attention|danger"
    r"|error|hint|seealso)\}[ \t]*(?P<title>[^\n]*)$",
    re.MULTILINE,
)


def load_book(root: Path = ROOT) -> Book:
    config = read_config(root)
    book = Book(root=root, config=config, pages=toc_pages(root))
    depth = (config.get("sphinx", {}).get("config") or {}).get("numfig_secnum_depth", 1)
    if depth not in (0, 1):
        raise ConversionError(
            f"numfig_secnum_depth={depth!r} in _config.yml: the Colab copies number figures "
            "per chapter (1) or through the book (0); teach book/_ext/colab.py the new scheme."
        )
    chapters = chapter_numbers(root, config) if depth else {}
    counters: dict[int | None, int] = {}  # figures so far, per chapter (None: unnumbered pages)
    for page in book.pages:
        path = _source_path(root, page)
        label: str | None = None
        chapter = chapters.get(page)
        book.figures_before[page] = (chapter, counters.get(chapter, 0))
        for text in _markdown_of(path):
            for line in prose_lines(text.splitlines()):
                heading = HEADING.match(line)
                if heading:
                    title = _plain_title(heading[2])
                    if heading[1] == "#" and page not in book.titles:
                        book.titles[page] = title
                    if label:
                        book.labels[label] = Target(page, make_id(label), title)
                        label = None
                target = TARGET.match(line)
                if target:
                    label = target["label"]
        for text in _markdown_of(path):  # a label just before a box names the box
            for boxed in BOXED_TARGET.finditer(text):
                title = boxed["title"].strip() or boxed["kind"].capitalize()
                book.labels[boxed["label"]] = Target(
                    page, make_id(boxed["label"]), _plain_title(title)
                )
        if path.suffix == ".ipynb":
            figures = 0
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
                figure = _caption_of(cell)
                if figure is None:
                    continue
                figures += 1
                number = book.figure_number(page, figures)
                counters[chapter] = counters.get(chapter, 0) + 1
                if figure.get("name"):
                    caption = _plain_title(str(figure["caption"]))
                    book.labels[figure["name"]] = Target(
                        page, make_id(figure["name"]), caption, number
                    )
        if page not in book.titles:
            raise ConversionError(f"{path.name} has no top-level '# ' title")
    bibfiles = [root / name for name in config.get("bibtex_bibfiles", [])]
    book.citations = read_bibliography(bibfiles)
    return book


# --- Markdown: roles, directives, targets --------------------------------------------------------


@dataclass
class Chapter:
    book: Book
    page: str  # e.g. "book/patches"

    def fail(self, what: str) -> ConversionError:
        return ConversionError(f"{self.page}: {what} has no plain-Markdown form in {__name__}")

    def doc(self, target: str) -> str:
        """A page named as {doc} names it (relative to the chapter, or absolute with /)."""
        target = target.removesuffix(".ipynb").removesuffix(".md")
        if target.startswith("/"):
            page = target.lstrip("/")
        else:
            page = str(Path(self.page).parent / target).replace("\\", "/")
        if page not in self.book.titles:
            raise self.fail(f"{{doc}} to {target!r}, a page not in _toc.yml,")
        return page

    def role(self, name: str, body: str, *, in_parentheses: bool = False) -> str:
        explicit = EXPLICIT.match(body)
        text, target = (explicit["text"], explicit["target"]) if explicit else (None, body)
        if name in CITE_ROLES:
            return self.cite(name, body, in_parentheses=in_parentheses)
        if name == "doc":
            page = self.doc(target)
            return f"[{text or self.book.titles[page]}]({self.book.page_url(page)})"
        if name in ("ref", "numref"):
            found = self.book.labels.get(target)
            if found is None:
                raise self.fail(f"{{{name}}} to the unknown label {target!r}")
            url = self.book.page_url(found.page, found.anchor)
            if name == "ref":
                shown = text or found.title
            else:
                pattern = text or "Fig. %s"
                shown = pattern.replace("%s", found.number).replace("{number}", found.number)
            return f"[{shown}]({url})"
        if name in ("math", "m"):
            return f"${body}$"
        if name in ("abbr",):
            return re.sub(r"\s*\(.*\)\s*$", "", body)
        if name in ("sup", "sub"):
            return f"<{name}>{body}</{name}>"
        if name == "kbd":
            return f"<kbd>{body}</kbd>"
        raise self.fail(f"the role {{{name}}}`{body}`")

    def cite(self, name: str, body: str, *, in_parentheses: bool = False) -> str:
        """A citation as text: ``cite:p`` in parentheses, unless it already stands in some."""
        keys = [key.strip() for key in body.split(",") if key.strip()]
        unknown = [key for key in keys if key not in self.book.citations]
        if unknown:
            raise self.fail(f"a citation of {unknown}, not in the bibliography,")
        entries = [(*self.book.citations[key], self.book.citation_url(key)) for key in keys]
        if name in ("cite:t", "cite:ts"):
            return ", ".join(f"[{authors} ({year})]({url})" for authors, year, url in entries)
        if name == "cite:author":
            return ", ".join(f"[{authors}]({url})" for authors, _, url in entries)
        if name == "cite:year":
            return ", ".join(f"[{year}]({url})" for _, year, url in entries)
        cited = "; ".join(f"[{authors}, {year}]({url})" for authors, year, url in entries)
        if in_parentheses or name in ("cite:alp", "cite:alps"):
            return cited  # "(Section 3.2 of Dosovitskiy et al., 2021)", not "(... of (...))"
        return f"({cited})"

    def inline(self, line: str, depth: int = 0) -> tuple[str, int]:
        """Roles of one line of prose written out; code spans left exactly as they are.

        ``depth`` is the number of parentheses that the paragraph's earlier lines left open; a
        citation inside parentheses is written without its own. Returns the line and the depth
        at its end.
        """
        out, last = [], 0
        for match in ROLE_OR_CODE.finditer(line):
            text = line[last : match.start()]
            depth = max(0, depth + text.count("(") - text.count(")"))
            out.append(text)
            if match["role"] is None:
                out.append(match[0])
            else:
                body = match["body"].strip()
                out.append(self.role(match["role"], body, in_parentheses=depth > 0))
            last = match.end()
        rest = line[last:]
        out.append(rest)
        return "".join(out), max(0, depth + rest.count("(") - rest.count(")"))

    def markdown(self, text: str) -> str:
        return "\n".join(self.lines(reword(text).splitlines())).strip("\n")

    def lines(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        depth = 0  # parentheses open in the current paragraph
        while i < len(lines):
            line = lines[i]
            opening = FENCE_OPEN.match(line)
            if TARGET.match(line) or re.match(r"^\s*%", line):  # label targets, MyST comments
                i += 1
                continue
            if not opening:
                if not line.strip() or HEADING.match(line):
                    depth = 0
                end = i + 1  # a code span left open goes on in the paragraph's next lines
                while line.count("`") % 2 and end < len(lines) and lines[end].strip():
                    line, end = f"{line}\n{lines[end]}", end + 1
                converted, depth = self.inline(line, depth)
                out.extend(converted.split("\n"))
                i = end
                continue
            depth = 0
            fence, indent = opening["fence"], opening["indent"]
            end = i + 1
            closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
            while end < len(lines) and not closing.match(lines[end]):
                end += 1
            if end == len(lines):
                raise self.fail(f"the fence {line.strip()!r}, never closed,")
            body = lines[i + 1 : end]
            directive = DIRECTIVE.match(opening["info"].strip())
            if directive is None:
                if fence[0] == ":":
                    raise self.fail(f"the colon fence {line.strip()!r}")
                out.extend(lines[i : end + 1])  # a plain code block, verbatim
            else:
                out.extend(
                    indent + converted
                    for converted in self.directive(
                        directive["name"], directive["argument"].strip(), body
                    )
                )
            i = end + 1
        return out

    def directive(self, name: str, argument: str, body: list[str]) -> list[str]:
        options: dict[str, str] = {}
        if body and body[0].strip() == "---":  # YAML options block
            end = body.index("---", 1) if "---" in body[1:] else None
            if end is None:
                raise self.fail(f"the options of {{{name}}}")
            body = body[end + 1 :]
        while body and re.match(r"^\s*:[\w-]+:", body[0]):
            key, _, value = body[0].strip()[1:].partition(":")
            options[key] = value.strip()
            body = body[1:]
        if name in ADMONITIONS:
            title = argument if name == "admonition" else ADMONITIONS[name]
            if name == "admonition" and not title:
                raise self.fail("an {admonition} without a title")
            inner = self.lines(body)
            while inner and not inner[-1].strip():
                inner.pop()
            while inner and not inner[0].strip():
                inner.pop(0)
            quoted = [f"> **{self.inline(title)[0]}**", ">"]
            quoted += [f"> {text}" if text.strip() else ">" for text in inner]
            return quoted
        if name == "only":  # Sphinx's: the HTML book shows `html` blocks and never `notebook` ones
            if argument not in ("html", "notebook"):
                raise self.fail(f"{{only}} {argument} (only `html` and `notebook` are known)")
            return self.lines(body) if argument == "notebook" else []
        if name == "math":
            return ["$$", *body, "$$"]
        if name in ("code", "code-block", "sourcecode"):
            return [f"```{argument}", *body, "```"]
        raise self.fail(f"the directive {{{name}}}")


# --- notebooks --------------------------------------------------------------------------------


# Tags of the code cells that the HTML book folds, and the title of each in a copy when the cell
# names no button of its own (mystnb.code_prompt_show).
FOLDED = {"hide-cell": "Solution", "hide-input": "The code"}


def solution_title(cell: dict, default: str = "Solution") -> str:
    """The ``#@title`` of a folded cell: its button's words in the HTML book, less "Show"."""
    prompt = cell.get("metadata", {}).get("mystnb", {}).get("code_prompt_show", "")
    title = re.sub(r"^(show|reveal)\s+", "", str(prompt).strip(), flags=re.I)
    return title[:1].upper() + title[1:] if title else default


def folded_title(cell: dict) -> str | None:
    """The title of a code cell that the copy collapses, or None for a cell shown in full."""
    tags = cell.get("metadata", {}).get("tags", [])
    folded = [tag for tag in FOLDED if tag in tags]
    return solution_title(cell, FOLDED[folded[0]]) if folded else None


def convert_notebook(book: Book, page: str, notebook: dict | None = None) -> dict:
    """The Colab-ready copy of one chapter (by default its source file), as nbformat 4 JSON."""
    if notebook is None:
        notebook = json.loads(_source_path(book.root, page).read_text(encoding="utf-8"))
    notebook = copy.deepcopy(notebook)
    chapter = Chapter(book, page)
    cells = []
    figures = 0
    for cell in notebook["cells"]:
        cell = copy.deepcopy(cell)
        meta = cell.setdefault("metadata", {})
        if cell["cell_type"] == "markdown":
            cell["source"] = chapter.markdown(_source(cell))
            cells.append(cell)
            continue
        if cell["cell_type"] != "code":
            cells.append(cell)
            continue
        source = _source(cell)
        title = folded_title(cell)
        if title is not None:  # a solution or a folded check: collapsed, titled, runnable
            lines = source.split("\n")
            magics = 0
            while magics < len(lines) and lines[magics].startswith("%%"):
                magics += 1  # a cell magic must stay on the first line
            source = "\n".join([*lines[:magics], f"#@title {title}", *lines[magics:]])
            meta["cellView"] = "form"
            meta.setdefault("jupyter", {})["source_hidden"] = True
        cell["source"] = source
        cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
        figure = _caption_of(cell)
        if figure is not None:
            figures += 1
            text = chapter.markdown(str(figure["caption"]))
            source = f"**Fig. {book.figure_number(page, figures)}:** {text}"
            figure_cell = {"cell_type": "markdown", "metadata": {}, "source": source}
            if "id" in cell:
                figure_cell["id"] = f"{cell['id']}-caption"[:64]
            cells.append(figure_cell)
    install = next((c for c in cells if c["cell_type"] == "code"), None)
    if install is not None and book.commit:
        install["source"] = pin_install(install["source"], book)
    gpu = runs_on_a_gpu(notebook)
    first_markdown = next((c for c in cells if c["cell_type"] == "markdown"), None)
    if first_markdown is not None:  # under the title: where this copy comes from
        title, _, rest = first_markdown["source"].partition("\n")
        made_from = f"commit {book.commit[:12]} of " if book.commit else ""
        origin = (
            f"*The Colab copy of a chapter of [{book.config['title']}]({book.page_url(page)}), "
            f"generated from {made_from}the book's source.*"
        )
        head = f"{title}\n\n{origin}\n\n{GPU_NOTE}" if gpu else f"{title}\n\n{origin}"
        first_markdown["source"] = f"{head}\n{rest}".rstrip("\n")
    notebook["cells"] = cells
    metadata = notebook.setdefault("metadata", {})
    metadata["colab"] = {"name": f"{Path(page).name}.ipynb", "provenance": []}
    metadata.pop("accelerator", None)
    if gpu:  # Colab opens the copy with a T4 runtime
        metadata["accelerator"] = GPU_METADATA["accelerator"]
        metadata["colab"].update(GPU_METADATA["colab"])
    return notebook


def runs_on_a_gpu(notebook: dict) -> bool:
    """Whether a chapter's code asks for a GPU (``detect_runtime()``, ``torch.cuda...``)."""
    return any(
        GPU_CODE.search(_source(cell)) for cell in notebook["cells"] if cell["cell_type"] == "code"
    )


def pin_install(source: str, book: Book) -> str:
    """The install cell's ``git+<repository>`` pinned to ``git+<repository>@<commit>``."""
    url = book.config["repository"]["url"].rstrip("/")
    pattern = re.compile(rf"(git\+{re.escape(url)})(?:@[\w./-]+)?(?=[\"'\s])")
    pinned, count = pattern.subn(rf"\g<1>@{book.commit}", source)
    if count != 1:
        raise ConversionError(
            f"the first code cell installs git+{url} {count} times, not once; it should be the "
            "Colab install cell of book/notation.ipynb"
        )
    return pinned


def source_commit(root: Path = ROOT) -> str | None:
    """The commit that the copies are made from, which their install cells install.

    ``$VITBOOK_COMMIT`` when set (the publish workflow passes the commit it builds), else the
    commit checked out in ``root`` (``git rev-parse HEAD``), else ``None``: outside git the
    install cell keeps installing the repository's default branch.

    Raises:
        ValueError: ``VITBOOK_COMMIT`` that is not a commit hash (7 to 40 hex digits).
    """
    given = os.environ.get(COMMIT_VARIABLE, "").strip()
    if given:
        if not COMMIT.fullmatch(given):
            raise ValueError(
                f"{COMMIT_VARIABLE}={given!r} is not a commit hash (7 to 40 hex digits); set "
                f"it to e.g. $(git rev-parse HEAD), or unset it to use the checked-out commit."
            )
        return given
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git
        return None
    head = result.stdout.strip()
    return head if result.returncode == 0 and COMMIT.fullmatch(head) else None


def chapters(book: Book) -> list[str]:
    """The pages of the TOC that are notebooks: those that open in Colab."""
    return [page for page in book.pages if (book.root / f"{page}.ipynb").exists()]


def write_all(
    out: Path = DEFAULT_OUT, root: Path = ROOT, *, commit: str | None = None
) -> list[Path]:
    """Write the Colab copy of every notebook chapter to ``out/<page>.ipynb``; return the paths.

    ``commit``: the commit the install cells install; by default :func:`source_commit`.
    """
    book = load_book(root)
    book.commit = commit or source_commit(root)
    written = []
    for page in chapters(book):
        notebook = convert_notebook(book, page)
        target = out / f"{page}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", "utf-8")
        written.append(target)
    return written


# --- Sphinx: the Colab launch button opens the generated copy ----------------------------------


def point_colab_at_generated_copy(app, pagename, templatename, context, doctree) -> None:
    """Rewrite the theme's Colab button from the source branch to the generated copy's branch."""
    branch = app.config.colab_branch
    source_branch = (app.config.html_theme_options or {}).get("repository_branch", "main")
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if url.startswith(COLAB):
                button["url"] = url.replace(f"/blob/{source_branch}/", f"/blob/{branch}/", 1)


def download_the_copy(app, pagename, templatename, context, doctree) -> None:
    """Point a chapter's ".ipynb" download button at its plain copy, not at the MyST source."""
    if context.get("page_source_suffix") != ".ipynb":
        return
    url = f"{context['pathto'](NOTEBOOKS_DIR, 1)}/{pagename}.ipynb"
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("label") in ("download-source-button", "download-notebook-button"):
                button["url"] = url
                button["tooltip"] = "Download the notebook (plain Markdown, as in Colab)"


def write_copies_into_the_book(app, exception) -> None:
    """Write the plain copies into the HTML book, where the download buttons find them."""
    if exception is not None or app.builder.format != "html":
        return
    write_all(Path(app.outdir) / NOTEBOOKS_DIR, Path(app.srcdir))


def setup(app):
    app.add_config_value("colab_branch", DEFAULT_COLAB_BRANCH, "html")
    # After sphinx-book-theme adds its launch and download buttons (priority 501).
    app.connect("html-page-context", point_colab_at_generated_copy, priority=600)
    app.connect("html-page-context", download_the_copy, priority=600)
    app.connect("build-finished", write_copies_into_the_book)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str]) -> int:
    out = Path(argv[0]).resolve() if argv else DEFAULT_OUT
    try:
        written = write_all(out)
    except ConversionError as error:
        print(f"[colab] {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"[colab] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
