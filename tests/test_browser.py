"""The HTML book in a real browser: offline, free of errors, and every slider responds.

One headless Chromium session (Debian's ``chromium``, driven by Playwright) opens every page of the
build from disk (``file://``, no server), with the network switched off and every request to
anything but a local file refused and recorded. On each page it moves every control of every
interactive figure through all its values and checks that the picture shown is the one drawn for
those values, and changes whenever that picture differs. Screenshots (one per page, one per figure
after its controls have moved) and ``summary.json`` land in ``_build/screenshots/``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from booktools import BROWSER_SUMMARY, BUILD_DIR

pytestmark = pytest.mark.book

SCREENSHOTS = BUILD_DIR / "screenshots"
PAGE_LIMIT_BYTES = 5_000_000  # BOOK.md: keep a page under 5 MB
LOCAL_SCHEMES = {"file", "data", "blob", "about"}
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
REDIRECT = re.compile(r'http-equiv="refresh" content="\d+; ?url=(?P<target>[^"]+)"', re.IGNORECASE)
# Where the book puts an interactive figure (vitbook.widgets) and the parts of one.
EXPLORER = ".vitbook-explorer"
STATE = """root => ({
  ready: root.getAttribute("data-ready"),
  key: root.querySelector("img.vbx-frame").getAttribute("data-key"),
  src: root.querySelector("img.vbx-frame").getAttribute("src"),
  readouts: Array.from(root.querySelectorAll("output")).map(o => o.textContent),
})"""
STORED_FRAMES = """root => {
  const frames = JSON.parse(root.querySelector("script.vbx-frames").textContent);
  const img = root.querySelector("img.vbx-frame");
  frames[img.getAttribute("data-key")] = img.getAttribute("src");
  return frames;
}"""
CONTROLS = """root => Array.from(root.querySelectorAll("[data-param]")).map(c => ({
  name: c.getAttribute("data-param"),
  kind: c.tagName === "SELECT" ? "select" : "range",
  count: c.tagName === "SELECT" ? c.options.length : Number(c.max) + 1,
  labels: c.tagName === "SELECT" ? Array.from(c.options).map(o => o.textContent)
                                 : JSON.parse(c.getAttribute("data-labels")),
}))"""
MATH = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  return {
    sources: document.querySelectorAll("span.math, div.math").length,
    rendered: document.querySelectorAll("mjx-container").length,
    errors: document.querySelectorAll("mjx-merror").length,
    fonts_failed: Array.from(document.fonts).filter(f => f.status === "error").map(f => f.family),
  };
}"""


def book_pages(html_dir: Path) -> list[Path]:
    """Every page of the build: the TOC pages, the index, search and the general index."""
    return sorted(
        page
        for page in html_dir.rglob("*.html")
        if not {"_static", "_sources"} & set(page.relative_to(html_dir).parts)
    )


