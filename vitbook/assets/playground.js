/* The digit playground of vitbook.playground: the trained digits ViT, run in the page.

Part 1 is the model: the forward pass of vitbook.vit.VisionTransformer, one step per line, in
plain JavaScript numbers (float64), on weights decoded from the page. Part 2 is the page: the
drawing grid, the bars, the maps and the menus. ES5, no library, no request of any kind.

Layouts (N = 1 + Gh * Gw tokens with a class token, token 0 the class token, then the patches
in row-major grid order; 17 for the digits models):
  ink           64 numbers, row-major, on the digits' scale 0 .. 16 (pixel = ink / 16)
  attention     attention[layer][head]: N x N weights, row-major (row i = query token i)
  rollout       N x N, row-major: the attention rollout of vitbook.analysis.attention_rollout
*/
(function () {
  "use strict";

  // --- Part 1: the model ------------------------------------------------------------------

  // A tensor of the page's JSON: {shape: [...], data: base64 of little-endian float32}.
  function decode(tensor) {
    var bytes = atob(tensor.data), view = new DataView(new ArrayBuffer(bytes.length));
    for (var i = 0; i < bytes.length; i++) view.setUint8(i, bytes.charCodeAt(i));
    var values = new Float64Array(bytes.length / 4);
    for (var k = 0; k < values.length; k++) values[k] = view.getFloat32(4 * k, true);
    return values;
  }

  // erf to about 1e-15: a series of positive terms below 3, a continued fraction for erfc above.
  function erf(x) {
    var a = Math.abs(x), r;
    if (a < 3) {  // erf(a) = 2/sqrt(pi) exp(-a^2) sum_n 2^n a^(2n+1) / (1 * 3 * ... * (2n+1))
      var term = a, sum = a;
      for (var n = 1; term > 1e-17 * sum; n++) {
        term *= 2 * a * a / (2 * n + 1);
        sum += term;
      }
      r = 2 / Math.sqrt(Math.PI) * Math.exp(-a * a) * sum;
    } else if (a < 6) {  // erfc(a) = exp(-a^2) / sqrt(pi) / (a + (1/2) / (a + 1 / (a + ...)))
      var t = a;
      for (var k = 60; k > 0; k--) t = a + (k / 2) / t;
      r = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / t;
    } else {
      r = 1;  // erfc(6) < 3e-17
    }
    return x < 0 ? -r : r;
  }

  function gelu(x) {  // the exact form, as torch.nn.GELU()
    return 0.5 * x * (1 + erf(x / Math.SQRT2));
  }

  // y = x W^T + b for n rows: x (n, inDim), W (outDim, inDim) as stored by nn.Linear.
  function linear(x, n, W, b, outDim) {
    var inDim = x.length / n, y = new Float64Array(n * outDim);
    for (var i = 0; i < n; i++) {
      var row = x.subarray(i * inDim, (i + 1) * inDim);
      for (var o = 0; o < outDim; o++) {
        var s = b ? b[o] : 0, w = o * inDim;
        for (var j = 0; j < inDim; j++) s += row[j] * W[w + j];
        y[i * outDim + o] = s;
      }
    }
    return y;
  }

  // LayerNorm over the last axis: (x - mean) / sqrt(biased variance + eps) * gamma + beta.
  function layerNorm(x, n, gamma, beta, eps) {
    var d = gamma.length, y = new Float64Array(n * d);
    for (var i = 0; i < n; i++) {
      var mean = 0, variance = 0;
      for (var j = 0; j < d; j++) mean += x[i * d + j] / d;
      for (j = 0; j < d; j++) variance += (x[i * d + j] - mean) * (x[i * d + j] - mean) / d;
      var scale = 1 / Math.sqrt(variance + eps);
      for (j = 0; j < d; j++) y[i * d + j] = (x[i * d + j] - mean) * scale * gamma[j] + beta[j];
    }
    return y;
  }

  function softmax(logits) {  // subtract the largest logit so that exp cannot overflow
    var top = Math.max.apply(null, logits), out = [], total = 0;
    for (var i = 0; i < logits.length; i++) total += (out[i] = Math.exp(logits[i] - top));
    for (i = 0; i < out.length; i++) out[i] /= total;
    return out;
  }

  // softmax(q k^T / sqrt(Dh)) v for every head; the heads sit side by side in qkv (N, 3D),
  // ordered (three heads dh) as in vitbook.attention. Returns the concatenated heads (N, D)
  // and the weights [head] -> N x N row-major.
  function attention(qkv, n, d, heads) {
    var dh = d / heads, out = new Float64Array(n * d), weights = [];
    for (var h = 0; h < heads; h++) {
      var w = [];
      for (var i = 0; i < n; i++) {
        var logits = [];
        for (var j = 0; j < n; j++) {
          var s = 0;
          for (var e = 0; e < dh; e++) {
            s += qkv[i * 3 * d + h * dh + e] * qkv[j * 3 * d + d + h * dh + e];  // q_i . k_j
          }
          logits.push(s * Math.pow(dh, -0.5));
        }
        var row = softmax(logits);
        for (j = 0; j < n; j++) {
          w.push(row[j]);
          for (e = 0; e < dh; e++) out[i * d + h * dh + e] += row[j] * qkv[j * 3 * d + 2 * d + h * dh + e];
        }
      }
      weights.push(w);
    }
    return {out: out, weights: weights};
  }

  // The forward pass of VisionTransformer.forward_with_attention, for one
  // digit of 64 ink values; the weights W carry timm's names.
  function forward(model, ink) {
    var c = model.config, W = model.tensors, D = c.embed_dim;
    var P = c.patch_size, side = c.img_size[1], eps = c.norm_eps;
    var gh = c.img_size[0] / P, gw = side / P;
    var prefix = c.class_token ? 1 : 0, n = prefix + gh * gw, i, j;
    // Patch embedding: the P x P conv of stride P is a matmul per patch,
    // each patch laid out (c ph pw), the order of conv.weight.flatten(1);
    // pixel = ink / 16, as in load_digits_split.
    var patches = new Float64Array(gh * gw * P * P);
    for (var k = 0; k < gh * gw; k++) {
      for (i = 0; i < P; i++) {
        for (j = 0; j < P; j++) {
          var row = Math.floor(k / gw) * P + i, col = (k % gw) * P + j;
          patches[(k * P + i) * P + j] = ink[row * side + col] / 16;
        }
      }
    }
    var embedded = linear(patches, gh * gw, W["patch_embed.proj.weight"],
                          W["patch_embed.proj.bias"], D);  // (Gh * Gw, D)
    // z_0 = [x_class; x_1 E; ...; x_N E] + E_pos: (N, D)
    var x = new Float64Array(n * D);
    if (prefix) x.set(W["cls_token"], 0);
    x.set(embedded, prefix * D);
    var pos = W["pos_embed"];  // absent with pos_embed="none"
    if (pos) for (i = 0; i < n * D; i++) x[i] += pos[i];
    var weights = [];
    for (var l = 0; l < c.depth; l++) {
      var b = "blocks." + l + ".";
      // x = x + Attention(LayerNorm(x))
      var h = layerNorm(x, n, W[b + "norm1.weight"], W[b + "norm1.bias"],
                        eps);
      var qkv = linear(h, n, W[b + "attn.qkv.weight"],
                       W[b + "attn.qkv.bias"], 3 * D);  // (N, 3D)
      var attended = attention(qkv, n, D, c.num_heads);
      weights.push(attended.weights);  // (Nh, N * N)
      var out = linear(attended.out, n, W[b + "attn.proj.weight"],
                       W[b + "attn.proj.bias"], D);
      for (i = 0; i < n * D; i++) x[i] += out[i];
      // x = x + MLP(LayerNorm(x)), MLP = fc2(GELU(fc1))
      h = layerNorm(x, n, W[b + "norm2.weight"], W[b + "norm2.bias"],
                    eps);
      var hidden = W[b + "mlp.fc1.bias"].length;
      h = linear(h, n, W[b + "mlp.fc1.weight"], W[b + "mlp.fc1.bias"],
                 hidden).map(gelu);  // (N, hidden)
      out = linear(h, n, W[b + "mlp.fc2.weight"], W[b + "mlp.fc2.bias"],
                   D);
      for (i = 0; i < n * D; i++) x[i] += out[i];
    }
    x = layerNorm(x, n, W["norm.weight"], W["norm.bias"], eps);
    // Pool: the class token's state, or the mean of the patch tokens (D,)
    var pooled = new Float64Array(D);
    if (c.pool === "cls") {
      pooled.set(x.subarray(0, D));
    } else {
      for (i = prefix; i < n; i++) {
        for (j = 0; j < D; j++) pooled[j] += x[i * D + j] / (n - prefix);
      }
    }
    var logits = Array.from(
      linear(pooled, 1, W["head.weight"], W["head.bias"], c.num_classes));
    return {logits: logits, probabilities: softmax(logits),
            attention: weights};
  }

  // Attention rollout (Abnar and Zuidema, 2020), as vitbook.analysis.attention_rollout with
  // head_fusion="mean": A'_l = rownorm(mean_heads(A_l) + I) for the layers l = 0 .. L-1 (the
  // index of weights, as in the menus), rollout = A'_{L-1} ... A'_1 A'_0.
  function rollout(weights) {
    var n = Math.round(Math.sqrt(weights[0][0].length)), result = [];
    for (var i = 0; i < n * n; i++) result.push(i % (n + 1) === 0 ? 1 : 0);
    for (var l = 0; l < weights.length; l++) {
      var fused = [];
      for (i = 0; i < n; i++) {
        var row = [], total = 0;
        for (var j = 0; j < n; j++) {
          var mean = 0;
          for (var h = 0; h < weights[l].length; h++) mean += weights[l][h][i * n + j];
          row.push(mean / weights[l].length + (i === j ? 1 : 0));
          total += row[j];
        }
        for (j = 0; j < n; j++) fused.push(row[j] / total);
      }
      var next = [];
      for (i = 0; i < n; i++) {
        for (j = 0; j < n; j++) {
          var s = 0;
          for (var k = 0; k < n; k++) s += fused[i * n + k] * result[k * n + j];
          next.push(s);
        }
      }
      result = next;
    }
    return result;
  }

  // --- Part 2: the page ---------------------------------------------------------------------

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
      result = forward(model, values);
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
        var out = forward(model, values);
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
    vitbook.playgroundMath = {erf: erf, gelu: gelu, forward: forward, rollout: rollout};
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
