"""Shared fixtures for the book tests: the repository layout and one HTML build per session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from booktools import (
    BROWSER_SUMMARY,
    BUILD_COMMAND,
    BUILD_DIR,
    BUILD_LOG,
    HTML_DIR,
    LOG_TAIL_LINES,
    ROOT,
    kernel_env,
    read_yaml,
    tail,
    venv_executable,
)


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
    """Build the HTML book once per session, strictly, into _build/html, and return that folder.

    Later tests (browser tests, page-size checks) reuse this build. The full log is kept in
    _build/book-build.log; a failed build fails every test that asks for it, showing the log's end.
    """
    BUILD_DIR.mkdir(exist_ok=True)
    command = [venv_executable(BUILD_COMMAND[0]), *BUILD_COMMAND[1:]]
    # Built under MPLBACKEND=Agg on purpose, as a headless CI runner may set it: the book must
    # keep every figure all the same (book/_ext/figure_guard.py fails the build otherwise).
    result = subprocess.run(
        command,
        cwd=ROOT,
        env={**kernel_env(), "MPLBACKEND": "Agg"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    BUILD_LOG.write_text(result.stdout, encoding="utf-8")
    if result.returncode != 0:
        pytest.fail(
            f"`{' '.join(BUILD_COMMAND)}` failed with exit code {result.returncode}. "
            f"Last {LOG_TAIL_LINES} lines of {BUILD_LOG}:\n{tail(result.stdout)}",
            pytrace=False,
        )
    return HTML_DIR


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config):
    """Print what the browser test of the HTML book saw, when it ran."""
    summary = config.stash.get(BROWSER_SUMMARY, None)
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
    terminalreporter.write_line(f"screenshots and summary.json: {BUILD_DIR / 'screenshots'}")
