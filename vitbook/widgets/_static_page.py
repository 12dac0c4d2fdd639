"""The static version of an interactive figure: plain HTML controls, the pictures, a short script.

The output is one ``<div class="vitbook-explorer">`` that needs nothing from outside itself::

    <style>             scoped to .vitbook-explorer
    <div vbx-controls>  one <input type="range"> or <select> per parameter, in order
    <div vbx-figure>    rows and wrapping columns of <img vbx-piece> (vitbook.widgets._panels),
                        showing the default frame
    <script json>       {"first": key, "pieces": [[data URI, ...] per piece],
                        "frames": {"i0,i1,...": [variant of each piece]}}
    <script>            on each change, show the frame of the controls' indices; ES5, no request

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence

from vitbook.plotting.style import PNG_SCALE
from vitbook.widgets._panels import Pictures, Plan

__all__ = ["render"]


def render(params: Sequence, pictures: Pictures, *, description: str) -> str:
    """The HTML of one figure, from its parameters (``vitbook.widgets.explorer.Param``) and
    pictures.

    ``description`` starts each piece's alt text; the script adds the controls' values.
    """
    key = ",".join(str(p.default) for p in params)
    first = pictures.frames[key]
    uris = [[_uri(png) for png in variants] for variants in pictures.variants]
    shown = [uris[k][i] for k, i in enumerate(first)]
    for k, i in enumerate(first):
        uris[k][i] = None  # the <img> holds it; the script puts it back
    values = ", ".join(f"{p.label} = {p.options[p.default][0]}" for p in params)
    alts = [_alt(description, values, k, len(shown)) for k in range(len(shown))]
    figure = _node(pictures.plan, pictures.plan.tree, shown, alts)
    left, right = _region(pictures.plan, pictures.plan.tree)
    stored = json.dumps(
        {"first": key, "pieces": uris, "frames": pictures.frames}, separators=(",", ":")
    )
    controls = "".join(_control(p) for p in params)
    return (
        f'<div class="vitbook-explorer" data-key="{key}" '
        f'data-description="{html.escape(description)}">{STYLE}'
        f'<div class="vbx-controls">{controls}</div>'
        f'<div class="vbx-figure" style="width:{_px(right - left)}">{figure}</div>'
        f'<script type="application/json" class="vbx-frames">{stored}</script>'
        f'<script class="vbx-js">{SCRIPT}</script></div>'
    )


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _alt(description: str, values: str, k: int, count: int) -> str:
    part = f"; part {k + 1} of {count}" if count > 1 else ""
    return f"{description} ({values}{part})"


def _px(pixels: int) -> str:
    """CSS px of a length in the frame's pixels (PNG_SCALE per CSS px)."""
    return f"{pixels / PNG_SCALE:g}px"


def _region(plan: Plan, node: tuple) -> tuple[int, int]:
    """The left and right edges of a node of the plan's tree, in the frame's pixels."""
    if node[0] == "piece":
        slot = plan.pieces[node[1]].slot
        return slot[0], slot[2]
    edges = [_region(plan, child) for child in node[1]]
    return min(left for left, _ in edges), max(right for _, right in edges)


def _node(plan: Plan, node: tuple, shown: list[str], alts: list[str]) -> str:
    """A node of the tree in a box of its own width (no wider than its parent): a piece, rows
    stacked, or columns side by side that wrap."""
    left, right = _region(plan, node)
    box = f'<div class="vbx-box" style="width:{_px(right - left)}">'
    if node[0] != "piece":
        inner = "".join(_node(plan, child, shown, alts) for child in node[1])
        return f'{box}<div class="vbx-{node[0]}">{inner}</div></div>'
    k = node[1]
    piece = plan.pieces[k]
    x0, y0, x1, y1 = piece.slot
    width, blank = piece.right - piece.left, (piece.left - x0) + (x1 - piece.right)
    style = ""
    if piece.left > x0:
        # The background left of the picture, as a margin: all of it where the box is as wide
        # as drawn, shrinking in step as the box narrows, none once the picture fills it.
        share = (piece.left - x0) / blank
        style = (
            f' style="margin-left:clamp(0px,calc((100% - {_px(width)}) * {share:.4f}),'
            f'{_px(piece.left - x0)})"'
        )
    return (
        f'{box}<img class="vbx-piece" data-piece="{k}" src="{shown[k]}" '
        f'width="{width // PNG_SCALE}" height="{(y1 - y0) // PNG_SCALE}" '
        f'alt="{html.escape(alts[k])}"{style}></div>'
    )


def _control(p) -> str:
    label = html.escape(p.label)
    if p.is_dropdown:
        options = "".join(
            f'<option value="{i}"{" selected" * (i == p.default)}>{html.escape(text)}</option>'
            for i, (text, _) in enumerate(p.options)
        )
        select = f'<select data-param="{p.name}" autocomplete="off">{options}</select>'
        return f'<label data-label="{label}">{label} {select}</label>'
    texts = html.escape(json.dumps([text for text, _ in p.options]))
    return (
        f'<label data-label="{label}">{label} <input type="range" data-param="{p.name}" min="0" '
        f'max="{len(p.options) - 1}" step="1" value="{p.default}" autocomplete="off" '
        f'data-labels="{texts}"><output>{html.escape(p.options[p.default][0])}</output></label>'
    )