def local_path(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def move_every_control(page, root, name: str, report: dict) -> None:
    """Move each control of one figure through all its values; check the picture each time."""
    frames = root.evaluate(STORED_FRAMES)
    controls = root.evaluate(CONTROLS)
    state = root.evaluate(STATE)
    assert state["ready"] == "true", f"{name}: the figure's script did not run"
    indices = [int(i) for i in state["key"].split(",")]
    combinations = 1
    for control in controls:
        combinations *= control["count"]
    assert len(frames) == combinations, f"{name}: {len(frames)} frames for {combinations} values"
    assert len(set(frames.values())) == len(frames), f"{name}: two combinations share a picture"
    widgets = root.locator("[data-param]")
    for i, control in enumerate(controls):
        widget = widgets.nth(i)
        previous, changes = state["src"], 0
        if control["kind"] == "range":
            widget.focus()
            widget.press("Home")  # a reader's keyboard: Home, then one step right at a time
        for value in range(control["count"]):
            if control["kind"] == "range" and value > 0:
                widget.press("ArrowRight")
            elif control["kind"] == "select":
                widget.select_option(str(value))
            indices[i] = value
            key = ",".join(map(str, indices))
            state = root.evaluate(STATE)
            where = f"{name}, {control['name']} = {control['labels'][value]!r}"
            assert state["key"] == key, f"{where}: shows frame {state['key']}, expected {key}"
            assert state["src"] == frames[key], f"{where}: the picture is not the one for {key}"
            if control["kind"] == "range":
                readout = state["readouts"][sum(c["kind"] == "range" for c in controls[:i])]
                assert readout == control["labels"][value], f"{where}: the readout says {readout!r}"
            changes += state["src"] != previous
            previous = state["src"]
            report["values_set"] += 1
        assert changes >= control["count"] - 1, f"{name}: {control['name']} left the picture as is"
        report["controls_moved"] += 1
        report["picture_changes"] += changes


@pytest.fixture(scope="module")
def browser_report(built_book: Path, request: pytest.FixtureRequest) -> dict:
    """Visit every page once in headless Chromium and return what happened on each."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail(
            "no `chromium` on the PATH: `python3 tasks.py test` installs it (apt-get install -y "
            "chromium); never `playwright install`.",
            pytrace=False,
        )
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    report = {
        "pages": {},
        "explorers": 0,
        "controls_moved": 0,
        "values_set": 0,
        "picture_changes": 0,
        "requests_blocked": [],
    }
    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            offline=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            for path in book_pages(built_book):
                report["pages"][path.relative_to(built_book).as_posix()] = visit_page(
                    context, path, built_book, report
                )
        finally:
            context.close()
    summary = {
        "pages": len(report["pages"]),
        "explorers": report["explorers"],
        "controls_moved": report["controls_moved"],
        "values_set": report["values_set"],
        "picture_changes": report["picture_changes"],
        "requests_blocked": len(report["requests_blocked"]),
        "largest_page_bytes": max(p["html_bytes"] for p in report["pages"].values()),
        "largest_page_with_resources_bytes": max(
            p["loaded_bytes"] for p in report["pages"].values()
        ),
        "per_page": report["pages"],
    }
    (SCREENSHOTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    request.config.stash[BROWSER_SUMMARY] = summary
    return report


def visit_page(context, path: Path, html_dir: Path, report: dict) -> dict:
    page = context.new_page()
    errors, blocked, loaded = [], [], set()

    def on_console(message) -> None:
        if message.type == "error":
            errors.append(f"console error: {message.text}")

    def on_request(req) -> None:
        if urlsplit(req.url).scheme not in LOCAL_SCHEMES:
            blocked.append(req.url)
        elif (file := local_path(req.url)) is not None:
            loaded.add(file)

    def refuse_remote(route) -> None:
        if urlsplit(route.request.url).scheme in LOCAL_SCHEMES:
            route.continue_()
        else:
            route.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("request", on_request)
    page.on("websocket", lambda socket: blocked.append(socket.url))
    page.route("**/*", refuse_remote)
    name = path.relative_to(html_dir).as_posix()
    page.goto(path.as_uri(), wait_until="load")
    redirect = REDIRECT.search(path.read_text(encoding="utf-8"))
    if redirect:  # index.html sends the reader on to the first page of the book
        page.wait_for_url((path.parent / redirect["target"]).resolve().as_uri())
        page.wait_for_load_state("load")
    math = page.evaluate(MATH)
    stem = name.removesuffix(".html").replace("/", "--")
    page.screenshot(path=SCREENSHOTS / f"{stem}.png", full_page=True)
    explorers = page.locator(EXPLORER)
    count = explorers.count()
    for e in range(count):
        root = explorers.nth(e)
        move_every_control(page, root, f"{name} figure {e + 1}", report)
        root.scroll_into_view_if_needed()
        root.screenshot(path=SCREENSHOTS / f"{stem}--figure-{e + 1}.png")
    page.close()
    report["explorers"] += count
    report["requests_blocked"] += blocked
    html_bytes = path.stat().st_size
    return {
        "html_bytes": html_bytes,
        "loaded_bytes": sum(f.stat().st_size for f in loaded if f.is_file()),
        "explorers": count,
        "math": math,
        "errors": errors,
        "blocked": blocked,
    }


def test_every_page_was_visited(browser_report, built_book):
    assert "book/interactive.html" in browser_report["pages"]
    assert len(browser_report["pages"]) == len(book_pages(built_book))


def test_no_page_asks_another_machine_for_anything(browser_report):
    asked = {name: page["blocked"] for name, page in browser_report["pages"].items()}
    assert not any(asked.values()), f"requests that left the machine: {asked}"


def test_no_page_has_javascript_errors(browser_report):
    errors = {name: page["errors"] for name, page in browser_report["pages"].items()}
    assert not any(errors.values()), f"console and page errors: {errors}"


def test_every_slider_on_every_page_changes_the_picture(browser_report):
    # move_every_control asserted each step; here: the book has figures and they were all moved.
    pages = browser_report["pages"]
    assert pages["book/interactive.html"]["explorers"] >= 5
    assert browser_report["explorers"] == sum(page["explorers"] for page in pages.values())
    assert browser_report["controls_moved"] >= browser_report["explorers"]
    assert (
        browser_report["picture_changes"]
        >= browser_report["values_set"] - browser_report["controls_moved"]
    )


def test_maths_is_typeset_offline(browser_report):
    with_math = {
        name: p["math"] for name, p in browser_report["pages"].items() if p["math"]["sources"]
    }
    assert "book/notation.html" in with_math, "the notation page should have maths"
    for name, math in with_math.items():
        assert math["rendered"] >= math["sources"], f"{name}: MathJax typeset too little: {math}"
        assert math["errors"] == 0 and not math["fonts_failed"], f"{name}: {math}"


def test_every_page_is_under_5_mb(browser_report):
    sizes = {name: page["html_bytes"] for name, page in browser_report["pages"].items()}
    too_big = {name: size for name, size in sizes.items() if size >= PAGE_LIMIT_BYTES}
    assert not too_big, (
        f"pages of {PAGE_LIMIT_BYTES:,} bytes or more (HTML with its figures): {too_big}"
    )
