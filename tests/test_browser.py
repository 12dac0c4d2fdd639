"""The HTML book in a real browser: offline, free of errors, legible, and every slider responds.

One headless Chromium session (Debian's ``chromium``, driven by Playwright) opens every page of the
build from disk (``file://``, no server), with the network switched off and every request to
anything but a local file refused and recorded. On each page it moves every control of every
interactive figure through all its values and checks that the picture shown is the one drawn for
those values, and changes whenever that picture differs. It measures what a reader sees at a
1280 px window (the size each image is shown at against the size it was drawn for, alt text,
captions, anything wider than its box, the values each control offers) and checks that the menu
button folds the chapter list away and back. In a 390 px window (a phone) it measures the page's
width, the size of every figure's text as shown and the shadows that mark boxes scrolling
sideways; at 390 and at 768 px (a tablet) it opens the chapter list from the menu button that a
reader sees, and at 390 px the page contents, and follows a link in each. Screenshots (one per page
at each width, its first screen, or the whole page with ``VITBOOK_SCREENSHOTS=full``; the chapter
list open at 390 and 768 px; one per figure after its controls have moved) and ``summary.json``
land in ``_build/screenshots/``. The theme's transitions are switched off (``NO_MOTION``), so that
a check waits for the next frames rather than for a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from booktools import (
    BROWSER_SUMMARY,
    BUILD_DIR,
    CHROMIUM_FLAGS,
    ROOT,
    browser_path,
    read_yaml,
    toc_entries,
)

from vitbook.plotting.style import CSS_PX_PER_INCH, MIN_FONT_SIZE

# All on the worker that holds the build (pytest-xdist), one Chromium session for every page.
pytestmark = [pytest.mark.book, pytest.mark.xdist_group("book")]

SCREENSHOTS = BUILD_DIR / "screenshots"
# Screenshots are for people to look at; no test reads them back. By default each page gets its
# first screen at each width; VITBOOK_SCREENSHOTS=full takes whole pages instead (up to 1280 x
# 30,000 px, as JPEG, about half the time of a PNG), which costs about a minute more.
WHOLE_PAGES = os.environ.get("VITBOOK_SCREENSHOTS", "") == "full"
PAGE_SHOT = {"type": "jpeg", "quality": 80, "full_page": WHOLE_PAGES}
# The theme's transitions (a sidebar sliding out in 0.25 s, a modal fading in) switched off, so
# that a test waits for two frames after a click instead of a fixed time. Nothing else changes.
NO_MOTION = (
    "*, *::before, *::after { transition: none !important; animation: none !important;"
    " scroll-behavior: auto !important; }"
)
PAGE_LIMIT_BYTES = 5_000_000  # BOOK.md: keep a page under 5 MB
LOCAL_SCHEMES = {"file", "data", "blob", "about"}
REDIRECT = re.compile(r'http-equiv="refresh" content="\d+; ?url=(?P<target>[^"]+)"', re.IGNORECASE)
# Where the book puts an interactive figure (vitbook.widgets) and the parts of one.
EXPLORER = ".vitbook-explorer"
STATE = """root => ({
  ready: root.getAttribute("data-ready"),
  key: root.getAttribute("data-key"),
  srcs: Array.from(root.querySelectorAll("img.vbx-piece"), img => img.getAttribute("src")),
  readouts: Array.from(root.querySelectorAll("output")).map(o => o.textContent),
})"""
# Every frame's pictures (one per piece of the figure), by key: the stored ones, and the first
# frame's, which only its <img>s hold.
STORED_FRAMES = """root => {
  const stored = JSON.parse(root.querySelector("script.vbx-frames").textContent);
  const pieces = Array.from(root.querySelectorAll("img.vbx-piece"));
  const first = stored.frames[root.getAttribute("data-key")];  // before any control moved
  pieces.forEach((img, k) => { stored.pieces[k][first[k]] = img.getAttribute("src"); });
  const frames = {};
  for (const [key, chosen] of Object.entries(stored.frames)) {
    frames[key] = chosen.map((variant, k) => stored.pieces[k][variant]);
  }
  return frames;
}"""
# Where each picture of a figure is in the window, horizontally (CSS px), and how wide it is
# shown against the width it was drawn for.
PIECES = """root => Array.from(root.querySelectorAll("img.vbx-piece"), img => {
  const box = img.getBoundingClientRect();
  return {left: box.left, right: box.right, shown: box.width,
          intended: Number(img.getAttribute("width"))};
})"""
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
PAGE_HEIGHT = "() => document.documentElement.scrollHeight"
SCREEN_PX = 800  # a desktop screen, for page lengths: page height at 1280 px / 800 px
MAX_SCREENS = 30  # no page longer than this
MAX_MEDIAN_SCREENS = 20  # and the median page no longer than this
HASHED_NAME = re.compile(r"[0-9a-f]{32,}")  # an image named by its hash: no real alt text
# Alt text that says nothing about the picture (an interactive figure whose drawing function had
# no docstring once said the first; its values in brackets follow).
GENERIC_ALT = re.compile(r"^(a figure with controls|a figure|figure|image|picture)\b", re.I)
PHONE = {"width": 390, "height": 844}
TABLET = {"width": 768, "height": 1024}
DESKTOP = {"width": 1280, "height": 900}
# The smallest text of a figure at the width it was drawn for (vitbook.plotting.style: 8 pt at
# 100 CSS px per inch, 11.1 px), and the least a phone reader should get without zooming.
FIGURE_TEXT_PX = MIN_FONT_SIZE / 72 * CSS_PX_PER_INCH
MIN_PHONE_TEXT_PX = 9
# What a phone reader gets of the figures: each image's width as shown against the width it was
# drawn for, the text of the interactive figures (HTML), and every box that scrolls sideways
# (a figure's pan box, a display equation, code or printed output) with the shadows that say so.
PHONE_READING = """() => {
  const article = document.querySelector("article.bd-article") || document.body;
  const images = Array.from(article.querySelectorAll("img")).map(img => ({
    src: (img.getAttribute("src") || "").slice(0, 60),
    shown: img.getBoundingClientRect().width,
    intended: parseFloat(img.style.width) || Number(img.getAttribute("width"))
      || img.naturalWidth,
  }));
  let smallestHtmlText = null;
  for (const root of article.querySelectorAll(".vitbook-explorer, .vitbook-playground")) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const element = node.parentElement;
      if (!node.textContent.trim() || ["SCRIPT", "STYLE"].includes(element.tagName)) continue;
      if (!element.getClientRects().length) continue;
      const size = parseFloat(getComputedStyle(element).fontSize);
      smallestHtmlText = smallestHtmlText === null ? size : Math.min(smallestHtmlText, size);
    }
  }
  const boxes = Array.from(article.querySelectorAll(
    ".vb-pan-box, div.math mjx-container, div.highlight > pre"));
  const scrolling = boxes.filter(box => box.scrollWidth > box.clientWidth + 1).map(box => {
    const frame = box.closest(".vb-scroll-frame");
    return {
      kind: box.matches("mjx-container") ? "equation" : box.matches("pre") ? "code" : "figure",
      text: (box.textContent || box.getAttribute("src") || "").trim().slice(0, 40),
      frame: frame ? frame.className : null,
    };
  });
  // Result tables (vitbook.plotting.tables.Table): how far each reaches past the column, if at all.
  const column = article.getBoundingClientRect().right;
  const tables = Array.from(article.querySelectorAll("table.vb-table"), table => ({
    text: table.textContent.trim().slice(0, 40),
    over: Math.max(table.getBoundingClientRect().right - column,
                   table.scrollWidth - table.clientWidth),
  }));
  return {images: images, smallest_html_text: smallestHtmlText, scrolling: scrolling,
          tables: tables};
}"""
# Scroll every box that scrolls sideways to its far end (or back to its start).
SCROLL_BOXES = """(end) => {
  for (const box of document.querySelectorAll(".vb-scroll-frame.vb-scrolls .vb-scroll-box")) {
    box.scrollLeft = end ? box.scrollWidth : 0;
  }
}"""
EDGE_SHADOWS = """() => Array.from(document.querySelectorAll(".vb-scroll-frame.vb-scrolls")).map(
  frame => ({left: frame.classList.contains("vb-more-left"),
             right: frame.classList.contains("vb-more-right"),
             shadow: getComputedStyle(frame, "::after").backgroundImage}))"""
# A side panel of the theme (a <dialog>): open or not, its size, the links a reader sees in it
# and whether the first of them in view is the element under a finger on its centre.
PANEL = """(id) => {
  const dialog = document.getElementById(id);
  const box = dialog.getBoundingClientRect();
  const links = Array.from(dialog.querySelectorAll("a[href]")).filter(
    a => a.getClientRects().length && getComputedStyle(a).visibility !== "hidden");
  const inView = links.find(a => {
    const r = a.getBoundingClientRect();
    return r.width > 0 && r.top >= box.top && r.bottom <= Math.min(box.bottom, innerHeight);
  });
  let tappable = false;
  if (inView) {
    const r = inView.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    tappable = !!hit && (hit === inView || inView.contains(hit));
  }
  return {open: dialog.open, width: box.width, height: box.height, tappable: tappable,
          links: links.map(a => ({href: a.href.split("#")[0], hash: a.hash,
                                  raw: a.getAttribute("href")}))};
}"""
SIDEBAR = """() => {
  const sidebar = document.getElementById("pst-primary-sidebar");
  const box = sidebar.getBoundingClientRect();
  return {hidden: sidebar.classList.contains("pst-sidebar-hidden"),
          visibility: getComputedStyle(sidebar).visibility, right: box.right};
}"""
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


def toc_page_urls(html_dir: Path) -> set[str]:
    """The address of every page of _toc.yml in the build: what the chapter list links to."""
    entries = toc_entries(read_yaml("_toc.yml"))
    return {(html_dir / f"{entry}.html").resolve().as_uri() for entry in entries}


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


def move_every_control(
    page, root, name: str, report: dict, frames: dict, window: dict | None = None
) -> list:
    """Move each control of one figure through all its values; check the picture each time.

    ``frames`` are the figure's pictures by key (``STORED_FRAMES``, read before any control
    moved). With ``window`` (a phone's or a tablet's), also check that every picture a move
    changes lies inside the window horizontally, so that the reader sees it change without
    panning; return the pictures that did not.
    """
    controls = root.evaluate(CONTROLS)
    state = root.evaluate(STATE)
    assert state["ready"] == "true", f"{name}: the figure's script did not run"
    indices = [int(i) for i in state["key"].split(",")]
    combinations = 1
    for control in controls:
        combinations *= control["count"]
    assert len(frames) == combinations, f"{name}: {len(frames)} frames for {combinations} values"
    assert len(set(map(tuple, frames.values()))) == len(frames), (
        f"{name}: two combinations share a picture"
    )
    outside = []
    widgets = root.locator("[data-param]")
    for i, control in enumerate(controls):
        widget = widgets.nth(i)
        previous, changes = state["srcs"], 0
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
            assert state["srcs"] == frames[key], f"{where}: the pictures are not those for {key}"
            if control["kind"] == "range":
                readout = state["readouts"][sum(c["kind"] == "range" for c in controls[:i])]
                assert readout == control["labels"][value], f"{where}: the readout says {readout!r}"
            changed = [k for k, src in enumerate(state["srcs"]) if src != previous[k]]
            if window is not None and changed:
                pieces = root.evaluate(PIECES)
                report["pictures_checked"] += len(changed)
                for k in changed:
                    box = pieces[k]
                    if box["left"] < -0.5 or box["right"] > window["width"] + 0.5:
                        outside.append({"figure": where, "piece": k, **box})
            changes += bool(changed)
            previous = state["srcs"]
            report["values_set"] += 1
        assert changes >= control["count"] - 1, f"{name}: {control['name']} left the picture as is"
        report["controls_moved"] += 1
        report["picture_changes"] += changes
    return outside


# Session scope: under pytest-xdist a module-scoped fixture is set up again whenever a worker
# runs a test of another module in between, and this one takes a minute.
@pytest.fixture(scope="session")
def browser_report(built_book: Path, request: pytest.FixtureRequest) -> dict:
    """Visit every page once in headless Chromium and return what happened on each."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = browser_path()
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    report = {
        "pages": {},
        "explorers": 0,
        "controls_moved": 0,
        "values_set": 0,
        "picture_changes": 0,
        "pictures_checked": 0,
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
        "pictures_checked_in_narrow_windows": report["pictures_checked"],
        "screens": page_screens(report["pages"]),
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


def page_screens(pages: dict) -> dict:
    """The length of every page of the TOC in desktop screens: its height in a 1280 px window
    over 800 px."""
    toc = {f"{entry}.html" for entry in toc_entries(read_yaml("_toc.yml"))}
    return {
        name: round(page["height_1280"] / SCREEN_PX, 1)
        for name, page in pages.items()
        if name in toc
    }


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
    alt = image["alt"]
    return bool(alt) and not HASHED_NAME.search(alt) and not GENERIC_ALT.match(alt)


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
    page.add_style_tag(content=NO_MOTION)
    math = page.evaluate(MATH)
    height = page.evaluate(PAGE_HEIGHT)
    stem = name.removesuffix(".html").replace("/", "--")
    page.screenshot(path=SCREENSHOTS / f"{stem}.jpeg", **PAGE_SHOT)
    explorers = page.locator(EXPLORER)
    count = explorers.count()
    stored = [explorers.nth(e).evaluate(STORED_FRAMES) for e in range(count)]
    for e in range(count):
        root = explorers.nth(e)
        move_every_control(page, root, f"{name} figure {e + 1}", report, stored[e])
        root.scroll_into_view_if_needed()
        root.screenshot(path=SCREENSHOTS / f"{stem}--figure-{e + 1}.png")
    layout = page.evaluate(LAYOUT)
    sidebar = fold_the_sidebar(page)
    page.set_viewport_size(PHONE)
    settle(page)
    phone_width = page.evaluate(PAGE_WIDTH)
    phone_layout = page.evaluate(LAYOUT)
    phone_reading = page.evaluate(PHONE_READING)
    phone_reading["shadows"] = edge_shadows(page)
    page.screenshot(path=SCREENSHOTS / f"{stem}--phone.jpeg", **PAGE_SHOT)
    outside = {}
    for e in range(count):  # every control again, in a phone's window
        root = explorers.nth(e)
        outside["390"] = outside.get("390", []) + move_every_control(
            page, root, f"{name} figure {e + 1}", report, stored[e], window=PHONE
        )
        if e == 0:
            root.scroll_into_view_if_needed()
            root.screenshot(path=SCREENSHOTS / f"{stem}--figure-1--phone.png")
    toc_urls = toc_page_urls(html_dir)
    menus = {"390": open_the_chapter_list(page, SCREENSHOTS / f"{stem}--phone-menu.png")}
    menus["390 contents"] = open_the_page_contents(page)
    page.set_viewport_size(TABLET)
    settle(page)
    for e in range(count):  # and in a tablet's
        outside["768"] = outside.get("768", []) + move_every_control(
            page, explorers.nth(e), f"{name} figure {e + 1}", report, stored[e], window=TABLET
        )
    menus["768"] = open_the_chapter_list(page, SCREENSHOTS / f"{stem}--tablet-menu.png")
    menus["768 followed"] = follow_a_chapter_link(page, toc_urls)
    page.close()
    report["explorers"] += count
    report["requests_blocked"] += blocked
    html_bytes = path.stat().st_size
    return {
        "html_bytes": html_bytes,
        "height_1280": height,
        "pictures_outside_the_window": outside,
        "loaded_bytes": sum(f.stat().st_size for f in loaded if f.is_file()),
        "explorers": count,
        "layout": layout,
        "layout_1280": layout,
        "layout_390": phone_layout,
        "phone_width": phone_width,
        "phone_reading": phone_reading,
        "sidebar_1280": sidebar,
        "menus": menus,
        "toc_urls_missing": sorted(
            toc_urls - {link["href"] for link in menus["390"]["panel"]["links"]}
        ),
        "math": math,
        "errors": errors,
        "blocked": blocked,
    }


def settle(page) -> None:
    """Wait until the browser has drawn two more frames: a click's, a scroll's or a resize's
    effects are laid out and painted (the theme's transitions are off, NO_MOTION)."""
    page.evaluate(
        "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )


def visible_button(page, selector: str):
    """The one button of ``selector`` that a reader sees, or None (and how many there were)."""
    shown = page.locator(selector).filter(visible=True)
    return (shown.first if shown.count() == 1 else None), shown.count()


def fold_the_sidebar(page) -> dict:
    """At 1280 px: the menu button folds the chapter list away; a second press brings it back."""
    button, count = visible_button(page, ".primary-toggle")
    result = {"buttons": count}
    if button is None:
        return result
    button.click()
    settle(page)
    result["folded"] = page.evaluate(SIDEBAR)
    button.click()
    settle(page)
    result["unfolded"] = page.evaluate(SIDEBAR)
    return result


def edge_shadows(page) -> dict:
    """The shadows of the boxes that scroll sideways, at their start and at their far end."""
    start = page.evaluate(EDGE_SHADOWS)
    page.evaluate(SCROLL_BOXES, True)
    settle(page)
    end = page.evaluate(EDGE_SHADOWS)
    page.evaluate(SCROLL_BOXES, False)
    settle(page)
    return {"start": start, "end": end}


def open_the_chapter_list(page, screenshot: Path) -> dict:
    """Press the menu button a reader sees; report the panel it opens, then close it."""
    page.evaluate("() => window.scrollTo(0, 0)")
    button, count = visible_button(page, ".primary-toggle")
    result = {"buttons": count}
    if button is None:
        return result
    button.click()
    settle(page)
    result["panel"] = page.evaluate(PANEL, "pst-primary-sidebar-modal")
    page.screenshot(path=screenshot)
    page.keyboard.press("Escape")
    settle(page)
    result["closed"] = not page.evaluate(PANEL, "pst-primary-sidebar-modal")["open"]
    return result


def open_the_page_contents(page) -> dict:
    """Press the page-contents button (where the page has one) and follow a link in the panel."""
    button, count = visible_button(page, ".secondary-toggle")
    result = {"buttons": count}
    if button is None:
        return result
    button.click()
    settle(page)
    result["panel"] = panel = page.evaluate(PANEL, "pst-secondary-sidebar-modal")
    sections = [link for link in panel["links"] if link["hash"]]
    if panel["open"] and sections:
        target = sections[len(sections) // 2]
        page.locator(f'#pst-secondary-sidebar-modal a[href="{target["raw"]}"]').first.click()
        settle(page)
        result["followed"] = {
            "wanted": target["hash"],
            "hash": page.evaluate("() => location.hash"),
            "closed": not page.evaluate(PANEL, "pst-secondary-sidebar-modal")["open"],
        }
    return result


def follow_a_chapter_link(page, toc_urls: set[str]) -> dict:
    """Open the chapter list and follow its link to another page of the book."""
    button, _ = visible_button(page, ".primary-toggle")
    if button is None:
        return {}
    here = page.url.split("#")[0]
    button.click()
    settle(page)
    links = page.evaluate(PANEL, "pst-primary-sidebar-modal")["links"]
    target = next((link for link in links if link["href"] in toc_urls - {here}), None)
    if target is None:
        return {"target": None}
    page.locator(f'#pst-primary-sidebar-modal a[href="{target["raw"]}"]').first.click()
    page.wait_for_url(target["href"] + "*", timeout=5000, wait_until="commit")  # it went there
    return {"target": target["href"], "arrived": page.url.split("#")[0]}


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


def test_every_picture_a_control_changes_is_inside_a_phone_or_tablet_window(browser_report):
    """In a 390 and a 768 px window, every control of every figure was moved again through all
    its values; each picture that changed lay inside the window, from its left edge to its right,
    so that the reader sees it change without panning (the figure's panels wrap)."""
    pages = chapter_pages(browser_report["pages"])
    outside = {
        f"{name} at {width} px": found
        for name, page in pages.items()
        for width, found in page["pictures_outside_the_window"].items()
        if found
    }
    assert not outside, f"pictures that a control changes outside the window: {outside}"
    figures = sum(page["explorers"] for page in pages.values())
    assert figures >= 10 and browser_report["pictures_checked"] >= 2 * figures


def test_no_page_is_too_long_to_read(browser_report):
    screens = page_screens(browser_report["pages"])
    entries = toc_entries(read_yaml("_toc.yml"))
    assert len(screens) == len(entries), f"measured {sorted(screens)}, the TOC has {entries}"
    long = {name: n for name, n in screens.items() if n > MAX_SCREENS}
    assert not long, f"pages over {MAX_SCREENS} desktop screens (height at 1280 px / 800): {long}"
    median = statistics.median(screens.values())
    assert median <= MAX_MEDIAN_SCREENS, (
        f"the median page is {median} desktop screens, over {MAX_MEDIAN_SCREENS}: {screens}"
    )


# --- navigation on phones, tablets and desktops ---------------------------------------------------


def test_the_chapter_list_opens_from_the_visible_menu_button_on_phones_and_tablets(browser_report):
    pages = browser_report["pages"]
    problems = {}
    for name, page in pages.items():
        for width in ("390", "768"):
            menu = page["menus"][width]
            panel = menu.get("panel", {})
            wrong = []
            if menu["buttons"] != 1:
                wrong.append(f"{menu['buttons']} visible menu buttons")
            elif not panel.get("open"):
                wrong.append("the menu button opened nothing")
            else:
                if panel["width"] < 200 or panel["height"] < 300:
                    wrong.append(f"a panel of only {panel['width']} x {panel['height']} px")
                if not panel["tappable"]:
                    wrong.append("its first link is covered")
                if not menu["closed"]:
                    wrong.append("Escape left it open")
            if wrong:
                problems[f"{name} at {width} px"] = wrong
        if page["toc_urls_missing"]:
            problems[f"{name} chapter list"] = [f"no link to {page['toc_urls_missing']}"]
        followed = page["menus"]["768 followed"]
        if followed.get("arrived") != followed.get("target"):
            problems[f"{name} at 768 px"] = [f"following a chapter link: {followed}"]
    assert len(pages) >= 10
    assert not problems, f"the chapter list on phones and tablets: {problems}"


def test_the_page_contents_open_on_a_phone_and_close_on_a_link(browser_report):
    chapters = chapter_pages(browser_report["pages"])
    opened, problems = 0, {}
    for name, page in chapters.items():
        contents = page["menus"]["390 contents"]
        if not contents["buttons"]:
            continue
        followed = contents.get("followed")
        if not contents.get("panel", {}).get("open"):
            problems[name] = "the page-contents button opened nothing"
        elif not followed or followed["hash"] != followed["wanted"] or not followed["closed"]:
            problems[name] = f"following a section link: {followed}"
        opened += 1
    assert not problems, f"the page contents on a phone: {problems}"
    assert opened >= 10, f"only {opened} chapter pages have a page-contents button at 390 px"


def test_the_menu_button_folds_the_sidebar_on_a_desktop(browser_report):
    problems = {}
    for name, page in browser_report["pages"].items():
        sidebar = page["sidebar_1280"]
        if sidebar["buttons"] != 1:
            problems[name] = f"{sidebar['buttons']} visible menu buttons"
            continue
        folded, unfolded = sidebar["folded"], sidebar["unfolded"]
        if not (folded["hidden"] and folded["visibility"] == "hidden"):
            problems[name] = f"the sidebar stayed after the first press: {folded}"
        elif unfolded["hidden"] or unfolded["visibility"] != "visible" or unfolded["right"] <= 0:
            problems[name] = f"the sidebar did not come back: {unfolded}"
    assert not problems, f"the menu button at 1280 px: {problems}"


# --- figures on a phone ---------------------------------------------------------------------------


def phone_text_px(image: dict) -> float:
    """The smallest text of a figure as shown: its shown / drawn width x the style's smallest."""
    return image["shown"] / image["intended"] * FIGURE_TEXT_PX if image["intended"] else 0.0


def test_figure_text_is_readable_on_a_phone(browser_report):
    chapters = chapter_pages(browser_report["pages"])
    small = {
        name: [
            (i["src"], round(phone_text_px(i), 1))
            for i in page["phone_reading"]["images"]
            if phone_text_px(i) < MIN_PHONE_TEXT_PX
        ]
        for name, page in chapters.items()
    }
    assert not any(small.values()), (
        f"figure text under {MIN_PHONE_TEXT_PX} CSS px in a 390 px window (shown / drawn width "
        f"x {FIGURE_TEXT_PX:.1f} px): {small}"
    )
    html_text = {
        name: page["phone_reading"]["smallest_html_text"]
        for name, page in chapters.items()
        if page["phone_reading"]["smallest_html_text"] is not None
    }
    assert html_text, "the interactive figures have controls and readouts"
    assert min(html_text.values()) >= MIN_PHONE_TEXT_PX, html_text
    images = sum(len(page["phone_reading"]["images"]) for page in chapters.values())
    assert images >= 40, f"only {images} figures measured at 390 px"


def test_what_scrolls_sideways_on_a_phone_says_so(browser_report):
    chapters = chapter_pages(browser_report["pages"])
    unmarked, shadows, equations, figures = {}, {}, 0, 0
    for name, page in chapters.items():
        reading = page["phone_reading"]
        unmarked[name] = [box for box in reading["scrolling"] if not box["frame"]]
        equations += sum(box["kind"] == "equation" for box in reading["scrolling"])
        figures += sum(box["kind"] == "figure" for box in reading["scrolling"])
        start, end = reading["shadows"]["start"], reading["shadows"]["end"]
        wrong = [
            (before, after)
            for before, after in zip(start, end, strict=True)
            if before["left"]
            or not before["right"]
            or not after["left"]
            or after["right"]
            or "gradient" not in before["shadow"]
        ]
        if wrong or len(start) != len(reading["scrolling"]):
            shadows[name] = wrong or f"{len(start)} marked, {len(reading['scrolling'])} scroll"
    assert not any(unmarked.values()), f"boxes that scroll sideways without a shadow: {unmarked}"
    assert not shadows, (
        f"a shadow on the right at the start, on the left at the end, and no other: {shadows}"
    )
    assert equations >= 5, "some display equations are wider than a phone"
    assert figures >= 40, "the figures, drawn for 680 px, pan on a phone"


def test_result_tables_fit_a_phone(browser_report):
    """Every result table (vitbook.plotting.tables.Table) fits the column of a 390 px window: its
    cells wrap instead of the table panning."""
    chapters = chapter_pages(browser_report["pages"])
    tables = {name: page["phone_reading"]["tables"] for name, page in chapters.items()}
    wide = {n: [t for t in found if t["over"] > 1] for n, found in tables.items()}
    assert not any(wide.values()), f"result tables wider than a phone's column: {wide}"
    assert sum(map(len, tables.values())) >= 20, "the chapters show their results as tables"


def test_the_script_uses_the_house_style_text_sizes():
    script = (ROOT / "book" / "_static" / "vitbook.js").read_text(encoding="utf-8")
    figure = re.search(r"FIGURE_TEXT_PX = \((\d+) / 72\) \* (\d+);", script)
    phone = re.search(r"PHONE_TEXT_PX = (\d+);", script)
    assert figure and phone, "vitbook.js states its two text sizes"
    assert (float(figure[1]), float(figure[2])) == (MIN_FONT_SIZE, CSS_PX_PER_INCH)
    assert float(phone[1]) == MIN_PHONE_TEXT_PX


def test_the_intro_maps_every_chapter_with_a_link(built_book):
    html = (built_book / "book" / "intro.html").read_text(encoding="utf-8")
    section = html.split('id="chapter-map"', 1)[1].split("</table>", 1)[0]
    linked = re.findall(r'<a class="reference internal" href="([\w.-]+)\.html"', section)
    numbered = [part for part in read_yaml("_toc.yml")["parts"] if part.get("numbered")]
    chapters = [e.removeprefix("book/") for e in toc_entries({"root": "", "parts": numbered})[1:]]
    assert len(chapters) >= 10
    assert linked == chapters, f"the chapter map links {linked}; the numbered chapters: {chapters}"
