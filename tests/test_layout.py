"""The package's layout keeps its promises: every name a chapter imports imports, and every
``vitbook.<path>`` that a docstring, a notebook or a document names resolves."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "scripts" / "README.md",
             ROOT / "benchmarks" / "README.md", *sorted((ROOT / "book").glob("*.md"))]  # fmt: skip
# A dotted vitbook path in prose or code: vitbook.train.fit, vitbook.plotting. Not a file name
# (vitbook.css, vitbook.js), the published site (vitbook.github.io) or the page script's
# JavaScript objects (vitbook.playgrounds...), which the lookbehind and the exclusions skip.
MENTION = re.compile(r"(?<![\w/.-])vitbook(?:\.[A-Za-z_]\w*)+")
NOT_PYTHON = ("vitbook.css", "vitbook.js", "vitbook.github", "vitbook.playground.js",
              "vitbook.playgrounds", "vitbook.playgroundMath")  # fmt: skip


def code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def chapter_imports() -> dict[tuple[str, str], list[str]]:
    """``(module, name) -> notebooks`` of every ``from vitbook... import name`` in a chapter
    (``name`` is ``""`` for ``import vitbook...``)."""
    found: dict[tuple[str, str], list[str]] = {}
    for notebook in NOTEBOOKS:
        for source in code_cells(notebook):
            lines = [line for line in source.splitlines()
                     if not line.lstrip().startswith(("%", "!"))]  # fmt: skip
            try:
                tree = ast.parse("\n".join(lines))
            except SyntaxError:  # an exercise stub may not parse alone
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vitbook"):
                    for alias in node.names:
                        found.setdefault((node.module, alias.name), []).append(notebook.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] == "vitbook":
                            found.setdefault((alias.name, ""), []).append(notebook.name)
    return found


def resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then its attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(path)


def test_every_name_the_chapters_import_imports():
    imports = chapter_imports()
    assert len(imports) > 100  # the chapters import vitbook throughout (151 names at 9a3c1be)
    missing = []
    for (module, name), notebooks in sorted(imports.items()):
        try:
            imported = importlib.import_module(module)
            if name and name != "*" and not hasattr(imported, name):
                importlib.import_module(f"{module}.{name}")  # from vitbook import ladder
        except (ImportError, AttributeError) as error:
            missing.append(f"{module}.{name} ({', '.join(sorted(set(notebooks)))}): {error}")
    assert not missing, "\n".join(missing)


def mentions() -> dict[str, set[str]]:
    """Every ``vitbook.<path>`` named in the package's docstrings and comments, the notebooks
    and the documents, with where."""
    found: dict[str, set[str]] = {}
    sources = [*sorted((ROOT / "vitbook").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py")),
               *NOTEBOOKS, *[d for d in DOCUMENTS if d.exists()]]  # fmt: skip
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for match in MENTION.finditer(text):
            name = match[0].rstrip(".")
            if not name.startswith(NOT_PYTHON):
                found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_vitbook_path_that_is_mentioned_resolves():
    found = mentions()
    assert len(found) > 100
    broken = []
    for name, where in sorted(found.items()):
        try:
            resolve(name)
        except (ImportError, AttributeError) as error:
            broken.append(f"{name} in {', '.join(sorted(where))}: {error}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("text", ["see vitbook.css", "at vitbook.github.io", "vitbook.js"])
def test_file_names_and_the_site_are_not_taken_for_modules(text):
    assert all(m[0].startswith(NOT_PYTHON) for m in MENTION.finditer(text))
