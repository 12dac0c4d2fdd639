"""How long the book takes to read, and how dense its core is: a report per page.

    python scripts/reading.py             # a table of every page of _toc.yml, in reading order
    python scripts/reading.py --json F    # the same numbers as JSON (tests/test_reading.py)

A reader's pace (the one the book's reviews use): 200 words of prose and 12 shown lines of code a
minute. Code in folded cells (``hide-input``, ``hide-cell``, ``remove-*``) is not counted: a
reader sees it only on asking; nor is a ``bibtex`` block (a citation to copy, not code to read).

**The core** of a page is what a first read needs: everything except

- the sections whose heading begins "Going deeper" (at any level, up to the next heading of the
  same or a higher level that does not begin so),
- the exercises (a heading "Exercises", or one that begins "Exercise"),
- collapsed boxes (an admonition or a ``{dropdown}`` with the class ``dropdown``).

For each page the report gives the core's reading minutes, its prose words, its statistically
qualified sentences per 1,000 words (a sentence that names an interval, "cannot tell", a paired
difference, a seed, a spread, a standard error or deviation or a p-value), its share of sentences
over 40 words, the most intervals in one paragraph of the core, and whether an interval appears in
"What you will learn" or the summary. Last, the minutes from the book's first page to the end of
the cell in which the reader first trains their own ViT (the first code cell of the book that
calls ``optimizer.step()`` or ``opt.step()``), reading each page's core in order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORDS_A_MINUTE, LINES_A_MINUTE = 200, 12
LONG_SENTENCE = 40
FOLDED = {"hide-input", "hide-cell", "remove-cell", "remove-input"}
TRAINS = re.compile(r"\b(?:optimizer|opt)\.step\(\)")
STATISTICAL = re.compile(
    r"95\s*%|\bintervals?\b|\bcannot tell\b|\bcan't tell\b|\bpaired differences?\b|\bseeds?\b"
    r"|\bspread\b|\bstandard (?:errors?|deviations?)\b|\bp\s*[=<]\s*0?\.\d|\bsign-flip\b"
    r"|\bStudent's\b",
    re.IGNORECASE,
)
NOT_READ = ("bibtex", "bib")  # a citation to copy, not code to read
INTERVAL = re.compile(r"95\s*%\s*interval|\binterval\s+[-+\u2212]?\d|\bCI\b", re.IGNORECASE)
BOXES = ("{admonition}", "{note}", "{tip}", "{warning}", "{important}", "{seealso}", "{hint}",
         "{caution}", "{attention}", "{danger}", "{error}", "{dropdown}", "{only}", "{div}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
NOT_CORE = re.compile(r"^(?:Going deeper|Exercises?\b)", re.IGNORECASE)


@dataclass
class Page:
    name: str
    words: int = 0  # core prose words
    code_lines: int = 0  # core code lines shown
    sentences: int = 0
    long_sentences: int = 0
    statistical: int = 0
    most_intervals_in_a_paragraph: int = 0
    intervals_in_outcomes_or_summary: int = 0
    all_words: int = 0  # the whole page, core or not, folded code aside
    all_code_lines: int = 0
    long_examples: list[str] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return self.words / WORDS_A_MINUTE + self.code_lines / LINES_A_MINUTE

    @property
    def all_minutes(self) -> float:
        return self.all_words / WORDS_A_MINUTE + self.all_code_lines / LINES_A_MINUTE

    @property
    def statistical_per_1000(self) -> float:
        return 1000 * self.statistical / self.words if self.words else 0.0

    @property
    def long_share(self) -> float:
        return self.long_sentences / self.sentences if self.sentences else 0.0


class _UniqueKeys(yaml.SafeLoader):
    """YAML that refuses a key named twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is named twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def toc_pages(toc_path: Path | None = None) -> list[str]:
    """The pages of ``_toc.yml`` in reading order: its ``root``, then each part's chapters.

    Raises:
        ValueError: a TOC that is not YAML, is empty, names a key twice, has no ``root``, a
            chapter without ``file``, or a page twice (it would be counted twice).
    """
    toc_path = ROOT / "_toc.yml" if toc_path is None else toc_path
    try:
        toc = yaml.load(toc_path.read_text(encoding="utf-8"), Loader=_UniqueKeys)
    except yaml.YAMLError as error:
        raise ValueError(f"{toc_path} is not a table of contents ({error}); restore it "
                         f"(git checkout -- {toc_path.name}).") from error  # fmt: skip
    if not isinstance(toc, dict) or not isinstance(toc.get("root"), str):
        found = "is empty" if toc is None else "names no root: page"
        raise ValueError(f"{toc_path} {found}; a jb-book TOC names its first page "
                         f"(root: book/intro) and then its parts; restore it (git checkout -- "
                         f"{toc_path.name}).")  # fmt: skip
    where = {toc["root"]: ["root"]}
    for i, part in enumerate(toc.get("parts") or []):
        for j, chapter in enumerate((part or {}).get("chapters") or []):
            if not isinstance(chapter, dict) or not isinstance(chapter.get("file"), str):
                raise ValueError(f"{toc_path}: parts[{i}].chapters[{j}] is {chapter!r}, not "
                                 "a chapter (file: book/NAME).")  # fmt: skip
            where.setdefault(chapter["file"], []).append(f"parts[{i}].chapters[{j}]")
    twice = {page: places for page, places in where.items() if len(places) > 1}
    if twice:
        named = "; ".join(f"{page} at {' and '.join(places)}" for page, places in twice.items())
        raise ValueError(f"{toc_path} names a page twice ({named}), so it would be read and "
                         "counted twice; keep one entry of each page.")  # fmt: skip
    return list(where)