STYLE = (
    "<style>.vitbook-explorer{margin:0.5em 0;max-width:100%}"
    ".vitbook-explorer .vbx-controls{display:flex;flex-wrap:wrap;gap:0.4em 1.5em;margin:0 0 0.5em}"
    ".vitbook-explorer label{display:inline-flex;flex-wrap:wrap;align-items:center;"
    "gap:0.2em 0.6em;margin:0;max-width:100%}"
    ".vitbook-explorer input[type=range]{width:14em;max-width:100%}"
    ".vitbook-explorer select{max-width:100%}"
    ".vitbook-explorer output{white-space:nowrap;font-variant-numeric:tabular-nums;"
    "font-weight:600}"
    # The figure's boxes: each as wide as drawn, never wider than the one around it; columns
    # side by side, onto the next line where they do not fit.
    ".vitbook-explorer .vbx-figure,.vitbook-explorer .vbx-box{max-width:100%}"
    ".vitbook-explorer .vbx-box{flex:0 1 auto}"
    ".vitbook-explorer .vbx-columns{display:flex;flex-wrap:wrap;align-items:flex-start}"
    ".vitbook-explorer img.vbx-piece{max-width:100%;height:auto;display:block}"
    # Dark mode: the theme pads images on a light card; the output around the figure already
    # is one, so a second frame inside it would only look like a double border.
    ".vitbook-explorer img.vbx-piece{padding:0!important;background:none!important;"
    "border-radius:0!important}</style>"
)

# Show the pictures of the current controls; ES5, no library, nothing loaded from anywhere.
# Every figure's copy of the script initialises every figure not yet marked data-ready: front ends
# insert outputs in different ways (the classic notebook evaluates inline scripts from a temporary
# <script> in <head>, so document.currentScript is not inside the figure), and a figure whose
# script ran before it was attached is picked up by the next one or on the next tick. A slider
# takes its keys itself and keeps them from the page: JupyterLab's command mode would otherwise
# take the arrow keys (and cancel their default action).
SCRIPT = """(function () {
  var STEPS = {ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1, Right: 1, Up: 1,
               Left: -1, Down: -1, PageUp: 10, PageDown: -10};
  function init(root) {
    root.setAttribute("data-ready", "true");
    var stored = JSON.parse(root.querySelector("script.vbx-frames").textContent);
    var pieces = root.querySelectorAll("img.vbx-piece");
    var first = stored.frames[stored.first];
    for (var k = 0; k < pieces.length; k++) {
      stored.pieces[k][first[k]] = pieces[k].getAttribute("src");
    }
    var controls = root.querySelectorAll("[data-param]");
    function show() {
      var key = [], values = [];
      for (var i = 0; i < controls.length; i++) {
        var control = controls[i], text;
        key.push(control.value);
        if (control.type === "range") {
          text = JSON.parse(control.getAttribute("data-labels"))[control.value];
          control.parentNode.querySelector("output").textContent = text;
        } else {
          text = control.options[control.selectedIndex].textContent;
        }
        values.push(control.parentNode.getAttribute("data-label") + " = " + text);
      }
      var chosen = stored.frames[key.join(",")];
      var alt = root.getAttribute("data-description") + " (" + values.join(", ");
      root.setAttribute("data-key", key.join(","));
      for (var k = 0; k < pieces.length; k++) {
        var src = stored.pieces[k][chosen[k]];
        if (pieces[k].getAttribute("src") !== src) pieces[k].setAttribute("src", src);
        var part = pieces.length > 1 ? "; part " + (k + 1) + " of " + pieces.length : "";
        pieces[k].alt = alt + part + ")";
      }
    }
    function onKey(event) {
      var control = event.currentTarget, last = Number(control.max), value = Number(control.value);
      var step = STEPS[event.key];
      if (step !== undefined) {
        var big = Math.max(1, Math.round((last + 1) / 10));
        value += Math.abs(step) === 10 ? (step > 0 ? big : -big) : step;
      } else if (event.key === "Home") {
        value = 0;
      } else if (event.key === "End") {
        value = last;
      } else {
        return;
      }
      event.preventDefault();
      event.stopPropagation();
      control.value = String(Math.min(last, Math.max(0, value)));
      show();
    }
    for (var i = 0; i < controls.length; i++) {
      controls[i].addEventListener("input", show);
      controls[i].addEventListener("change", show);
      if (controls[i].type === "range") controls[i].addEventListener("keydown", onKey);
    }
    show();
  }
  function initAll() {
    // A figure is complete once its own script element exists (it comes last): while a long
    // page is still being parsed, a later figure may be there only in part.
    var roots = document.querySelectorAll(".vitbook-explorer");
    for (var i = 0; i < roots.length; i++) {
      var complete = roots[i].querySelector("script.vbx-js");
      if (complete && !roots[i].getAttribute("data-ready")) init(roots[i]);
    }
  }
  var own = document.currentScript && document.currentScript.parentNode;
  if (own && own.classList && own.classList.contains("vitbook-explorer") &&
      !own.getAttribute("data-ready")) init(own);
  initAll();
  setTimeout(initAll, 0);
})();"""
