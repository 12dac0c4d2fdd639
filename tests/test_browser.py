"""The HTML book in a real browser: offline, free of errors, legible, and every slider responds.

One headless Chromium session (Debian's ``chromium``, driven by Playwright) opens every page of the
build from disk (``file://``, no server), with the network switched off and every request to
anything but a local file refused and recorded. On each page it moves every control of every
interactive figure through all its values and checks that the picture shown is the one drawn for
those values, and changes whenever that picture differs. It measures what a reader sees at a
1280 px window (the size each image is shown at against the size it was drawn for, alt text,
captions, anything wider than its box, the values each control offers) and then the page's
width in a 390 px window (a phone). Screenshots (one per page at each width, one per figure after
its controls have moved) and ``summary.json`` land in ``_build/screenshots/``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from booktools import BROWSER_SUMMARY, BUILD_DIR, CHROMIUM_FLAGS

# All on the worker that holds the build (pytest-xdist), one Chromium session for every page.
pytestmark = [pytest.mark.book, pytest.mark.xdist_group("book")]

SCREENSHOTS = BUILD_DIR / "screenshots"
PAGE_LIMIT_BYTES = 5_000_000  # BOOK.md: keep a page under 5 MB
LOCAL_SCHEMES = {"file", "data", "blob", "about"}
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
# What a reader sees of the article at this width: every image (shown against intended width,
# alt text, inside a captioned figure or not), every equation, code or output block that is wider
# than its box, and the number of values of every control of the interactive figures.
LAYOUT = """() => {
  const article = document.querySelector("article.bd-article") || document.body;
  const images = Array.from(article.querySelectorAll("img")).map(img => {
    // The width the picture was drawn for: a retina PNG's width (MyST-NB writes it into the
    // style, the interactive figures into the width attribute), else its pixel width.
    const intended = parseFloat(img.style.width) || Number(img.getAttribute("width"))
      || img.naturalWidth;
    const box = img.getBoundingClientRect();
    const figure = img.closest("figure");
    return {
      src: (img.getAttribute("src") || "").slice(0, 60),
      shown: box.width,
      // shown height / width against the picture's own: 1 unless the page stretches it
      aspect: img.naturalWidth && box.width
        ? (box.height / box.width) / (img.naturalHeight / img.naturalWidth) : 1,
      intended: intended,
      alt: (img.getAttribute("alt") || "").trim(),
      captioned: !!(figure && figure.querySelector("figcaption")),
    };
  });
  const wide = [];
  const kinds = [["equation", "div.math, mjx-container[display='true']"],
                 ["code", ".cell_input pre, div.highlight pre"],
                 ["output", ".cell_output pre"]];
  for (const [kind, selector] of kinds) {
    for (const box of article.querySelectorAll(selector)) {
      if (box.closest(".cell_output") && kind === "code") continue;
      if (box.scrollWidth > box.clientWidth + 1) {
        wide.push({kind: kind, by: box.scrollWidth - box.clientWidth,
                   text: box.textContent.trim().slice(0, 60)});
      }
    }
  }
  const controls = Array.from(article.querySelectorAll(".vitbook-explorer [data-param]")).map(
    c => ({kind: c.tagName === "SELECT" ? "menu" : "slider",
           values: c.tagName === "SELECT" ? c.options.length : Number(c.max) + 1}));
  return {images: images, wide: wide, controls: controls};
}"""
PAGE_WIDTH = "() => document.documentElement.scrollWidth"
HASHED_NAME = re.compile(r"[0-9a-f]{32,}")  # an image named by its hash: no real alt text
PHONE = {"width": 390, "height": 844}
MIN_SHOWN_FRACTION = 0.85  # an image shown smaller than this has text below the 10 px floor
MIN_CAPTIONED = 0.9  # share of the content images that sit in a numbered, captioned figure
MIN_SLIDER_VALUES = 5  # fewer values belong in a menu
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


# Session scope: under pytest-xdist a module-scoped fixture is set up again whenever a worker
# runs a test of another module in between, and this one takes a minute.
@pytest.fixture(scope="session")
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
        "reader": reader_figures(report["pages"]),
        "per_page": report["pages"],
    }
    (SCREENSHOTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    request.config.stash[BROWSER_SUMMARY] = summary
    return report


def chapter_pages(pages: dict) -> dict:
    """The pages of the book's chapters and appendices (search and index pages aside)."""
    return {name: page for name, page in pages.items() if name.startswith("book/")}