def cells_of(page: str) -> list[tuple[str, str, set[str]]]:
    """``(kind, source, tags)`` of each cell; a Markdown page is one Markdown cell."""
    notebook, markdown = ROOT / f"{page}.ipynb", ROOT / f"{page}.md"
    if markdown.exists() and not notebook.exists():
        return [("markdown", markdown.read_text(encoding="utf-8"), set())]
    restore = (f"restore it (git checkout -- {notebook.relative_to(ROOT)}) or save it again "
               "from Jupyter")
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except FileNotFoundError as error:
        raise ValueError(f"_toc.yml names {page}, but neither {notebook} nor {markdown} "
                         "exists; add the page or remove it from _toc.yml.") from error  # fmt: skip
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{notebook} is not a notebook: not valid JSON ({error}); it was cut "
                         f"short or damaged; {restore}.") from error  # fmt: skip
    except (KeyError, TypeError) as error:
        raise ValueError(f"{notebook} holds no list of cells; {restore}.") from error
    found = []
    for i, cell in enumerate(cells if isinstance(cells, list) else [None]):
        missing = (["a cell"] if not isinstance(cell, dict) else
                   [key for key in ("cell_type", "source", "metadata") if key not in cell])
        if missing:
            raise ValueError(f"{notebook}: cell {i} has no {' and no '.join(missing)} (every "
                             f"cell of a notebook has cell_type, source and metadata); {restore}.")
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        found.append((cell["cell_type"], source, set(cell["metadata"].get("tags", []))))
    return found


def _plain(text: str) -> str:
    """Prose as a reader reads it: roles, links, emphasis and inline maths as words."""
    text = re.sub(r"\{[a-z:-]+\}`([^`]*)`", lambda m: m[1].split("<")[0], text)  # {doc}`x`
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\$[^$]+\$", "x", text)  # an inline formula reads as one word
    return re.sub(r"[*_`]", "", text)


ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "al.", "Fig.", "Eq.", "Sec.", "etc.", "approx.")


