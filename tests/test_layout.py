"""The package's layout keeps its promises: every name a chapter imports imports, and every
``vitbook.<path>`` that a docstring, a notebook or a document names resolves."""

from __future__ import annotations

import ast
import importlib
import inspect
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
NOT_PYTHON = ("vitbook.css", "vitbook.js", "vitbook.github", "vitbook.widgets.playground.js",
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


# --- layers: the ViT at the top, folders by role, imports only downwards -------------------------

PACKAGE = ROOT / "vitbook"
THE_VIT = ("patches", "positional", "attention", "encoder", "config", "vit", "stem", "axial")
# Each layer imports only itself and the layers before it (a folder's modules may import each
# other). The ViT's modules import no folder; no two folders import each other.
LAYERS = (
    ("_checks", "_files"),
    (*THE_VIT, "baselines", "analysis"),
    ("data",),
    ("train",),
    ("pretrained",),
    ("studies",),
    ("plotting",),
    ("widgets",),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def part(module: str) -> str:
    """The top-level module or folder of ``vitbook.<module...>``."""
    return module.removeprefix("vitbook").lstrip(".").split(".")[0]


def vitbook_imports(path: Path) -> set[str]:
    """Every vitbook module the file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vitbook"):
            if node.module == "vitbook":
                found |= {f"vitbook.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "vitbook"}
    return found


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(PACKAGE.rglob("*.py"))}  # fmt: skip


def test_every_part_of_the_package_has_a_layer():
    parts = {part(name) for name in modules()} - {""}
    assert parts == set(RANK), f"not in LAYERS: {parts - set(RANK)}; gone: {set(RANK) - parts}"


def test_imports_only_run_downwards():
    upward = []
    for name, path in modules().items():
        here = part(name)
        if not here:  # vitbook/__init__.py: the ViT's names only
            assert {part(m) for m in vitbook_imports(path)} <= set(THE_VIT), name
            continue
        for imported in vitbook_imports(path):
            there = part(imported)
            if there and RANK[there] > RANK[here]:
                upward.append(f"{name} imports {imported}")
            if here == "train" and there in THE_VIT:
                upward.append(f"{name} imports the ViT ({imported}): fit is for any model")
    assert not upward, "\n".join(upward)


def test_the_top_shows_the_vit_and_no_module_is_too_long():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 14, top
    assert set(THE_VIT) <= set(top)
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert folders == ["data", "plotting", "pretrained", "studies", "train", "widgets"]
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines())
               for name, path in modules().items()}  # fmt: skip
    assert max(lengths.values()) <= 600, {n: k for n, k in lengths.items() if k > 600}


def test_no_script_is_too_long():
    """A script parses its arguments and runs; what it runs lives in modules (its own private
    ``scripts/_*.py`` or the package), each as short as a package module."""
    lengths = {path.name: len(path.read_text(encoding="utf-8").splitlines())
               for path in sorted((ROOT / "scripts").glob("*.py"))}  # fmt: skip
    assert "train_cifar10.py" in lengths
    assert max(lengths.values()) <= 600, {n: k for n, k in lengths.items() if k > 600}


def test_the_package_docstring_is_the_tree():
    import vitbook

    for folder in ("data", "train", "pretrained", "studies", "plotting", "widgets", "assets"):
        assert re.search(rf"^\s+{folder}/\s+\w", vitbook.__doc__, re.M), folder
    for module in THE_VIT:
        assert f"{module}.py" in vitbook.__doc__, module


# --- CONTRIBUTING.md's map: each chapter and the code it explains -----------------------------

ROW = re.compile(r"^\| \[(?P<title>[^\]]+)\]\(https://[^)]*/book/(?P<page>\w+)\.html\) \| "
                 r"(?P<modules>.*) \|$", re.M)  # fmt: skip


def title(notebook: Path) -> str:
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        found = re.search(r"^# (.+)$", "".join(cell["source"]), re.M)
        if cell["cell_type"] == "markdown" and found:
            return found[1].strip()
    raise AssertionError(f"{notebook} has no title")


def defining_modules(notebook: Path) -> set[str]:
    """The modules that define what the notebook imports from vitbook, with their packages."""
    found = set()
    for source in code_cells(notebook):
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vitbook"):
                for alias in node.names:
                    found.add(node.module)
                    target = resolve(f"{node.module}.{alias.name}")
                    if inspect.ismodule(target):
                        found.add(target.__name__)
                    elif inspect.isclass(target) or callable(target):
                        found.add(getattr(target, "__module__", None) or node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("vitbook")}
    return found | {".".join(m.split(".")[:k]) for m in found for k in range(2, m.count(".") + 1)}


def test_the_chapter_map_is_true():
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    rows = {m["page"]: m for m in ROW.finditer(guide)}
    chapters = [entry for entry in read_toc_chapters() if entry != "book/bibliography"]
    documented = {f"book/{page}" for page in rows}
    reference = {"book/notation"}  # the symbols and the glossary: no module of its own
    assert {c for c in chapters if (ROOT / f"{c}.ipynb").exists()} - reference <= documented, (
        "a chapter is missing from CONTRIBUTING.md's map")  # fmt: skip
    for page, row in rows.items():
        notebook = ROOT / "book" / f"{page}.ipynb"
        assert row["title"] == title(notebook), (page, row["title"], title(notebook))
        listed = re.findall(r"`(vitbook(?:\.\w+)*)`", row["modules"])
        assert listed, page
        used = defining_modules(notebook)
        for module in listed:
            importlib.import_module(module)
            assert module in used, f"{page} does not use {module}; it uses {sorted(used)}"


def read_toc_chapters() -> list[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]
