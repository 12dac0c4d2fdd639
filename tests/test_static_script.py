"""The static figure's script in headless Chromium, inserted the way notebook front ends do it.

- The classic notebook inserts an HTML output with jQuery: the markup goes in with ``innerHTML``
  (where scripts do not run), then jQuery evaluates each inline script from a temporary
  ``<script>`` in ``<head>``, so ``document.currentScript`` is not inside the figure. The page
  here does exactly that, for two figures one after the other.
- JupyterLab's command mode handles keydown on an ancestor of the output and cancels the keys it
  binds, arrow keys among them. The page here has such an ancestor; the slider must still move
  with the keyboard, and the keys must not reach the ancestor.
"""

from __future__ import annotations

import json
import tempfile

import pytest
from booktools import CHROMIUM_FLAGS, INSERT_LIKE_JQUERY, browser_path
from matplotlib.figure import Figure

from vitbook.widgets.explorer import explore

PAGE = (
    """<!DOCTYPE html><html><head><title>notebook</title></head><body>
<div id="notebook" tabindex="-1"><div id="out1"></div><div id="out2"></div></div>
<script>
window.commandModeKeys = [];
// Like JupyterLab's command mode: a handler on an ancestor that takes the arrow keys.
document.getElementById("notebook").addEventListener("keydown", function (event) {
  if (/^(Arrow|Page|Home|End)/.test(event.key)) {
    event.preventDefault();
    window.commandModeKeys.push(event.key);
  }
});
"""
    + INSERT_LIKE_JQUERY
    + """
</script></body></html>"""
)
STATE = """root => ({
  ready: root.getAttribute("data-ready"),
  key: root.getAttribute("data-key"),
  readout: root.querySelector("output").textContent,
})"""
SRC = "root => root.querySelector('img.vbx-piece').getAttribute('src')"


def plot_bar(height, colour="C0"):
    fig = Figure(figsize=(1.5, 1))
    ax = fig.add_subplot()
    ax.bar([0], [height], color=colour)
    ax.set_ylim(0, 6)
    return fig


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = browser_path()
    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, offline=True
        )
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_content(PAGE)
        yield page, errors
        context.close()


@pytest.fixture(scope="module")
def figures(page):
    """Two figures inserted like the classic notebook's outputs; their roots in the page."""
    page, errors = page
    first = explore(plot_bar, height=range(1, 6), colour=["C0", "C3"])
    second = explore(plot_bar, height=[1, 2, 3, 4, 5])  # a slider needs 5 values
    page.evaluate("args => insertLikeJQuery(args[0], args[1])", ["out1", first.to_html()])
    page.evaluate("args => insertLikeJQuery(args[0], args[1])", ["out2", second.to_html()])
    assert not errors, f"the script failed: {errors}"
    return page, page.locator(".vitbook-explorer")


def test_every_figure_inserted_with_jquery_is_initialised(figures):
    page, roots = figures
    assert roots.count() == 2
    first, second = (roots.nth(i).evaluate(STATE) for i in range(2))
    assert first == {"ready": "true", "key": "2,0", "readout": "3"}
    assert second == {"ready": "true", "key": "2", "readout": "3"}
    menu = roots.nth(0).locator("select")
    menu.select_option("1")
    assert roots.nth(0).evaluate(STATE)["key"] == "2,1"
    assert roots.nth(1).evaluate(STATE)["key"] == "2", "the other figure is left alone"


def test_arrow_keys_move_the_slider_under_a_command_mode_handler(figures):
    page, roots = figures
    slider = roots.nth(1).locator("input[type=range]")
    stored = json.loads(roots.nth(1).locator("script.vbx-frames").text_content())
    (variants,) = stored["pieces"]  # a figure of one panel: one piece
    assert variants.count(None) == 1, "frame 2 is in the <img>, the others are stored"
    variants[stored["frames"]["2"][0]] = roots.nth(1).evaluate(SRC)
    frames = {key: variants[chosen] for key, (chosen,) in stored["frames"].items()}
    assert len(set(frames.values())) == 5
    slider.focus()
    seen = []
    keys = ("ArrowRight", "ArrowRight", "ArrowRight", "ArrowLeft", "Home", "ArrowUp", "End")
    for key in (*keys, "ArrowDown"):
        slider.press(key)
        state = roots.nth(1).evaluate(STATE)
        seen.append((key, state["key"], state["readout"]))
        assert roots.nth(1).evaluate(SRC) == frames[state["key"]]
    assert seen == [
        ("ArrowRight", "3", "4"),
        ("ArrowRight", "4", "5"),
        ("ArrowRight", "4", "5"),  # the last value: it stays
        ("ArrowLeft", "3", "4"),
        ("Home", "0", "1"),
        ("ArrowUp", "1", "2"),
        ("End", "4", "5"),
        ("ArrowDown", "3", "4"),
    ]
    assert page.evaluate("window.commandModeKeys") == [], "the keys reached the command mode"
    page.locator("#notebook").focus()  # keys outside the figure still reach the notebook
    page.keyboard.press("ArrowDown")
    assert page.evaluate("window.commandModeKeys") == ["ArrowDown"]


def test_a_figure_still_being_parsed_is_left_to_its_own_script(figures):
    """A long page is parsed in pieces: another figure's script must not start a half figure."""
    page, roots = figures
    html = explore(plot_bar, height=range(1, 6)).to_html()
    half = html[: html.index('<script type="application/json"')] + "</div>"  # no frames yet
    page.evaluate(
        """h => { const d = document.createElement("div"); d.id = "half"; d.innerHTML = h;
                  document.getElementById("notebook").appendChild(d);
                  const e = document.createElement("div"); e.id = "out3";
                  document.getElementById("notebook").appendChild(e); }""",
        half,
    )
    page.evaluate("args => insertLikeJQuery(args[0], args[1])", ["out3", html])
    page.wait_for_timeout(50)  # the script also looks again on the next tick
    half_root = page.locator("#half .vitbook-explorer")
    assert half_root.get_attribute("data-ready") is None, "a half figure was started"
    assert page.locator("#out3 .vitbook-explorer").get_attribute("data-ready") == "true"
    page.evaluate("args => insertLikeJQuery(args[0], args[1])", ["half", html])  # now complete
    assert page.locator("#half .vitbook-explorer").get_attribute("data-ready") == "true"
