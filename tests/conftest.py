"""Shared fixtures for the book tests: the repository layout and one HTML build per session."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from booktools import (
    BROWSER_SUMMARY,
    BUILD_COMMAND,
    BUILD_DIR,
    BUILD_LOG,
    BUILD_RUN,
    HTML_DIR,
    LOG_TAIL_LINES,
    ROOT,
    SOURCE_DIR,
    describe_numerics,
    execute_every_notebook,
    foreign_numerics,
    kernel_env,
    prepare_sources,
    read_yaml,
    run_id,
    tail,
    toc_notebooks,
    venv_executable,
)
from filelock import FileLock

RUN_STARTED = pytest.StashKey[float]()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def book_config() -> dict:
    return read_yaml("_config.yml")


@pytest.fixture(scope="session")
def toc() -> dict:
    return read_yaml("_toc.yml")


@pytest.fixture(scope="session")
def built_book() -> Path:
    """Build the HTML book once per test run, strictly, into _build/html, and return that folder.

    Every notebook of the TOC is executed once per test run, by nbval (``execute_notebook`` in
    tests/booktools.py, which the notebook tests of tests/test_book.py call too); the build reads
    the executed copies and executes nothing again. Later tests (browser tests, page-size checks)
    reuse this build. The full log is kept in _build/book-build.log; a failed build fails every
    test that asks for it, showing the log's end (a notebook that fails nbval fails the build,
    with nbval's report). Under pytest-xdist the tests that use the build share one worker
    (``xdist_group`` "book"), and a lock makes sure that a worker that asks anyway reuses this
    run's build instead of building into the same folder at the same time.
    """
    BUILD_DIR.mkdir(exist_ok=True)
    with FileLock(BUILD_DIR / "book-build.lock"):
        if BUILD_RUN.exists() and BUILD_RUN.read_text(encoding="utf-8").split("\n")[0] == run_id():
            returncode = int(BUILD_RUN.read_text(encoding="utf-8").split("\n")[1])
            log = BUILD_LOG.read_text(encoding="utf-8")
        else:
            returncode, log = build_book()
            BUILD_RUN.write_text(f"{run_id()}\n{returncode}\n", encoding="utf-8")
    if returncode != 0:
        pytest.fail(
            f"`{' '.join(BUILD_COMMAND)}` failed with exit code {returncode}. "
            f"Last {LOG_TAIL_LINES} lines of {BUILD_LOG}:\n{tail(log)}",
            pytrace=False,
        )
    return HTML_DIR


def build_book() -> tuple[int, str]:
    """Execute every notebook (once per run), then run the strict build on the executed copy;
    return its exit code and log (also written to BUILD_LOG)."""
    failed = [e for e in execute_every_notebook(toc_notebooks()) if e.returncode != 0]
    if failed:
        log = "\n\n".join(
            f"nbval failed on {e.notebook.relative_to(ROOT)} (exit code {e.returncode}):\n"
            f"{tail(e.log)}"
            for e in failed
        )
        BUILD_LOG.write_text(log, encoding="utf-8")
        return 1, log
    prepare_sources()
    command = [venv_executable(BUILD_COMMAND[0]), *BUILD_COMMAND[1:]]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=kernel_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    BUILD_LOG.write_text(result.stdout, encoding="utf-8")
    return result.returncode, result.stdout


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RUN_STARTED] = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config):
    """Print what the browser test of the HTML book saw, when it ran in this test run.

    Under pytest-xdist the browser test runs in a worker, whose stash the controller cannot see:
    the summary then comes from the ``summary.json`` that the test wrote during this run.
    """
    started = config.stash.get(RUN_STARTED, float("inf"))
    stamps = [p for p in SOURCE_DIR.rglob("*.ipynb.run") if p.stat().st_mtime >= started]
    if stamps:  # notebooks ran in this test run: under which arithmetic
        terminalreporter.write_sep("-", "the notebooks' arithmetic")
        terminalreporter.write_line(
            f"{len(stamps)} notebooks executed by nbval under "
            f"{describe_numerics(foreign_numerics())}"
            " (another machine's kernels and threads than `python3 tasks.py book`, which uses "
            "this machine's own: tests/booktools.py, foreign_numerics)"
        )
    summary = config.stash.get(BROWSER_SUMMARY, None)
    written = BUILD_DIR / "screenshots" / "summary.json"
    if summary is None and written.exists():
        if written.stat().st_mtime >= config.stash.get(RUN_STARTED, float("inf")):
            summary = json.loads(written.read_text(encoding="utf-8"))
    if summary is None:
        return
    terminalreporter.write_sep("-", "the HTML book in headless Chromium")
    terminalreporter.write_line(
        f"{summary['pages']} pages, {summary['explorers']} interactive figures, "
        f"{summary['controls_moved']} controls moved through {summary['values_set']} values "
        f"({summary['picture_changes']} picture changes), "
        f"{summary['requests_blocked']} requests to other machines refused; largest page "
        f"{summary['largest_page_bytes'] / 1e6:.2f} MB of HTML, "
        f"{summary['largest_page_with_resources_bytes'] / 1e6:.2f} MB with everything it loads"
    )
    reader = summary["reader"]
    terminalreporter.write_line(
        f"at 1280 px: {reader['images']} images, {reader['images_shown_small']} shown under 0.85 "
        f"of their size (smallest {reader['smallest_shown_fraction']}), "
        f"{reader['images_without_alt']} without alt text, {reader['images_captioned']} in "
        f"captioned figures; wider than their box: {reader['wider_than_box']}; "
        f"{reader['sliders']} sliders, {reader['sliders_under_5_values']} under 5 values, "
        f"{reader['single_valued_controls']} single-valued controls; at 390 px, pages wider "
        f"than the window: {reader['pages_wider_than_a_phone'] or 'none'}"
    )
    terminalreporter.write_line(
        f"every control moved again in 390 and 768 px windows: "
        f"{summary['pictures_checked_in_narrow_windows']} changed pictures, each checked to lie "
        "inside the window"
    )
    screens = summary["screens"]
    lengths = ", ".join(
        f"{name.removeprefix('book/').removesuffix('.html')} {n:g}"
        for name, n in sorted(screens.items(), key=lambda item: -item[1])
    )
    median = statistics.median(screens.values()) if screens else 0
    terminalreporter.write_line(
        f"page lengths in desktop screens (height at 1280 px / 800 px), median {median:g}: "
        f"{lengths}"
    )
    terminalreporter.write_line(f"screenshots and summary.json: {BUILD_DIR / 'screenshots'}")
