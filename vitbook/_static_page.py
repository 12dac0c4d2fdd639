"""The static version of an interactive figure: plain HTML controls, the frames, a short script.

The output is one ``<div class="vitbook-explorer">`` that needs nothing from outside itself::

    <style>             scoped to .vitbook-explorer
    <div vbx-controls>  one <input type="range"> (value = index, readout in <output>) or <select>
                        per parameter, in the order of the parameters
    <img vbx-frame>     the default frame; data-key holds its key
    <script json>       every other frame: {"i0,i1,...": "data:image/png;base64,..."}, where ik
                        is the index of the k-th parameter's value
    <script>            on every input or change, join the controls' indices into a key and show
                        that frame; ES5, no library, no request

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

__all__ = ["render"]


def render(
    params: Sequence, frames: dict[str, str], *, description: str, size: tuple[int, int]
) -> str:
    """The HTML of one figure, from its parameters (``vitbook.explorer.Param``) and all frames.

    ``size`` is the (width, height) in CSS px at which every frame is shown (the PNGs hold twice
    as many pixels); ``description`` starts each frame's alt text, which the script completes
    with the controls' values, as ``Explorer.alt`` does.
    """
    frames = dict(frames)
    key = ",".join(str(p.default) for p in params)
    first = frames.pop(key)  # shown by the <img> itself; the script adds it back
    controls = "".join(_control(p) for p in params)
    values = ", ".join(f"{p.label} = {p.options[p.default][0]}" for p in params)
    width, height = size
    return (
        f'<div class="vitbook-explorer">{STYLE}<div class="vbx-controls">{controls}</div>'
        f'<img class="vbx-frame" data-key="{key}" src="{first}" width="{width}" '
        f'height="{height}" data-description="{html.escape(description)}" '
        f'alt="{html.escape(f"{description} ({values})")}">'
        f'<script type="application/json" class="vbx-frames">{json.dumps(frames)}</script>'
        f'<script class="vbx-js">{SCRIPT}</script></div>'
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
    ".vitbook-explorer img{max-width:100%;height:auto;display:block}"
    # Dark mode: the theme pads images on a light card; the output around the figure already
    # is one, so a second frame inside it would only look like a double border.
    ".vitbook-explorer img.vbx-frame{padding:0!important;background:none!important;"
    "border-radius:0!important}</style>"
)

# Show the frame of the current controls; ES5, no library, nothing loaded from anywhere.
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
    var img = root.querySelector("img.vbx-frame");
    var frames = JSON.parse(root.querySelector("script.vbx-frames").textContent);
    frames[img.getAttribute("data-key")] = img.getAttribute("src");
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
      img.setAttribute("data-key", key.join(","));
      img.alt = img.getAttribute("data-description") + " (" + values.join(", ") + ")";
      img.src = frames[key.join(",")];
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
