"""Helpers for the book tests: where things are, how to read the TOC, how to start kernels."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build"
HTML_DIR = BUILD_DIR / "html"
BUILD_LOG = BUILD_DIR / "book-build.log"
BUILD_RUN = BUILD_DIR / "book-build.run"  # which test run built _build/html, and its exit code
BUILD_COMMAND = ("jupyter-book", "build", ".", "--all", "-W", "-n", "--keep-going")
LOG_TAIL_LINES = 80
# What the browser test saw (pages, figures, controls moved, requests refused), for the summary
# that tests/conftest.py prints at the end of the run.
BROWSER_SUMMARY = pytest.StashKey[dict]()
# Headless Chromium for the browser tests: Debian's `chromium` (never `playwright install`), no
# sandbox (tests may run as root), and nothing that would reach for the network on its own.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)
# How the classic Notebook inserts an HTML output (jQuery's .html()): the markup first, then each
# inline script evaluated from a temporary <script> in <head>, so that document.currentScript is
# not inside the output. A page defines it with <script>{INSERT_LIKE_JQUERY}</script>.
INSERT_LIKE_JQUERY = """window.insertLikeJQuery = function (id, html) {
  var target = document.getElementById(id);
  target.innerHTML = html;
  var scripts = target.querySelectorAll("script");
  for (var i = 0; i < scripts.length; i++) {
    var type = scripts[i].getAttribute("type");
    if (type && type !== "text/javascript") continue;
    var script = document.createElement("script");
    script.text = scripts[i].textContent;
    document.head.appendChild(script).parentNode.removeChild(script);
  }
};"""


def venv_executable(name: str) -> str:
    """The console script `name` installed beside the running Python (the venv's own copy)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def kernel_env() -> dict[str, str]:
    """The environment for subprocesses that start notebook kernels.

    The venv comes first on PATH. MPLBACKEND is removed: the test command sets it to Agg for
    pytest itself, but a kernel that inherits it would draw no figures into the notebook.
    """
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")  # no downloads at test time (see tasks.py)
    return env


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def read_yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


def toc_entries(toc: dict) -> list[str]:
    """Every `file` of a jb-book `_toc.yml`, root first, in reading order, without suffix."""
    entries = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            if "file" in item:
                entries.append(item["file"])
            for key in ("parts", "chapters", "sections"):
                walk(item.get(key, []))

    walk([{key: toc.get(key, []) for key in ("parts", "chapters")}])
    return entries


PAGE_SUFFIXES = (".ipynb", ".md")


def source_files(entry: str) -> list[Path]:
    """The source files that a TOC entry may name (one, when the book is consistent)."""
    return [
        ROOT / f"{entry}{suffix}"
        for suffix in PAGE_SUFFIXES
        if (ROOT / f"{entry}{suffix}").exists()
    ]


def book_sources() -> list[Path]:
    """Every page source under book/, checkpoints aside."""
    return sorted(
        path
        for suffix in PAGE_SUFFIXES
        for path in (ROOT / "book").rglob(f"*{suffix}")
        if ".ipynb_checkpoints" not in path.parts
    )


def toc_notebooks() -> list[Path]:
    """The notebooks listed in _toc.yml, in reading order."""
    entries = toc_entries(read_yaml("_toc.yml"))
    return [ROOT / f"{entry}.ipynb" for entry in entries if (ROOT / f"{entry}.ipynb").exists()]


def explorer_frames(html: str) -> tuple[dict[str, str], str]:
    """All frames of a static figure by key, and the key of the frame shown first."""
    stored = re.search(r'<script type="application/json" class="vbx-frames">(.*?)</script>', html)
    first = re.search(r'<img class="vbx-frame" data-key="([\d,]*)" src="([^"]+)"', html)
    frames = json.loads(stored[1])
    assert first[1] not in frames, "the first frame is stored once, in the <img>"
    return {**frames, first[1]: first[2]}, first[1]
