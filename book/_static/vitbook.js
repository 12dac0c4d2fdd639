/* The book's script, on every page (registered by book/_ext/reader.py). ES5, no library, no
   request. Three things:

   1. Figures readable on a phone. A figure is drawn for the 680 CSS px column of a desktop
      window, with no text under 8 pt = 11.1 CSS px at that width (vitbook/plotting/style.py).
      Shrunk to a 358 px phone column, that text would be 5.8 px. So no picture is shown
      narrower than 81% of the width it was drawn for (its smallest text then stays at
      9 CSS px or more); where the column is narrower, the picture pans sideways inside a box
      of its own, and the page itself never does. An interactive figure comes as one picture
      per panel (vitbook/_panels.py), which wrap onto the next line in a narrow column, each
      of them narrow enough to be shown whole: only a picture that must stay whole and is
      wider than that pans.
   2. A box that scrolls sideways (a figure above, a display equation, a line of code or of
      printed output that is wider than the column) shows that it does: a shadow at the edge
      where more of it is hidden.
   3. The chapter list and the page contents open as panels below 992 px (the theme's
      buttons); a link followed in one of them closes the panel, so that the reader sees the
      place it leads to (the theme leaves the panel open over the page).
*/
(function () {
  "use strict";
  // Smallest text of a figure at the width it was drawn for, and the smallest shown on a
  // phone, in CSS px (tests/test_browser.py checks both against vitbook.plotting.style).
  var FIGURE_TEXT_PX = (8 / 72) * 100; // MIN_FONT_SIZE pt at CSS_PX_PER_INCH
  var PHONE_TEXT_PX = 9;
  var SMALLEST_SCALE = PHONE_TEXT_PX / FIGURE_TEXT_PX;
  var FIGURES = "article .cell_output img, article figure img";
  var EQUATIONS = "article div.math";
  var CODE = "article div.highlight"; // code cells and printed output: a <pre> that scrolls

  function drawnWidth(img) {
    // MyST-NB writes a 2x PNG's CSS width into the style, an interactive figure into the
    // width attribute; an image with neither says nothing about how it was drawn.
    return parseFloat(img.style.width) || Number(img.getAttribute("width")) || 0;
  }

  function update(frame, box) {
    var hidden = box.scrollWidth - box.clientWidth;
    var scrolls = hidden > 1;
    frame.classList.toggle("vb-scrolls", scrolls);
    frame.classList.toggle("vb-more-left", scrolls && box.scrollLeft > 1);
    frame.classList.toggle("vb-more-right", scrolls && box.scrollLeft < hidden - 1);
    if (scrolls) {
      box.setAttribute("tabindex", "0"); // a keyboard can scroll it too
    } else {
      box.removeAttribute("tabindex");
    }
  }

  var watched = [];
  // A box changes size when the window does, when a folded cell opens, when an image loads:
  // look again then.
  var resized = window.ResizeObserver ? new ResizeObserver(function () { updateAll(); }) : null;
  function watch(frame, box) {
    frame.classList.add("vb-scroll-frame");
    box.classList.add("vb-scroll-box");
    watched.push([frame, box]);
    box.addEventListener("scroll", function () { update(frame, box); }, { passive: true });
    if (resized) resized.observe(box);
    update(frame, box);
  }
  function updateAll() {
    for (var i = 0; i < watched.length; i++) update(watched[i][0], watched[i][1]);
  }

  function panFigures() {
    var images = document.querySelectorAll(FIGURES);
    for (var i = 0; i < images.length; i++) {
      var img = images[i];
      var width = drawnWidth(img);
      if (!width || img.closest(".vb-pan")) continue;
      img.style.minWidth = Math.ceil(width * SMALLEST_SCALE) + "px";
      // Sphinx wraps a scaled picture in a link to the full-size file: keep the two together.
      var inner = img.parentNode.matches("a.image-reference") ? img.parentNode : img;
      var frame = document.createElement("div");
      var box = document.createElement("div");
      frame.className = "vb-pan";
      box.className = "vb-pan-box";
      inner.parentNode.insertBefore(frame, inner);
      box.appendChild(inner);
      frame.appendChild(box);
      watch(frame, box);
    }
  }

  function equations() {
    // MathJax puts each display equation into an <mjx-container> that scrolls sideways.
    var blocks = document.querySelectorAll(EQUATIONS);
    for (var i = 0; i < blocks.length; i++) {
      var box = blocks[i].querySelector("mjx-container");
      if (box && !box.classList.contains("vb-scroll-box")) watch(blocks[i], box);
    }
  }

  function codeBlocks() {
    var blocks = document.querySelectorAll(CODE);
    for (var i = 0; i < blocks.length; i++) {
      var box = blocks[i].querySelector(":scope > pre");
      if (box && !box.classList.contains("vb-scroll-box")) watch(blocks[i], box);
    }
  }

  function closePanelsOnLinks() {
    var ids = ["pst-primary-sidebar-modal", "pst-secondary-sidebar-modal"];
    for (var i = 0; i < ids.length; i++) {
      var dialog = document.getElementById(ids[i]);
      if (!dialog) continue;
      dialog.addEventListener("click", function (event) {
        var link = event.target.closest && event.target.closest("a[href]");
        if (link && this.open) this.close();
      });
    }
  }

  var waiting = false;
  function afterMathJax() {
    // MathJax typesets after the page has loaded; its equations exist once its promise holds.
    equations();
    updateAll();
    if (!waiting && window.MathJax && MathJax.startup && MathJax.startup.promise) {
      waiting = true;
      MathJax.startup.promise.then(function () { equations(); updateAll(); });
    }
  }

  function start() {
    panFigures();
    codeBlocks();
    closePanelsOnLinks();
    afterMathJax();
    window.addEventListener("resize", updateAll);
    window.addEventListener("load", afterMathJax);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
