/* The digit playground of vitbook.widgets.playground: the trained digits ViT, run in the page.

The page: the drawing grid, the bars, the maps and the menus. The model's forward pass is
vitbook/assets/vit.js (window.vitbook.vitMath), which the fragment inlines before this script.
ES5, no library, no request of any kind.

Layouts (N = 1 + Gh * Gw tokens with a class token, token 0 the class token, then the patches
in row-major grid order; 17 for the digits models):
  ink           64 numbers, row-major, on the digits' scale 0 .. 16 (pixel = ink / 16)
  attention     attention[layer][head]: N x N weights, row-major (row i = query token i)
  rollout       N x N, row-major: the attention rollout of vitbook.analysis.attention_rollout
*/
(function () {
  "use strict";

  var math = window.vitbook.vitMath, decode = math.decode, forward = math.forward;
  var rollout = math.rollout;

  // The model's input for some ink: pixel = ink / 16, as in load_digits_split.
  function modelInput(ink) {
    var values = [];
    for (var i = 0; i < ink.length; i++) values.push(ink[i] / 16);
    return values;
  }

  var BITMAP = 32, BLOCK = 4;  // the digits were drawn on 32 x 32 bitmaps; ink = on pixels per 4 x 4
  var BAYER = [0, 8, 2, 10, 12, 4, 14, 6, 3, 11, 1, 9, 15, 7, 13, 5];  // spreads k of 16 pixels
  var ERASER = 3;  // the eraser's radius in bitmap pixels: it clears a path 6 pixels wide

  // One row of a map: the query's row of attention or rollout; "pooled" is the mean of the patch
  // queries' rows, which is what a mean-pooled head reads.
  function queryRow(matrix, n, prefix, query) {
    var row = [];
    for (var j = 0; j < n; j++) {
      if (query !== "pooled") {
        row.push(matrix[query * n + j]);
        continue;
      }
      var s = 0;
      for (var i = prefix; i < n; i++) s += matrix[i * n + j] / (n - prefix);
      row.push(s);
    }
    return row;
  }

  function init(root) {
    root.setAttribute("data-ready", "true");
    var model = JSON.parse(root.querySelector("script.vbp-model").textContent);
    for (var name in model.tensors) model.tensors[name] = decode(model.tensors[name]);
    var c = model.config, side = c.img_size[1], P = c.patch_size;
    var gh = c.img_size[0] / P, gw = side / P, prefix = c.class_token ? 1 : 0, n = prefix + gh * gw;
    // The drawing: the pixels of a loaded test digit (base), and for every pixel the distance
    // from its centre to the nearest point the pen passed over (near). A pixel is on when it is
    // in base or within the pen's radius of a pen line; the radius is chosen after each pen
    // move so that the drawing holds the data set's ink (pen.ink on pixels of the 1,024).
    var pen = model.pen, base = new Uint8Array(BITMAP * BITMAP);
    var near = new Float64Array(BITMAP * BITMAP).fill(Infinity), radius = pen.max_radius;
    var tool = "pen", last = null, result = null;
    var grid = root.querySelector("canvas.vbp-grid"), examples = root.querySelector("select.vbp-example");
    var menus = {
      layer: root.querySelector("select.vbp-layer"),
      head: root.querySelector("select.vbp-head"),
      query: root.querySelector("select.vbp-query"),
    };

    function ink() {  // 64 values 0 .. 16: the on pixels of each 4 x 4 block of the bitmap
      var values = [];
      for (var r = 0; r < side; r++) {
        for (var col = 0; col < side; col++) {
          var count = 0;
          for (var i = 0; i < BLOCK; i++) {
            for (var j = 0; j < BLOCK; j++) count += on((r * BLOCK + i) * BITMAP + col * BLOCK + j);
          }
          values.push(count);
        }
      }
      return values;
    }

    function on(pixel) {
      return base[pixel] || near[pixel] <= radius ? 1 : 0;
    }

    function load(values) {  // ink values -> a bitmap with that many on pixels in each block
      near.fill(Infinity);
      for (var r = 0; r < side; r++) {
        for (var col = 0; col < side; col++) {
          var k = Math.round(Math.min(16, Math.max(0, values[r * side + col])));
          for (var b = 0; b < BLOCK * BLOCK; b++) {
            base[(r * BLOCK + (b >> 2)) * BITMAP + col * BLOCK + (b & 3)] = BAYER[b] < k ? 1 : 0;
          }
        }
      }
      update();
    }

    function stamp(x, y) {  // the pen passes over (x, y), in bitmap pixels; or the eraser does
      var reach = tool === "pen" ? pen.max_radius : ERASER;
      for (var i = Math.max(0, Math.floor(y - reach)); i < Math.min(BITMAP, y + reach); i++) {
        for (var j = Math.max(0, Math.floor(x - reach)); j < Math.min(BITMAP, x + reach); j++) {
          var distance = Math.hypot(j + 0.5 - x, i + 0.5 - y), pixel = i * BITMAP + j;
          if (tool === "pen") {
            near[pixel] = Math.min(near[pixel], distance);
          } else if (distance <= ERASER) {
            base[pixel] = 0;
            near[pixel] = Infinity;
          }
        }
      }
    }

    // The pen's radius: as thick as gives the data set's ink, from pen.min_radius (a line drawn
    // over a loaded digit) to pen.max_radius (a short line). The eraser leaves it as it is, so it
    // takes ink away only where it passes.
    function fit() {
      var count = 0, free = [];
      for (var pixel = 0; pixel < base.length; pixel++) {
        if (base[pixel]) count++;
        else if (near[pixel] <= pen.max_radius) free.push(near[pixel]);
      }
      var wanted = pen.ink - count;
      if (wanted <= 0) return pen.min_radius;
      if (free.length < wanted) return pen.max_radius;
      free.sort(function (a, b) { return a - b; });
      return Math.max(pen.min_radius, free[wanted - 1]);
    }

    function stroke(event) {
      var box = grid.getBoundingClientRect();
      var x = (event.clientX - box.left) / box.width * BITMAP;
      var y = (event.clientY - box.top) / box.height * BITMAP;
      var from = last || {x: x, y: y}, steps = Math.max(1, Math.ceil(2 * Math.hypot(x - from.x, y - from.y)));
      for (var s = 1; s <= steps; s++) stamp(from.x + (x - from.x) * s / steps, from.y + (y - from.y) * s / steps);
      if (tool === "pen") radius = fit();
      last = {x: x, y: y};
      examples.value = "";  // the menu now says "your drawing"
      update();
    }

    grid.addEventListener("pointerdown", function (event) {
      event.preventDefault();
      try {
        grid.setPointerCapture(event.pointerId);
      } catch (error) {
        // a pointer the browser does not track (a synthetic event): drawing works without it
      }
      last = null;
      stroke(event);
    });
    grid.addEventListener("pointermove", function (event) {
      if (last) stroke(event);
    });
    ["pointerup", "pointercancel", "lostpointercapture"].forEach(function (type) {
      grid.addEventListener(type, function () { last = null; });
    });

    function paintDigit(canvas, values) {  // grey ink on white, as the chapter's figures
      var g = canvas.getContext("2d"), cell = canvas.width / side;
      for (var r = 0; r < side; r++) {
        for (var col = 0; col < side; col++) {
          var level = Math.round(255 * (1 - values[r * side + col] / 16));
          g.fillStyle = "rgb(" + level + "," + level + "," + level + ")";
          g.fillRect(col * cell, r * cell, cell + 1, cell + 1);
        }
      }
      return g;
    }

    function paintMap(canvas, values, row, query) {  // the patches' shares over the digit
      var g = paintDigit(canvas, values), cell = canvas.width / gw, top = 0;
      for (var k = 0; k < gh * gw; k++) top = Math.max(top, row[prefix + k]);
      for (k = 0; k < gh * gw; k++) {
        g.fillStyle = "rgba(230,85,13," + (0.85 * row[prefix + k] / top).toFixed(3) + ")";
        g.fillRect((k % gw) * cell, Math.floor(k / gw) * cell, cell, cell);
      }
      g.strokeStyle = "rgba(128,128,128,0.6)";
      g.lineWidth = 1;
      for (k = 1; k < gw; k++) g.strokeRect(k * cell, -1, 0, canvas.height + 2);
      for (k = 1; k < gh; k++) g.strokeRect(-1, k * cell, canvas.width + 2, 0);
      if (typeof query === "number" && query >= prefix) {  // outline the query patch
        g.strokeStyle = "#1f77b4";
        g.lineWidth = 4;
        g.strokeRect(((query - prefix) % gw) * cell + 2, Math.floor((query - prefix) / gw) * cell + 2,
                     cell - 4, cell - 4);
      }
      return top;
    }

    function text(selector, value) {
      root.querySelector(selector).textContent = value;
    }

    function update() {
      var values = ink();
      var rows = [];
      for (var r = 0; r < side; r++) rows.push("    [" + values.slice(r * side, (r + 1) * side).join(", ") + "],");
      root.querySelector("textarea.vbp-ink").value = "[\n" + rows.join("\n") + "\n]";
      if (Math.max.apply(null, values) === 0) {  // an empty grid: nothing to read, no prediction
        result = null;
        clear(values);
        return;
      }
      result = forward(model, modelInput(values));
      result.rollout = rollout(result.attention);
      root.classList.remove("vbp-blank");
      var best = 0;
      for (var d = 0; d < c.num_classes; d++) {
        if (result.probabilities[d] > result.probabilities[best]) best = d;
      }
      var bars = root.querySelectorAll(".vbp-bar");
      for (d = 0; d < bars.length; d++) {
        var p = result.probabilities[d];
        bars[d].setAttribute("data-probability", String(p));
        bars[d].classList.toggle("vbp-best", d === best);
        bars[d].querySelector(".vbp-fill").style.width = (100 * p).toFixed(1) + "%";
        bars[d].querySelector("output").textContent = (100 * p).toFixed(1) + " %";
      }
      root.setAttribute("data-prediction", String(best));
      paintDigit(grid, values);
      var layer = Number(menus.layer.value), head = menus.head.value;
      var query = menus.query.value === "pooled" ? "pooled" : Number(menus.query.value);
      var heads = result.attention[layer], matrix = [];
      for (var i = 0; i < n * n; i++) {  // one head, or the mean of the heads
        var s = 0;
        for (var h = 0; h < heads.length; h++) s += heads[h][i];
        matrix.push(head === "mean" ? s / heads.length : heads[Number(head)][i]);
      }
      var attended = queryRow(matrix, n, prefix, query), traced = queryRow(result.rollout, n, prefix, query);
      var top = paintMap(root.querySelector("canvas.vbp-attention"), values, attended, query);
      var share = prefix ? "; class token " + attended[0].toFixed(2) : "";
      text(".vbp-attention-scale", "0 .. " + top.toFixed(2) + share);
      top = paintMap(root.querySelector("canvas.vbp-rollout"), values, traced, query);
      share = prefix ? "; class token " + traced[0].toFixed(2) : "";
      text(".vbp-rollout-scale", "0 .. " + top.toFixed(2) + share);
    }

    // An empty grid: no bars, no maps, and a word on what to do (the model would still give
    // ten probabilities, for a picture that is no digit).
    function clear(values) {
      root.classList.add("vbp-blank");
      root.removeAttribute("data-prediction");
      var bars = root.querySelectorAll(".vbp-bar");
      for (var d = 0; d < bars.length; d++) {
        bars[d].removeAttribute("data-probability");
        bars[d].classList.remove("vbp-best");
        bars[d].querySelector(".vbp-fill").style.width = "0";
        bars[d].querySelector("output").textContent = "";
      }
      paintDigit(grid, values);
      var maps = ["attention", "rollout"];
      for (var m = 0; m < maps.length; m++) {
        paintDigit(root.querySelector("canvas.vbp-" + maps[m]), values);
        text(".vbp-" + maps[m] + "-scale", "");
      }
    }

    var tools = root.querySelectorAll("button[data-tool]");
    for (var t = 0; t < tools.length; t++) {
      tools[t].addEventListener("click", function (event) {
        tool = event.currentTarget.getAttribute("data-tool");
        for (var u = 0; u < tools.length; u++) {
          tools[u].setAttribute("aria-pressed", String(tools[u].getAttribute("data-tool") === tool));
        }
      });
    }
    root.querySelector("button.vbp-clear").addEventListener("click", function () {
      base.fill(0);
      near.fill(Infinity);
      examples.value = "";
      update();
    });
    examples.addEventListener("change", function () {
      if (examples.value !== "") load(model.examples[Number(examples.value)].ink);
    });
    for (name in menus) menus[name].addEventListener("change", update);
    load(examples.value === "" ? new Array(side * side).fill(0) : model.examples[Number(examples.value)].ink);

    return {
      root: root,
      config: c,
      predict: function (values) {  // 64 ink values -> logits, probabilities, attention, rollout
        var out = forward(model, modelInput(values));
        out.rollout = rollout(out.attention);
        return out;
      },
      pixels: ink,
      load: load,
      current: function () { return result; },
    };
  }

  function initAll() {
    // A playground is complete once its own script element exists (it comes last). Each copy of
    // this script starts every complete playground not yet marked ready: the classic notebook
    // runs inline scripts from a temporary <script> in <head>, where document.currentScript is
    // not inside the output.
    var vitbook = window.vitbook = window.vitbook || {};
    var entries = vitbook.playgrounds = vitbook.playgrounds || [];
    var roots = document.querySelectorAll(".vitbook-playground"), ordered = [];
    for (var i = 0; i < roots.length; i++) {
      if (!roots[i].querySelector("script.vbp-js")) continue;
      var entry = null;
      for (var e = 0; e < entries.length; e++) if (entries[e].root === roots[i]) entry = entries[e];
      if (!entry && !roots[i].getAttribute("data-ready")) entry = init(roots[i]);
      if (entry) ordered.push(entry);
    }
    entries.length = 0;  // in document order; playgrounds no longer on the page are dropped
    Array.prototype.push.apply(entries, ordered);
  }

  initAll();
  setTimeout(initAll, 0);
})();
