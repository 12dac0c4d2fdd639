/* The ViT of vitbook.vit.VisionTransformer, run in the page: the forward pass of the book's
playgrounds (vitbook.widgets.playground for digits, vitbook.widgets.photo_playground for photos).

One step per line, in plain JavaScript numbers (float64), on weights decoded from the page. ES5,
no library, no request of any kind. It defines window.vitbook.vitMath (also reachable as
window.vitbook.playgroundMath): {decode, erf, gelu, forward, rollout}. A page may hold it more
than once (one copy per playground): the first copy defines vitMath, the others keep it.

Layouts (N = 1 + Gh * Gw tokens with a class token: token 0 the class token, then the patches
in row-major grid order):
  input         C * H * W numbers in (C, H, W) order, as the model receives them (the digit page
                passes ink / 16, the photo page (pixel / 255 - mean[c]) / std[c])
  attention     attention[layer][head]: N x N weights, row-major (row i = query token i)
  rollout       N x N, row-major: the attention rollout of vitbook.analysis.attention_rollout
*/
(function () {
  "use strict";

  var vitbook = window.vitbook = window.vitbook || {};
  if (vitbook.vitMath) {  // an earlier copy on this page: keep its functions
    vitbook.playgroundMath = vitbook.vitMath;
    return;
  }

  function bytesOf(base64) {
    var text = atob(base64), bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return bytes;
  }

  function float32s(base64) {  // little-endian float32, whatever the machine
    var bytes = bytesOf(base64), view = new DataView(bytes.buffer);
    var values = new Float64Array(bytes.length / 4);
    for (var k = 0; k < values.length; k++) values[k] = view.getFloat32(4 * k, true);
    return values;
  }

  // A tensor of the page's JSON, as a Float64Array: {shape, dtype: "float32", data: base64 of
  // little-endian float32}, or {shape, dtype: "int8", data: base64 of int8, scale: base64 of one
  // little-endian float32 per output row}. An int8 weight becomes q * scale[row] rounded to
  // float32, the values of vitbook.pretrained.checkpoints.dequantize_int8 exactly.
  function decode(tensor) {
    if (tensor.dtype !== "int8") return float32s(tensor.data);
    var q = new Int8Array(bytesOf(tensor.data).buffer), scale = float32s(tensor.scale);
    var perRow = q.length / scale.length, values = new Float64Array(q.length);
    for (var k = 0; k < q.length; k++) values[k] = Math.fround(q[k] * scale[Math.floor(k / perRow)]);
    return values;
  }

  var ODD = [];  // 1 / (2n + 1), so that the series below multiplies instead of dividing
  for (var odd = 0; odd < 80; odd++) ODD.push(1 / (2 * odd + 1));

  // erf to about 1e-15: a series of positive terms below 3, a continued fraction for erfc above.
  function erf(x) {
    var a = Math.abs(x), r;
    if (a < 3) {  // erf(a) = 2/sqrt(pi) exp(-a^2) sum_n 2^n a^(2n+1) / (1 * 3 * ... * (2n+1))
      var term = a, sum = a, twice = 2 * a * a;
      for (var n = 1; term > 1e-17 * sum; n++) {  // at most 60 terms, at a = 3
        term *= twice * ODD[n];
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

  // y = x W^T + b for n rows: x (n, inDim), W (outDim, inDim) as stored by nn.Linear. Each
  // output is the dot product of two contiguous rows; the loop takes four rows of x and two of
  // W at a time, so that every number it loads serves in two or four products.
  function linear(x, n, W, b, outDim) {
    var inDim = x.length / n, y = new Float64Array(n * outDim), i = 0, j, o;
    for (; i + 3 < n; i += 4) {
      var r0 = i * inDim, r1 = r0 + inDim, r2 = r1 + inDim, r3 = r2 + inDim;
      for (o = 0; o + 1 < outDim; o += 2) {
        var u = o * inDim, v = u + inDim;
        var s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
        for (j = 0; j < inDim; j++) {
          var wu = W[u + j], wv = W[v + j];
          var x0 = x[r0 + j], x1 = x[r1 + j], x2 = x[r2 + j], x3 = x[r3 + j];
          s0 += x0 * wu; s1 += x1 * wu; s2 += x2 * wu; s3 += x3 * wu;
          t0 += x0 * wv; t1 += x1 * wv; t2 += x2 * wv; t3 += x3 * wv;
        }
        var bu = b ? b[o] : 0, bv = b ? b[o + 1] : 0;
        y[i * outDim + o] = bu + s0; y[i * outDim + o + 1] = bv + t0;
        y[(i + 1) * outDim + o] = bu + s1; y[(i + 1) * outDim + o + 1] = bv + t1;
        y[(i + 2) * outDim + o] = bu + s2; y[(i + 2) * outDim + o + 1] = bv + t2;
        y[(i + 3) * outDim + o] = bu + s3; y[(i + 3) * outDim + o + 1] = bv + t3;
      }
    }
    for (var row = 0; row < n; row++) {  // what is left: the last rows, the last odd output
      for (o = row < i ? outDim - outDim % 2 : 0; o < outDim; o++) {
        var s = 0, w = o * inDim, r = row * inDim;
        for (j = 0; j < inDim; j++) s += x[r + j] * W[w + j];
        y[row * outDim + o] = (b ? b[o] : 0) + s;
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
    var top = -Infinity, out = [], total = 0, i;
    for (i = 0; i < logits.length; i++) top = Math.max(top, logits[i]);
    for (i = 0; i < logits.length; i++) total += (out[i] = Math.exp(logits[i] - top));
    for (i = 0; i < out.length; i++) out[i] /= total;
    return out;
  }

  // softmax(q k^T / sqrt(Dh)) v for every head; the heads sit side by side in qkv (N, 3D),
  // ordered (three heads dh) as in vitbook.attention. Returns the concatenated heads (N, D)
  // and the weights [head] -> N x N row-major. Both products are those of linear: q k^T is q
  // through a layer whose weight rows are the keys, w v is w through one whose rows are the
  // columns of v.
  function attention(qkv, n, d, heads) {
    var dh = d / heads, scale = Math.pow(dh, -0.5), out = new Float64Array(n * d), weights = [];
    var q = new Float64Array(n * dh), k = new Float64Array(n * dh), vt = new Float64Array(dh * n);
    var i, j, e;
    for (var h = 0; h < heads; h++) {
      for (i = 0; i < n; i++) {  // this head's q and k (N, Dh), and v transposed (Dh, N)
        var at = i * 3 * d + h * dh;
        q.set(qkv.subarray(at, at + dh), i * dh);
        k.set(qkv.subarray(at + d, at + d + dh), i * dh);
        for (e = 0; e < dh; e++) vt[e * n + i] = qkv[at + 2 * d + e];
      }
      var w = linear(q, n, k, null, n);  // q k^T: (N, N), row i = query i
      for (i = 0; i < n; i++) {  // softmax of each row of q k^T / sqrt(Dh)
        var top = -Infinity, total = 0;
        for (j = 0; j < n; j++) top = Math.max(top, (w[i * n + j] *= scale));
        for (j = 0; j < n; j++) total += (w[i * n + j] = Math.exp(w[i * n + j] - top));
        for (j = 0; j < n; j++) w[i * n + j] /= total;
      }
      var attended = linear(w, n, vt, null, dh);  // w v: (N, Dh)
      for (i = 0; i < n; i++) out.set(attended.subarray(i * dh, (i + 1) * dh), i * d + h * dh);
      weights.push(Array.from(w));
    }
    return {out: out, weights: weights};
  }

  // The forward pass of VisionTransformer.forward_with_attention for one
  // image: input holds C * H * W numbers in (C, H, W) order, as the
  // model receives them; the weights W carry timm's names.
  function forward(model, input) {
    var c = model.config, W = model.tensors;
    var D = c.embed_dim, C = c.in_chans;
    var P = c.patch_size, height = c.img_size[0];
    var side = c.img_size[1];
    var eps = c.norm_eps;
    var gh = height / P, gw = side / P, patchDim = C * P * P;
    var prefix = c.class_token ? 1 : 0, n = prefix + gh * gw, i, j;
    // Patch embedding: the P x P conv of stride P is a matmul per patch,
    // each patch laid out (c ph pw), the order of conv.weight.flatten(1).
    var patches = new Float64Array(gh * gw * patchDim);
    for (var k = 0; k < gh * gw; k++) {
      for (var ch = 0; ch < C; ch++) {
        for (i = 0; i < P; i++) {
          for (j = 0; j < P; j++) {
            var row = Math.floor(k / gw) * P + i, col = (k % gw) * P + j;
            patches[k * patchDim + (ch * P + i) * P + j] =
              input[(ch * height + row) * side + col];
          }
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
    // Pool: the class token's state, or the mean of the patch tokens
    // (D,)
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
    var n = Math.round(Math.sqrt(weights[0][0].length)), result = new Float64Array(n * n);
    var fused = new Float64Array(n * n), i, j, k;
    for (i = 0; i < n; i++) result[i * n + i] = 1;
    for (var l = 0; l < weights.length; l++) {
      var heads = weights[l];
      for (i = 0; i < n; i++) {
        var total = 0;
        for (j = 0; j < n; j++) {
          var mean = 0;
          for (var h = 0; h < heads.length; h++) mean += heads[h][i * n + j];
          total += (fused[i * n + j] = mean / heads.length + (i === j ? 1 : 0));
        }
        for (j = 0; j < n; j++) fused[i * n + j] /= total;
      }
      var next = new Float64Array(n * n);
      for (i = 0; i < n; i++) {
        for (k = 0; k < n; k++) {  // row i of fused times result, a row of result at a time
          var f = fused[i * n + k];
          for (j = 0; j < n; j++) next[i * n + j] += f * result[k * n + j];
        }
      }
      result = next;
    }
    return Array.from(result);
  }

  vitbook.vitMath = {decode: decode, erf: erf, gelu: gelu, forward: forward, rollout: rollout};
  vitbook.playgroundMath = vitbook.vitMath;
})();