def _sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences: split after . ! or ? and a space, not after an abbreviation."""
    sentences, current = [], []
    for word in paragraph.split():
        current.append(word)
        if re.search(r"[.!?][)\"'\u201d]?$", word) and not word.endswith(ABBREVIATIONS):
            sentences.append(" ".join(current))
            current = []
    if current:
        sentences.append(" ".join(current))
    return [s for s in sentences if re.search(r"[A-Za-z]", s)]


def _blocks(markdown: str):
    """``("heading", level, text)``, ``("code", lines)`` and ``("para", text, folded)``."""
    lines = markdown.splitlines()
    i, para, boxes = 0, [], []  # boxes: (fence, collapsed) of each open directive
    fence = re.compile(r"^(\s*)(`{3,}|:{3,})\s*(\{[a-z-]+\})?(.*)$")

    def flush():
        if para:
            yield ("para", " ".join(para), any(dropdown for _, dropdown in boxes))
            para.clear()

    while i < len(lines):
        line = lines[i]
        match = fence.match(line)
        if match:
            yield from flush()
            marks, directive, rest = match[2], match[3] or "", match[4].strip()
            if boxes and boxes[-1][0] == marks and not directive and not rest:
                boxes.pop()  # the closing fence of an open box
                i += 1
                continue
            if directive in BOXES:
                j = i + 1
                options = []
                while j < len(lines) and lines[j].startswith(":") and not fence.match(lines[j]):
                    options.append(lines[j])
                    j += 1
                dropdown = directive == "{dropdown}" or any("dropdown" in o for o in options)
                boxes.append((marks, dropdown))
                if rest:  # the box's title reads as a sentence of its own
                    para.append(rest + ".")
                    yield from flush()
                i = j
                continue
            # a code or maths block: to its closing fence
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(marks):
                j += 1
            body = lines[i + 1 : j]
            language = (rest.split() or [""])[0]
            if directive in ("", "{code-block}", "{code}") and not rest.startswith(
                "{math"
            ) and language.lower() not in NOT_READ:  # fmt: skip
                yield ("code", [b for b in body if b.strip()], any(d for _, d in boxes))
            i = j + 1
            continue
        if line.strip().startswith("$$"):
            yield from flush()
            j = i if line.strip().endswith("$$") and len(line.strip()) > 2 else i + 1
            while j < len(lines) and not lines[j].strip().endswith("$$"):
                j += 1
            i = j + 1
            continue
        heading = HEADING.match(line)
        if heading and not line.startswith("    "):
            yield from flush()
            yield ("heading", len(heading[1]), heading[2])
        elif not line.strip():
            yield from flush()
        elif re.match(r"^\s*(?:[-*+]|\d+\.)\s+", line):
            yield from flush()  # a list item is a paragraph of its own
            para.append(re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", line))
        elif not re.match(r"^\s*\(.*\)=\s*$", line) and not line.startswith("|"):
            para.append(line.strip())
        elif line.startswith("|"):  # a table row: its cells are not sentences
            pass
        i += 1
    yield from flush()


def measure(page: str) -> tuple[Page, float | None]:
    """The page's numbers, and the core minutes up to the end of its first training cell
    (``None`` where it has none)."""
    result = Page(page)
    levels: list[int] = []  # open non-core headings
    section = ""
    until_training: float | None = None
    for kind, source, tags in cells_of(page):
        if kind == "code":
            lines = [line for line in source.splitlines() if line.strip()]
            shown = not (tags & FOLDED)
            if shown:
                result.all_code_lines += len(lines)
                if not levels:
                    result.code_lines += len(lines)
            if until_training is None and TRAINS.search(source):
                until_training = result.minutes
            continue
        if kind != "markdown":
            continue
        for block in _blocks(source):
            if block[0] == "heading":
                _, level, text = block
                while levels and levels[-1] >= level:
                    levels.pop()
                if NOT_CORE.match(text):
                    levels.append(level)
                section = text if level <= 2 else section
                continue
            if block[0] == "code":
                _, lines, folded = block
                if not folded:
                    result.all_code_lines += len(lines)
                    if not levels:
                        result.code_lines += len(lines)
                continue
            _, text, folded = block
            plain = _plain(text)
            words = len(plain.split())
            if folded:
                continue
            result.all_words += words
            if levels:
                continue
            result.words += words
            intervals = len(INTERVAL.findall(text))
            result.most_intervals_in_a_paragraph = max(
                result.most_intervals_in_a_paragraph, intervals
            )
            if re.match(r"(?i)what you will learn|summary", section):
                result.intervals_in_outcomes_or_summary += intervals
            for sentence in _sentences(plain):
                n = len(sentence.split())
                result.sentences += 1
                result.statistical += bool(STATISTICAL.search(sentence))
                if n > LONG_SENTENCE:
                    result.long_sentences += 1
                    result.long_examples.append(sentence[:120])
    return result, until_training


def report(pages: list[str] | None = None) -> dict:
    pages = pages or toc_pages()
    measured, first_training, before = [], None, 0.0
    for name in pages:
        page, until_training = measure(name)
        measured.append(page)
        if first_training is None and until_training is not None:
            first_training = {"page": name, "minutes": round(before + until_training, 1)}
        before += page.minutes
    return {"pages": measured, "first_trained_vit": first_training}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument("--through", default="book/training",
                        help="add the cores' minutes up to this page (default: %(default)s)")
    parser.add_argument("--long", action="store_true", help="list the long sentences of cores")
    args = parser.parse_args(argv)
    if args.json is not None:
        from vitbook import _files  # vitbook imports torch: only a --json run needs it

        try:
            _files.check_output(args.json)
        except _files.ShippedFileError:
            parser.error(f"--json {args.json} lies in vitbook/assets, the recorded files the "
                         "book ships; nothing was written. Write the report elsewhere "
                         "(--json runs/reading.json, say).")  # fmt: skip
        except (OSError, ValueError) as error:
            parser.error(f"--json: {error}")
    try:
        pages = toc_pages()
        if args.through not in pages:
            parser.error(f"--through {args.through} is not a page of _toc.yml; its pages are "
                         f"{', '.join(pages)}.")  # fmt: skip
        result = report(pages)
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    header = (f"{'page':<28}{'core min':>9}{'all min':>9}{'words':>7}{'stat/1k':>8}"
              f"{'>40 w':>7}{'int/par':>8}{'WYWL+sum':>9}")  # fmt: skip
    print(header)
    total, through_total, reached = 0.0, None, False
    for page in result["pages"]:
        total += page.minutes
        name = page.name.removeprefix("book/")
        print(f"{name:<28}{page.minutes:9.1f}{page.all_minutes:9.1f}{page.words:7d}"
              f"{page.statistical_per_1000:8.1f}{100 * page.long_share:6.1f}%"
              f"{page.most_intervals_in_a_paragraph:8d}"
              f"{page.intervals_in_outcomes_or_summary:9d}")  # fmt: skip
        if args.long:
            for sentence in page.long_examples:
                print(f"    > {sentence}")
        if page.name == args.through and not reached:
            through_total, reached = total, True
    print(f"cores from the first page through {args.through}: {round(through_total, 1)} minutes")
    first = result["first_trained_vit"]
    print(f"to the reader's first trained ViT: {first}")
    if args.json:
        data = {
            "pages": [{**asdict(p), "minutes": round(p.minutes, 2),
                       "statistical_per_1000": round(p.statistical_per_1000, 2),
                       "long_share": round(p.long_share, 4)} for p in result["pages"]],
            "through": args.through,
            "through_minutes": through_total,
            "first_trained_vit": first,
        }  # fmt: skip
        _files.write_json(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
