"""Sphinx extension: every page of the HTML book works with the network unplugged.

A default Jupyter Book 1 page asks other machines for three things; this book avoids each one:

- MathJax, from a CDN on pages with maths. The book serves its own copy from ``_static/mathjax``
  (the ``sphinx-mathjax-offline`` extension ships MathJax 3 and copies it there; ``_config.yml``
  points ``mathjax_path`` at it).
- The ipywidgets manager and require.js, from CDNs on pages whose notebook saved widget state.
  The interactive figures of this book show their ``text/html`` representation instead
  (``nb_mime_priority_overrides``), so ``_config.yml`` sets ``nb_ipywidgets_js`` to nothing, and
  this extension drops the saved widget state, which nothing on the page would read.
- sphinx-thebe's scripts, which name a CDN and, added twice, declare ``THEBE_JS_URL`` twice (a
  JavaScript error on every page). Thebe is switched off in this book, so both are dropped.

When the build finishes, every page is read back: a script, stylesheet, image or frame that comes
from another machine, or a local one that is missing, is a warning, which fails the strict build.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
LOADING_LINKS = {"stylesheet", "preload", "modulepreload", "icon", "prefetch", "manifest"}
LOADING_TAGS = {"script", "img", "iframe", "source", "audio", "video", "embed", "track"}


def _unwanted(script: object) -> bool:
    filename = getattr(script, "filename", None) or ""
    attributes = getattr(script, "attributes", {})
    return (
        filename.endswith("sphinx-thebe.js")
        or "THEBE_JS_URL" in attributes.get("body", "")
        or attributes.get("type") == WIDGET_STATE
    )


def drop_unused_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree):
    scripts = context.get("script_files")
    if scripts is not None:
        scripts[:] = [js for js in scripts if not _unwanted(js)]


class _Resources(HTMLParser):
    """Collects the URLs that a browser would load when it renders a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag in LOADING_TAGS and found.get("src"):
            self.urls.append(found["src"])
        rel = set((found.get("rel") or "").lower().split())
        if tag == "link" and rel & LOADING_LINKS and found.get("href"):
            self.urls.append(found["href"])


def problems(page: Path) -> list[str]:
    """Resources of an HTML page that come from another machine, or that do not exist."""
    parser = _Resources()
    parser.feed(page.read_text(encoding="utf-8"))
    found = []
    for url in parser.urls:
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob"):
            continue
        if parts.scheme or parts.netloc:
            found.append(f"loads {url} from another machine")
        elif parts.path and not (page.parent / unquote(parts.path)).exists():
            found.append(f"refers to {url}, which is not in the build")
    return found


def check_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        if {"_static", "_sources"} & set(page.relative_to(outdir).parts):
            continue  # template fragments and sources, not pages
        for problem in problems(page):
            logger.warning(
                "%s %s; the book must work offline", page.relative_to(outdir), problem,
                type="offline_book", subtype="request",
            )  # fmt: skip


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", drop_unused_scripts, priority=900)
    app.connect("build-finished", check_pages, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
