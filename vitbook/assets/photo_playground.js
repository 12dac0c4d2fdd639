/* The photo playground of vitbook.widgets.photo_playground: the CIFAR-10 ViT, run in the page.

The page: the menu of test photos, the file input, the photo as the model sees it, the rollout
map and the bars. The model's forward pass is vitbook/assets/vit.js (window.vitbook.vitMath),
which the fragment inlines before this script. ES5, no library, no request of any kind: a
chosen file is read from the reader's own machine.

Layouts (N = 65 tokens: token 0 the class token, then the 8 x 8 patches in row-major order):
  pixels        32 * 32 * 3 numbers 0 .. 255, row-major in (height, width, channel) order
  attention     attention[layer][head]: N x N weights, row-major (row i = query token i)
  rollout       N x N, row-major: the attention rollout of vitbook.analysis.attention_rollout
*/
(function () {
  "use strict";

  var math = window.vitbook.vitMath;
  var SIDE = 32, CHANNELS = 3, PIXELS = SIDE * SIDE * CHANNELS;
  var STRIP = 4000000;  // source pixels read from a photo at a time, to spare a phone's memory

  function bytesOf(base64) {
    var text = atob(base64), bytes = [];
    for (var i = 0; i < text.length; i++) bytes.push(text.charCodeAt(i));
    return bytes;
  }

  function checked(pixels) {
    if (!pixels || pixels.length !== PIXELS) {
      throw new Error("a photo is 3,072 pixels 0 .. 255 (32 x 32 x 3, in (height, width, " +
                      "channel) order), got " + (pixels ? pixels.length : pixels));
    }
    return Array.prototype.slice.call(pixels);
  }

  // How much of source pixel p (of `size`) output pixel o (of `side`) covers, in units of
  // 1 / side of a source pixel: the overlap of [p, p + 1) * side and [o, o + 1) * size. Integers,
  // so that the sums are exact and the same on every machine.
  function overlap(p, o, size, side) {
    return Math.max(0, Math.min((p + 1) * side, (o + 1) * size) - Math.max(p * side, o * size));
  }

  // The square at the centre of a picture, reduced to SIDE x SIDE by area averaging: each
  // output pixel is the mean of the square of the picture it covers, the pixels on its border
  // weighted by the share they cover. Transparent pictures are shown on white. Read in strips
  // of rows, so that a large photo needs little memory at a time.
  function reduce(image) {
    var width = image.naturalWidth, height = image.naturalHeight, size = Math.min(width, height);
    var left = Math.floor((width - size) / 2), top = Math.floor((height - size) / 2);
    var rows = Math.max(1, Math.min(size, Math.floor(STRIP / size)));
    var canvas = document.createElement("canvas");
    canvas.width = size;
    canvas.height = rows;
    var g = canvas.getContext("2d", {willReadFrequently: true});
    g.imageSmoothingEnabled = false;  // drawn at 1:1: the photo's own pixels
    var sums = new Float64Array(PIXELS), line = new Float64Array(SIDE * CHANNELS);
    var from = [], to = [];  // the output columns each source column falls in
    for (var p = 0; p < size; p++) {
      from.push(Math.floor(p * SIDE / size));
      to.push(Math.min(SIDE - 1, Math.floor(((p + 1) * SIDE - 1) / size)));
    }
    for (var y = 0; y < size; y += rows) {
      var strip = Math.min(rows, size - y);
      g.fillStyle = "#fff";
      g.fillRect(0, 0, size, rows);
      g.drawImage(image, left, top + y, size, strip, 0, 0, size, strip);
      var data = g.getImageData(0, 0, size, strip).data;
      for (var r = 0; r < strip; r++) {
        line.fill(0);
        for (p = 0; p < size; p++) {
          for (var o = from[p]; o <= to[p]; o++) {
            var w = overlap(p, o, size, SIDE), at = 4 * (r * size + p);
            for (var ch = 0; ch < CHANNELS; ch++) line[o * CHANNELS + ch] += w * data[at + ch];
          }
        }
        var row = y + r;
        for (var outRow = from[row]; outRow <= to[row]; outRow++) {
          var v = overlap(row, outRow, size, SIDE);
          for (var k = 0; k < SIDE * CHANNELS; k++) sums[outRow * SIDE * CHANNELS + k] += v * line[k];
        }
      }
    }
    var pixels = [];  // each output pixel covers size x size units of 1 / SIDE^2 source pixels
    for (k = 0; k < PIXELS; k++) pixels.push(Math.round(sums[k] / (size * size)));
    return {pixels: pixels, width: width, height: height, size: size};
  }

  function init(root) {
    root.setAttribute("data-ready", "true");
    var model = JSON.parse(root.querySelector("script.vpp-model").textContent);
    for (var name in model.tensors) model.tensors[name] = math.decode(model.tensors[name]);
    var c = model.config, gw = SIDE / c.patch_size, patches = gw * gw;
    var menu = root.querySelector("select.vpp-example"), file = root.querySelector("input.vpp-file");
    var own = null, shown = null;

    // 8-bit pixels (H, W, C) -> the model's input (C, H, W): pixel / 255, then the model's
    // Normalize layer, (x - mean[c]) / std[c].
    function modelInput(pixels) {
      var x = new Float64Array(PIXELS);
      for (var ch = 0; ch < CHANNELS; ch++) {
        for (var i = 0; i < SIDE * SIDE; i++) {
          x[ch * SIDE * SIDE + i] = (pixels[i * CHANNELS + ch] / 255 - c.mean[ch]) / c.std[ch];
        }
      }
      return x;
    }

    function predict(pixels) {
      var out = math.forward(model, modelInput(checked(pixels)));
      out.rollout = math.rollout(out.attention);
      return out;
    }

    function paintPhoto(canvas, pixels) {
      var g = canvas.getContext("2d"), image = g.createImageData(SIDE, SIDE);
      for (var i = 0; i < SIDE * SIDE; i++) {
        for (var ch = 0; ch < CHANNELS; ch++) image.data[4 * i + ch] = pixels[i * CHANNELS + ch];
        image.data[4 * i + 3] = 255;
      }
      g.putImageData(image, 0, 0);
    }

    // The photo, each patch dimmed by how much less the class token draws on it than on the
    // patch it draws on most (rollout row 0; column 0 is the class token itself).
    function paintRollout(canvas, photo, shares) {
      var g = canvas.getContext("2d"), cell = canvas.width / gw, top = 0, k;
      g.imageSmoothingEnabled = false;
      g.drawImage(photo, 0, 0, canvas.width, canvas.height);
      for (k = 0; k < patches; k++) top = Math.max(top, shares[1 + k]);
      for (k = 0; k < patches; k++) {
        g.fillStyle = "rgba(0,0,0," + (0.8 * (1 - shares[1 + k] / top)).toFixed(3) + ")";
        g.fillRect((k % gw) * cell, Math.floor(k / gw) * cell, cell, cell);
      }
      g.strokeStyle = "rgba(128,128,128,0.5)";
      g.lineWidth = 1;
      for (k = 1; k < gw; k++) {
        g.strokeRect(k * cell, -1, 0, canvas.height + 2);
        g.strokeRect(-1, k * cell, canvas.width + 2, 0);
      }
      return top;
    }

    function percent(p) {
      return (100 * p).toFixed(1) + "\u00a0%";
    }

    function show(pixels, status) {
      var result = predict(pixels);
      result.pixels = checked(pixels);
      shown = result;
      var best = 0, d;
      for (d = 0; d < result.probabilities.length; d++) {
        if (result.probabilities[d] > result.probabilities[best]) best = d;
      }
      var bars = root.querySelectorAll(".vpp-bar");
      for (d = 0; d < bars.length; d++) {
        var p = result.probabilities[d];
        bars[d].setAttribute("data-probability", String(p));
        bars[d].classList.toggle("vpp-best", d === best);
        bars[d].querySelector(".vpp-fill").style.width = (100 * p).toFixed(1) + "%";
        bars[d].querySelector("output").textContent = percent(p);
      }
      root.setAttribute("data-prediction", String(best));
      var photo = root.querySelector("canvas.vpp-photo");
      paintPhoto(photo, result.pixels);
      var shares = result.rollout.slice(0, 1 + patches);  // row 0: the class token's
      var top = paintRollout(root.querySelector("canvas.vpp-rollout"), photo, shares);
      root.querySelector(".vpp-rollout-scale").textContent =
        "Largest patch share " + percent(top) + "; class\u00a0token " + percent(shares[0]);
      root.querySelector(".vpp-status").textContent = status;
    }

    function showExample(index) {
      var example = model.examples[index];
      show(bytesOf(example.pixels), example.name.charAt(0).toUpperCase() + example.name.slice(1) +
           ", labelled " + model.classes[example.label] + ".");
    }

    function showOwn(status) {
      menu.options[0].disabled = false;
      menu.value = "";
      show(own, status);
    }

    function say(text) {
      root.querySelector(".vpp-status").textContent = text;
    }

    menu.addEventListener("change", function () {
      if (menu.value !== "") showExample(Number(menu.value));
      else if (own) show(own, "Your own photo.");
    });
    file.addEventListener("change", function () {
      var chosen = file.files && file.files[0];
      if (!chosen) return;
      say("Reading " + chosen.name + " ...");
      var url = URL.createObjectURL(chosen), image = new Image();
      image.onload = function () {
        URL.revokeObjectURL(url);
        var reduced = reduce(image);
        own = reduced.pixels;
        showOwn("Your photo " + chosen.name + ", " + reduced.width + " x " + reduced.height +
                " pixels: its centre square of " + reduced.size + " x " + reduced.size +
                ", averaged down to 32 x 32.");
      };
      image.onerror = function () {
        URL.revokeObjectURL(url);
        say(chosen.name + " could not be read as a picture: choose a photo (JPEG, PNG, ...).");
      };
      image.src = url;
    });
    showExample(Number(menu.value));

    return {
      root: root,
      config: c,
      predict: predict,  // 3,072 pixels -> logits, probabilities, attention, rollout
      load: function (pixels) {
        own = checked(pixels);
        showOwn("A photo given to load().");
      },
      current: function () { return shown; },
    };
  }

  function initAll() {
    // A playground is complete once its own script element exists (it comes last). Each copy of
    // this script starts every complete playground not yet marked ready: the classic notebook
    // runs inline scripts from a temporary <script> in <head>, where document.currentScript is
    // not inside the output.
    var vitbook = window.vitbook = window.vitbook || {};
    var entries = vitbook.photoPlaygrounds = vitbook.photoPlaygrounds || [];
    var roots = document.querySelectorAll(".vitbook-photo-playground"), ordered = [];
    for (var i = 0; i < roots.length; i++) {
      if (!roots[i].querySelector("script.vpp-js")) continue;
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