def reader_figures(pages: dict) -> dict:
    """What the layout checks measured over the chapter pages, for the summary."""
    chapters = chapter_pages(pages)
    images = [image for page in chapters.values() for image in page["layout"]["images"]]
    controls = [c for page in chapters.values() for c in page["layout"]["controls"]]
    wide = [w for page in chapters.values() for w in page["layout"]["wide"]]
    return {
        "images": len(images),
        "images_shown_small": sum(shown_fraction(i) < MIN_SHOWN_FRACTION for i in images),
        "smallest_shown_fraction": round(min(map(shown_fraction, images), default=1.0), 3),
        "images_without_alt": sum(not has_alt(i) for i in images),
        "images_captioned": sum(i["captioned"] for i in images),
        "wider_than_box": {
            k: sum(w["kind"] == k for w in wide) for k in ("equation", "code", "output")
        },
        "sliders": sum(c["kind"] == "slider" for c in controls),
        "sliders_under_5_values": sum(
            c["kind"] == "slider" and c["values"] < MIN_SLIDER_VALUES for c in controls
        ),
        "single_valued_controls": sum(c["values"] < 2 for c in controls),
        "pages_wider_than_a_phone": sorted(
            n for n, p in pages.items() if p["phone_width"] > PHONE["width"]
        ),
    }


def shown_fraction(image: dict) -> float:
    return image["shown"] / image["intended"] if image["intended"] else 1.0


def has_alt(image: dict) -> bool:
    return bool(image["alt"]) and not HASHED_NAME.search(image["alt"])


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
    layout = page.evaluate(LAYOUT)
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(100)  # let the theme's layout settle at the new width
    phone_width = page.evaluate(PAGE_WIDTH)
    phone_layout = page.evaluate(LAYOUT)
    page.screenshot(path=SCREENSHOTS / f"{stem}--phone.png", full_page=True)
    page.close()
    report["explorers"] += count
    report["requests_blocked"] += blocked
    html_bytes = path.stat().st_size
    return {
        "html_bytes": html_bytes,
        "loaded_bytes": sum(f.stat().st_size for f in loaded if f.is_file()),
        "explorers": count,
        "layout": layout,
        "layout_1280": layout,
        "layout_390": phone_layout,
        "phone_width": phone_width,
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


# --- what a reader sees: legible figures, nothing wider than its box, phones ----------------------


def test_every_image_is_shown_at_its_intended_size(browser_report):
    small = {
        name: [
            (i["src"], round(shown_fraction(i), 2))
            for i in page["layout"]["images"]
            if shown_fraction(i) < MIN_SHOWN_FRACTION
        ]
        for name, page in chapter_pages(browser_report["pages"]).items()
    }
    assert not any(small.values()), (
        f"images shown at less than {MIN_SHOWN_FRACTION} of the width they were drawn for (their "
        f"text is then under 10 px): {small}"
    )


def test_every_image_keeps_its_aspect_ratio(browser_report):
    for width in ("1280", "390"):
        stretched = {
            name: [
                (i["src"], round(i["aspect"], 3))
                for i in page[f"layout_{width}"]["images"]
                if abs(i["aspect"] - 1) > 0.02
            ]
            for name, page in chapter_pages(browser_report["pages"]).items()
        }
        assert not any(stretched.values()), f"images stretched at {width} px: {stretched}"


def test_no_equation_code_or_output_is_wider_than_its_box(browser_report):
    wide = {
        name: page["layout"]["wide"]
        for name, page in chapter_pages(browser_report["pages"]).items()
        if page["layout"]["wide"]
    }
    assert not wide, f"blocks that scroll sideways at a 1280 px window: {wide}"


def test_every_image_has_alt_text_and_most_are_captioned_figures(browser_report):
    images = {
        name: page["layout"]["images"]
        for name, page in chapter_pages(browser_report["pages"]).items()
    }
    without = {n: [i["src"] for i in found if not has_alt(i)] for n, found in images.items()}
    assert not any(without.values()), f"images without alt text: {without}"
    every = [i for found in images.values() for i in found]
    captioned = sum(i["captioned"] for i in every)
    assert every and captioned >= MIN_CAPTIONED * len(every), (
        f"{captioned} of {len(every)} images are in a captioned figure; uncaptioned: "
        f"{ {n: [i['src'] for i in f if not i['captioned']] for n, f in images.items()} }"
    )


def test_every_control_is_worth_moving(browser_report):
    controls = {
        name: page["layout"]["controls"]
        for name, page in chapter_pages(browser_report["pages"]).items()
    }
    few = {
        name: [
            c
            for c in found
            if c["values"] < 2 or (c["kind"] == "slider" and c["values"] < MIN_SLIDER_VALUES)
        ]
        for name, found in controls.items()
    }
    assert not any(few.values()), (
        f"sliders under {MIN_SLIDER_VALUES} values or stuck controls: {few}"
    )
    assert sum(map(len, controls.values())) >= 5, "the book's interactive figures have controls"


def test_no_page_scrolls_sideways_on_a_phone(browser_report):
    wide = {
        name: page["phone_width"]
        for name, page in browser_report["pages"].items()
        if page["phone_width"] > PHONE["width"]
    }
    assert not wide, f"pages wider than a {PHONE['width']} px window (CSS px): {wide}"
