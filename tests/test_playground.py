"""The digit playground: the exported weights, the fragment, and its forward pass in Chromium.

The unit tests check the payload (timm names, shapes, float32, a bit-for-bit round trip), the
fragment (no URL, a size bound) and the errors. The browser tests open a standalone page from
disk (``file://``) in headless Chromium with both shipped digits models on it, run all 450 test
digits through the page's JavaScript forward pass and compare it with PyTorch, then draw on
the grid with the mouse and with touch-type pointer events, and record every request. They also
draw the ten digits as the data set's writers did, through the page's own pen, and check that
the drawings hold the training digits' ink and that both shipped models read them right. A
second page inserts the fragment as the classic notebook does (markup with ``innerHTML``, then
each inline script evaluated from a temporary ``<script>`` in ``<head>``).
"""

from __future__ import annotations

import base64
import copy
import math
import re
import statistics
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import torch
from booktools import CHROMIUM_FLAGS, INSERT_LIKE_JQUERY, browser_path

from vitbook import VisionTransformer, ViTConfig
from vitbook.analysis import attention_rollout
from vitbook.data import load_digits_split
from vitbook.pretrained import load_digits_vit
from vitbook.widgets.playground import (
    MAX_PARAMETERS,
    PEN,
    DigitPlayground,
    decode_weights,
    digit_playground,
    export_weights,
)

VARIANTS = ("mean", "cls")
# The page computes in float64 from the same float32 weights that PyTorch computes with in
# float32: the gap is float32 rounding, far below what a reader could see.
JS_TOLERANCE = 1e-5
FLOAT64_TOLERANCE = 1e-12
FRAGMENT_LIMIT_BYTES = 900_000  # the weights (about 720 kB of base64) and the page around them
URL = re.compile(r"https?:|(?:src|href)\s*=\s*[\"']?//|url\(|@import|fetch\(|XMLHttpRequest")
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>playground</title>
</head><body style="max-width: 688px; margin: 0 auto; padding: 0 16px; font-family: sans-serif">
<script>window.vitbook = {other: "kept"};</script>{fragments}</body></html>"""
JQUERY_PAGE = (
    """<!DOCTYPE html><html><head><meta charset="utf-8"><title>notebook</title></head>
<body><div id="out1"></div><div id="out2"></div><script>
"""
    + INSERT_LIKE_JQUERY
    + """
</script></body></html>"""
)
# Every digit through predict(); the results go back packed as float64 bytes in base64, one
# row per digit: 10 probabilities, 10 logits, the attention (L, Nh, N, N), the rollout (N, N).
PREDICT_ALL = """([index, inks]) => {
  const playground = window.vitbook.playgrounds[index];
  const times = [], rows = [];
  for (const ink of inks) {
    const start = performance.now();
    const out = playground.predict(ink);
    times.push(performance.now() - start);
    rows.push(out.probabilities, out.logits, ...out.attention.flat(), out.rollout);
  }
  const packed = new Uint8Array(Float64Array.from(rows.flat()).buffer);
  let text = "";
  for (let i = 0; i < packed.length; i += 8192) {
    text += String.fromCharCode.apply(null, packed.subarray(i, i + 8192));
  }
  return {packed: btoa(text), times: times};
}"""
STATE = """root => ({
  pixels: window.vitbook.playgrounds[0].pixels(),
  prediction: Number(root.getAttribute("data-prediction")),
  probabilities: Array.from(root.querySelectorAll(".vbp-bar")).map(
    bar => Number(bar.getAttribute("data-probability"))),
  menu: root.querySelector("select.vbp-example").value,
})"""
TOUCH = """([root, points]) => {
  const grid = root.querySelector("canvas.vbp-grid");
  const box = grid.getBoundingClientRect();
  points.forEach(([x, y], i) => {
    const type = i === 0 ? "pointerdown" : "pointermove";
    grid.dispatchEvent(new PointerEvent(type, {
      pointerId: 7, pointerType: "touch", isPrimary: true, bubbles: true, cancelable: true,
      clientX: box.left + x * box.width, clientY: box.top + y * box.height, buttons: 1,
    }));
  });
  grid.dispatchEvent(new PointerEvent("pointerup", {pointerId: 7, pointerType: "touch",
                                                     bubbles: true}));
}"""


@pytest.fixture(scope="module")
def models() -> dict[str, VisionTransformer]:
    return {variant: load_digits_vit(variant=variant) for variant in VARIANTS}


@pytest.fixture(scope="module")
def test_digits() -> tuple[torch.Tensor, torch.Tensor]:
    _, _, images, labels = load_digits_split()
    return images, labels


@pytest.fixture(scope="module")
def fragments(models) -> dict[str, str]:
    return {variant: digit_playground(model).to_html() for variant, model in models.items()}


# --- the payload and the fragment ----------------------------------------------------------------


def test_the_payload_has_every_tensor_under_its_timm_name_in_float32(models):
    model = models["mean"]
    payload = export_weights(model)
    state = model.state_dict()
    assert set(payload["tensors"]) == set(state) | {"pos_embed"}  # + the fixed sincos table
    assert {"patch_embed.proj.weight", "cls_token", "blocks.3.attn.qkv.bias", "head.weight"} <= (
        set(payload["tensors"])
    )
    for name, entry in payload["tensors"].items():
        expected = state[name] if name in state else model.pos_embed
        assert entry["shape"] == list(expected.shape), name
        assert entry["dtype"] == "float32", name
    assert payload["config"]["norm_eps"] == 1e-6 and payload["config"]["pool"] == "mean"
    assert sum(math.prod(e["shape"]) for n, e in payload["tensors"].items() if n in state) == (
        135_050
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_payload_decodes_to_the_state_dict_bit_for_bit(models, variant):
    model = models[variant]
    tensors = decode_weights(export_weights(model))
    for name, tensor in model.state_dict().items():
        assert tensors[name].dtype == torch.float32
        assert torch.equal(tensors[name].view(torch.int32), tensor.view(torch.int32)), name
    assert torch.equal(tensors["pos_embed"], model.pos_embed)


def test_a_payload_whose_bytes_do_not_fit_the_shape_is_refused(models):
    payload = export_weights(models["mean"])
    payload["tensors"]["head.bias"]["shape"] = [11]
    with pytest.raises(ValueError, match=r"'head.bias' holds 40 bytes .* needs 44"):
        decode_weights(payload)
    with pytest.raises(ValueError, match="returned by export_weights"):
        decode_weights({"weights": {}})


def test_the_fragment_asks_for_nothing_and_is_small(fragments, models):
    for variant, fragment in fragments.items():
        assert not URL.findall(fragment), f"{variant}: {URL.findall(fragment)[:3]}"
        assert len(fragment.encode("utf-8")) < FRAGMENT_LIMIT_BYTES
        assert fragment.startswith('<div class="vitbook-playground"')
        assert fragment.endswith("</script></div>")
        assert fragment.count('class="vbp-js"') == 1 and "</script" not in fragment.split(
            '<script class="vbp-js">'
        )[1].removesuffix("</script></div>")
    # the query menu offers what the head reads first
    assert '<option value="pooled">pooled output (the head reads it)' in fragments["mean"]
    assert '<option value="0">class token (the head reads it)' in fragments["cls"]
    assert repr(digit_playground(models["cls"])) == (
        "DigitPlayground(pool='cls', depth=4, num_heads=4, 10 test digits)"
    )


def test_the_menus_count_layers_heads_and_patches_from_0(fragments):
    fragment = fragments["mean"]

    def options(menu: str) -> list[str]:
        select = re.search(f'<select class="vbp-{menu}"[^>]*>(.*?)</select>', fragment)[1]
        return re.findall(r">([^<]*)</option>", select)

    assert options("layer") == ["0", "1", "2", "3"]  # attention[layer], blocks.0 .. blocks.3
    assert options("head") == ["mean of the heads", "0", "1", "2", "3"]
    assert options("query")[2:4] == ["patch 0 (row 0, col 0)", "patch 1 (row 0, col 1)"]
    assert '<option value="3" selected>3</option>' in fragment  # the last layer first
    assert "numbered from 0, as the tensors index them" in fragment


def test_the_page_tells_the_reader_how_to_draw(fragments):
    howto = re.search(r'<p class="vbp-howto">(.*?)</p>', fragments["mean"])[1]
    assert "fill the box from top to bottom" in howto and "cross" in howto
    fragment = fragments["mean"]
    assert fragment.index('<p class="vbp-howto">') < fragment.index('<canvas class="vbp-grid"')


def test_the_pen_holds_the_ink_of_the_training_digits():
    """PEN["ink"] is the training digits' median ink, which hardly depends on the digit."""
    images, labels, _, _ = load_digits_split()
    totals = (images * 16).round().sum(dim=(1, 2, 3))  # on pixels of the 32 x 32 bitmap
    assert totals.median().item() == PEN["ink"] == 313
    by_digit = [totals[labels == d].median().item() for d in range(10)]
    assert (min(by_digit), max(by_digit)) == (305, 328)  # as the module docstring says
    ones = images[labels == 1, 0] * 16  # (K, 8, 8): ink per block row of 4 bitmap rows
    ones_width = (ones.sum(dim=2) / 4).median().item()  # pixels of ink per bitmap row
    assert 8.5 < ones_width < 9.5 and ones_width < 2 * PEN["max_radius"]
    assert 0 < PEN["min_radius"] < PEN["max_radius"]


def test_most_sevens_of_the_training_digits_are_crossed():
    """What the page asks for: a bar across the middle, a row of 4 cells or more with ink 8+."""
    images, labels, _, _ = load_digits_split()
    sevens = images[labels == 7, 0] * 16  # (K, 8, 8)
    crossed = ((sevens[:, 3:6] >= 8).sum(dim=2) >= 4).any(dim=1)
    print(f"{int(crossed.sum())} of {len(sevens)} training 7s are crossed")
    assert crossed.float().mean() > 0.5


def test_the_default_test_digits_are_the_first_of_each_class(models, test_digits):
    images, labels = test_digits
    payload = digit_playground(models["mean"]).payload
    assert [e["label"] for e in payload["examples"]] == list(range(10))
    first = int((labels == 3).nonzero()[0])
    assert payload["examples"][3]["ink"] == (images[first] * 16).flatten().int().tolist()


def test_widgets_reexports_the_playground():
    from vitbook import widgets

    assert widgets.digit_playground is digit_playground and "digit_playground" in widgets.__all__


def small_config(**overrides) -> ViTConfig:
    fields = dict(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=8, depth=1,
                  num_heads=2)  # fmt: skip
    return ViTConfig(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: torch.nn.Linear(64, 10), TypeError, "must be a vitbook VisionTransformer"),
        (lambda: VisionTransformer(small_config(img_size=16)), ValueError, r"img_size=\(16, 16\)"),
        (lambda: VisionTransformer(small_config(in_chans=3)), ValueError, "in_chans=3"),
        (lambda: VisionTransformer(small_config(num_classes=5)), ValueError, "num_classes=5"),
        (
            lambda: VisionTransformer(small_config(pos_embed="relative")),
            ValueError,
            "pos_embed='relative' is not supported.*no relative position bias",
        ),
        (lambda: VisionTransformer(small_config()).double(), TypeError, r"model\.float\(\)"),
        (
            lambda: VisionTransformer(small_config(class_token=True, pool="cls", distilled=True)),
            ValueError,
            "one class token and a patch embedding, got distilled=True",
        ),
        (
            lambda: VisionTransformer(small_config(stem="conv")),
            ValueError,
            "got distilled=False, stem='conv'",
        ),
        (
            lambda: VisionTransformer(small_config(embed_dim=256, depth=2, num_heads=4)),
            ValueError,
            f"the playground takes at most {MAX_PARAMETERS:,}",
        ),
    ],
)
def test_models_the_page_cannot_run_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        export_weights(make())


def test_weights_with_nan_are_refused():
    model = VisionTransformer(small_config())
    with torch.no_grad():
        model.head.bias[0] = float("nan")
    with pytest.raises(ValueError, match="head.bias holds NaN or inf"):
        digit_playground(model)


@pytest.mark.parametrize(
    ("examples", "error", "message"),
    [
        ("digits", TypeError, "a pair"),
        ((torch.zeros(2, 8, 8), torch.zeros(2, dtype=torch.long)), ValueError, r"\(E, 1, 8, 8\)"),
        ((torch.zeros(21, 1, 8, 8), torch.zeros(21, dtype=torch.long)), ValueError, "1 to 20"),
        ((torch.full((2, 1, 8, 8), 16.0), torch.zeros(2, dtype=torch.long)), ValueError, "ink"),
        ((torch.zeros(2, 1, 8, 8), torch.tensor([3, 10])), ValueError, "0 .. 9"),
        ((torch.zeros(2, 1, 8, 8), [3, 4]), TypeError, "two tensors"),
    ],
)
def test_bad_examples_are_refused(models, examples, error, message):
    with pytest.raises(error, match=message):
        digit_playground(models["mean"], examples=examples)


# --- in headless Chromium -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = browser_path()
    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, offline=True,
            viewport={"width": 1280, "height": 900},
        )  # fmt: skip
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def page(browser, fragments, tmp_path_factory):
    """The standalone page with both playgrounds (mean, then cls), and every request it made."""
    path = tmp_path_factory.mktemp("playground") / "playground.html"
    path.write_text(
        PAGE.replace("{fragments}", fragments["mean"] + "<hr>" + fragments["cls"]),
        encoding="utf-8",
    )
    page = browser.new_page()
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => window.vitbook.playgrounds.length === 2")
    page.requests, page.errors, page.path = requests, errors, path
    yield page
    page.close()


@pytest.mark.parametrize(("index", "variant"), list(enumerate(VARIANTS)))
def test_the_page_computes_what_pytorch_computes_on_all_test_digits(
    page, models, test_digits, index, variant, record_property
):
    images, _ = test_digits
    model = models[variant]
    with torch.no_grad():
        logits, attentions = model.forward_with_attention(images)
    probabilities = logits.softmax(dim=-1)  # (450, 10)
    weights = torch.stack(attentions, dim=1)  # (450, L, Nh, N, N)
    rollout = attention_rollout(attentions)  # (450, N, N)
    inks = (images * 16).flatten(1).tolist()  # what a reader draws: 0 .. 16
    out = page.evaluate(PREDICT_ALL, [index, inks])
    n, depth, heads = weights.shape[-1], weights.shape[1], weights.shape[2]
    packed = torch.frombuffer(bytearray(base64.b64decode(out["packed"])), dtype=torch.float64)
    js = packed.reshape(450, -1)  # little-endian float64, as this machine and the page
    js_probabilities, js_logits = js[:, :10], js[:, 10:20]
    js_weights = js[:, 20 : 20 + depth * heads * n * n].reshape(weights.shape)
    js_rollout = js[:, 20 + depth * heads * n * n :].reshape(rollout.shape)
    gaps = {
        "probabilities": (js_probabilities - probabilities.double()).abs().max().item(),
        "attention": (js_weights - weights.double()).abs().max().item(),
        "rollout": (js_rollout - rollout.double()).abs().max().item(),
        "logits": (js_logits - logits.double()).abs().max().item(),
    }
    assert js.shape == (450, 20 + (4 * 4 + 1) * 17 * 17)
    # Probabilities, weights and rollout lie in [0, 1]; float32's rounding of the logits grows
    # with their size (AVX2 and AVX-512 kernels sum in other orders), so theirs is relative.
    bounds = {name: JS_TOLERANCE for name in gaps}
    bounds["logits"] = JS_TOLERANCE * max(1.0, logits.abs().max().item())
    assert all(gaps[name] <= bounds[name] for name in gaps), (gaps, bounds)
    # Against the same model in float64, the page is exact to float64 rounding: it computes
    # the same equations in the same order, not an approximation of them.
    with torch.no_grad():
        logits64, attentions64 = (
            copy.deepcopy(model).double().forward_with_attention(images.double())
        )
    gaps64 = {
        "probabilities": (js_probabilities - logits64.softmax(dim=-1)).abs().max().item(),
        "attention": (js_weights - torch.stack(attentions64, dim=1)).abs().max().item(),
        "rollout": (js_rollout - attention_rollout(attentions64)).abs().max().item(),
    }
    assert all(gap < FLOAT64_TOLERANCE for gap in gaps64.values()), gaps64
    assert torch.equal(js_probabilities.argmax(dim=1), probabilities.argmax(dim=1))
    median_ms = statistics.median(out["times"])
    record_property(f"{variant} largest differences", gaps)
    mean_ms = sum(out["times"]) / len(out["times"])
    record_property(f"{variant} largest differences from float64", gaps64)
    record_property(f"{variant} forward ms (median, mean)", (median_ms, mean_ms))
    print(
        f"{variant}: largest JS - PyTorch differences {gaps}; from float64 PyTorch {gaps64}; "
        f"predict() {median_ms:.2f} ms median, {mean_ms:.2f} ms mean per digit"
    )


def test_erf_in_the_page_matches_python(page):
    xs = [i / 100 for i in range(-800, 801)] + [1e-8, -3.0, 3.0, 6.0, 0.5 * math.sqrt(2)]
    values = page.evaluate("xs => xs.map(window.vitbook.playgroundMath.erf)", xs)
    assert max(abs(v - math.erf(x)) for x, v in zip(xs, values, strict=True)) < 1e-13
    gelu = page.evaluate("xs => xs.map(window.vitbook.playgroundMath.gelu)", xs)
    expected = torch.nn.functional.gelu(torch.tensor(xs, dtype=torch.float64))
    assert (torch.tensor(gelu, dtype=torch.float64) - expected).abs().max() < 1e-13


def test_the_page_registers_every_playground_and_keeps_other_keys(page):
    state = page.evaluate(
        """() => ({other: window.vitbook.other,
                   pools: window.vitbook.playgrounds.map(p => p.config.pool),
                   roots: window.vitbook.playgrounds.map(
                     p => p.root.getAttribute("data-ready"))})"""
    )
    assert state == {"other": "kept", "pools": ["mean", "cls"], "roots": ["true", "true"]}


def test_drawing_with_mouse_and_touch_changes_the_digit_and_the_prediction(page, models):
    root = page.locator(".vitbook-playground").first
    root.locator("button.vbp-clear").click()
    empty = root.evaluate(STATE)
    assert empty["pixels"] == [0] * 64 and empty["menu"] == ""
    # A mouse stroke down the middle of the grid: a 1.
    grid = root.locator("canvas.vbp-grid")
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.move(box["x"] + 0.5 * box["width"], box["y"] + 0.1 * box["height"])
    page.mouse.down()
    for step in range(1, 11):
        page.mouse.move(
            box["x"] + 0.5 * box["width"], box["y"] + (0.1 + 0.08 * step) * box["height"]
        )
    page.mouse.up()
    stroke = root.evaluate(STATE)
    columns = [sum(stroke["pixels"][r * 8 + c] for r in range(8)) for c in range(8)]
    assert sum(stroke["pixels"]) > 50 and max(stroke["pixels"]) <= 16
    assert columns.index(max(columns)) in (3, 4) and columns[0] == columns[7] == 0
    assert stroke["probabilities"] != empty["probabilities"]
    expected = model_probabilities(models["mean"], stroke["pixels"])
    assert max(abs(a - b) for a, b in zip(stroke["probabilities"], expected, strict=True)) < 1e-5
    # A touch stroke across the top: the same pointer events, pointerType "touch".
    page.evaluate(TOUCH, [root.element_handle(), [[0.15, 0.15], [0.5, 0.14], [0.85, 0.15]]])
    touched = root.evaluate(STATE)
    assert sum(touched["pixels"][:16]) > sum(stroke["pixels"][:16]) + 20
    assert touched["probabilities"] != stroke["probabilities"]
    # The eraser takes ink away where it passes, and only there.
    root.locator("button[data-tool=eraser]").click()
    page.evaluate(TOUCH, [root.element_handle(), [[0.5, 0.6], [0.5, 0.95]]])
    erased = root.evaluate(STATE)
    assert sum(erased["pixels"][40:]) < sum(touched["pixels"][40:])
    assert erased["pixels"][:16] == touched["pixels"][:16]
    assert all(a <= b for a, b in zip(erased["pixels"], touched["pixels"], strict=True))
    root.locator("button[data-tool=pen]").click()
    root.locator("button.vbp-clear").click()
    assert root.evaluate(STATE)["pixels"] == [0] * 64


EMPTY = """root => ({
  blank: root.classList.contains("vbp-blank"),
  prediction: root.getAttribute("data-prediction"),
  probabilities: Array.from(root.querySelectorAll(".vbp-bar"),
                            bar => bar.getAttribute("data-probability")),
  best: root.querySelectorAll(".vbp-best").length,
  shown: Array.from(root.querySelectorAll(".vbp-bar output"), o => o.textContent),
  note: getComputedStyle(root.querySelector(".vbp-empty")).display,
  current: window.vitbook.playgrounds.find(p => p.root === root).current(),
})"""


def test_an_empty_grid_shows_no_prediction(page):
    root = page.locator(".vitbook-playground").first
    root.locator("button.vbp-clear").click()
    empty = root.evaluate(EMPTY)
    assert empty == {
        "blank": True, "prediction": None, "probabilities": [None] * 10, "best": 0,
        "shown": [""] * 10, "note": "block", "current": None,
    }  # fmt: skip
    root.locator("select.vbp-example").select_option("3")  # a test digit: a prediction again
    loaded = root.evaluate(EMPTY)
    assert not loaded["blank"] and loaded["prediction"] == "3" and loaded["best"] == 1
    assert loaded["note"] == "none" and all(loaded["shown"])
    root.locator("button.vbp-clear").click()
    assert root.evaluate(EMPTY)["prediction"] is None


def model_probabilities(model: VisionTransformer, ink: list[int]) -> list[float]:
    with torch.no_grad():
        images = torch.tensor(ink, dtype=torch.float32).reshape(1, 1, 8, 8) / 16
        return model(images).softmax(dim=-1)[0].tolist()


def test_loading_a_test_digit_shows_it_and_pytorch_agrees(page, models, test_digits):
    images, labels = test_digits
    for index, variant in enumerate(VARIANTS):
        root = page.locator(".vitbook-playground").nth(index)
        for digit in (8, 7):
            root.locator("select.vbp-example").select_option(str(digit))
            state = (
                page.evaluate(f"() => window.vitbook.playgrounds[{index}].pixels()"),
                root.evaluate(STATE),
            )
            first = int((labels == digit).nonzero()[0])
            ink = (images[first] * 16).flatten().int().tolist()
            assert state[0] == ink
            expected = model_probabilities(models[variant], ink)
            shown = state[1]["probabilities"]
            assert max(abs(a - b) for a, b in zip(shown, expected, strict=True)) < 1e-5
            assert state[1]["prediction"] == max(range(10), key=expected.__getitem__) == digit


def test_the_menus_change_the_maps(page):
    root = page.locator(".vitbook-playground").first
    root.locator("select.vbp-example").select_option("8")
    shown = "root => [root.querySelector('canvas.vbp-attention').toDataURL(), root.querySelector('.vbp-attention-scale').textContent, root.querySelector('canvas.vbp-rollout').toDataURL()]"  # noqa: E501
    before = root.evaluate(shown)
    seen = {before[0]}
    for menu, value in (("layer", "0"), ("head", "2"), ("query", "6")):
        root.locator(f"select.vbp-{menu}").select_option(value)
        seen.add(root.evaluate(shown)[0])
    after = root.evaluate(shown)
    assert len(seen) == 4, "each menu changed the attention map"
    assert after[2] != before[2], "the rollout follows the query"


# --- drawing digits as the data set's writers did ----------------------------------------------
# Pen paths for the ten digits, two ways each, as a person draws them with a mouse or a finger:
# strokes of points in the unit square of the grid (x to the right, y down), large, filling the
# box from top to bottom, and running where the strokes of the training digits of that class run
# on average. The 7 is crossed, as most 7s of the training digits are (tested above).


def arc(cx, cy, rx, ry, start, end, points):
    """Points on an ellipse from angle `start` to `end` in degrees (0 = right, 90 = down)."""
    angles = (math.radians(start + (end - start) * i / points) for i in range(points + 1))
    return [(cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in angles]


def eight(turn, points=24):
    """A figure of eight in one stroke from the top, first to the left (turn=1) or right."""
    ts = (2 * math.pi * i / points for i in range(points + 1))
    return [(0.5 - turn * 0.21 * math.sin(2 * t), 0.5 - 0.42 * math.cos(t)) for t in ts]


DRAWINGS = {  # digit: (one way, another way), each a list of strokes
    0: ([arc(0.5, 0.5, 0.25, 0.42, -100, -460, 18)], [arc(0.5, 0.5, 0.23, 0.41, -80, 290, 18)]),
    1: ([[(0.53, 0.06), (0.49, 0.94)]], [[(0.36, 0.24), (0.56, 0.06), (0.5, 0.94)]]),
    2: (
        [arc(0.48, 0.3, 0.25, 0.23, 195, 375, 6) + [(0.2, 0.9), (0.82, 0.9)]],
        [arc(0.5, 0.28, 0.24, 0.21, 200, 380, 6) + [(0.5, 0.62), (0.22, 0.9), (0.8, 0.9)]],
    ),
    3: (
        [arc(0.48, 0.27, 0.24, 0.21, 205, 450, 8)[:-1] + arc(0.48, 0.7, 0.26, 0.22, -90, 155, 8)],
        [[(0.25, 0.08), (0.72, 0.08), (0.46, 0.44)] + arc(0.48, 0.68, 0.27, 0.24, -90, 150, 8)],
    ),
    4: (
        [[(0.58, 0.94), (0.56, 0.05), (0.17, 0.58), (0.84, 0.58)]],
        [[(0.45, 0.05), (0.17, 0.58), (0.84, 0.58), (0.62, 0.58), (0.6, 0.3), (0.58, 0.95)]],
    ),
    5: (
        [[(0.74, 0.07), (0.28, 0.07), (0.25, 0.45)] + arc(0.47, 0.67, 0.27, 0.26, -125, 150, 9)],
        [[(0.72, 0.07), (0.28, 0.08), (0.25, 0.42), (0.6, 0.42), (0.74, 0.6), (0.68, 0.85),
          (0.46, 0.93), (0.22, 0.85)]],
    ),
    6: (
        [[(0.56, 0.05)] + arc(0.75, 0.62, 0.52, 0.55, 240, 180, 4)[1:]
         + arc(0.48, 0.7, 0.25, 0.23, 180, 540, 12)],
        [[(0.58, 0.05), (0.3, 0.35), (0.22, 0.65)] + arc(0.48, 0.7, 0.26, 0.22, 180, 535, 12)],
    ),
    7: (
        [[(0.24, 0.08), (0.74, 0.08), (0.38, 0.94)], [(0.28, 0.52), (0.7, 0.5)]],
        [[(0.22, 0.14), (0.3, 0.06), (0.72, 0.07), (0.58, 0.5), (0.4, 0.94)],
         [(0.28, 0.54), (0.76, 0.52)]],
    ),
    8: ([eight(1)], [eight(-1)]),
    9: (
        [arc(0.48, 0.28, 0.23, 0.22, 0, -360, 12) + [(0.7, 0.75), (0.55, 0.94), (0.3, 0.9)]],
        [arc(0.48, 0.28, 0.23, 0.22, -10, 350, 12) + [(0.66, 0.94)]],
    ),
}  # fmt: skip
# Each drawing as given, and as a hand varies it: 10% smaller and off centre, and slanted either
# way. 10 drawings of each digit.
HANDS = (
    {}, {"scale": 0.9, "dx": -0.04, "dy": -0.02}, {"scale": 0.9, "dx": 0.04, "dy": 0.02},
    {"slant": 0.12}, {"slant": -0.12},
)  # fmt: skip
# The shipped models read 97% or more of the test digits right. Drawings in the data set's style
# should be read about as well, but they are cleaner than handwriting, and a digit drawn smaller
# or slanted can sit on the border between two classes: the check allows 1 drawing in 10 to be
# misread overall, and 3 of the 10 of any one digit.
DRAWN_ACCURACY = 0.9
DRAWN_DIGIT_ACCURACY = 0.7
# The pen's ink against the training digits': the drawings' median ink, and the share of the
# cells they ink that are nearly full (12 of 16 or more, 43% for the training digits).
INK_TOLERANCE = 0.05
FULL_CELLS_TOLERANCE = 0.05
DRAW = """([index, drawings]) => {
  const playground = window.vitbook.playgrounds[index], root = playground.root;
  const grid = root.querySelector("canvas.vbp-grid"), box = grid.getBoundingClientRect();
  root.querySelector("button[data-tool=pen]").click();
  const event = (type, [x, y]) => new PointerEvent(type, {
    pointerId: 3, pointerType: "mouse", isPrimary: true, bubbles: true, cancelable: true,
    clientX: box.left + x * box.width, clientY: box.top + y * box.height, buttons: 1,
  });
  return drawings.map(strokes => {
    root.querySelector("button.vbp-clear").click();
    for (const points of strokes) {
      points.forEach((point, i) => grid.dispatchEvent(
        event(i === 0 ? "pointerdown" : "pointermove", point)));
      grid.dispatchEvent(event("pointerup", points[points.length - 1]));
    }
    return {pixels: playground.pixels(),
            prediction: Number(root.getAttribute("data-prediction"))};
  });
}"""


def by_hand(strokes, scale=1.0, dx=0.0, dy=0.0, slant=0.0):
    """The strokes scaled about the centre, slanted (the top to the right for slant > 0), moved."""
    moved = []
    for points in strokes:
        scaled = [(0.5 + (x - 0.5) * scale, 0.5 + (y - 0.5) * scale) for x, y in points]
        moved.append([(x + slant * (0.5 - y) + dx, y + dy) for x, y in scaled])
    return moved


@pytest.mark.parametrize(("index", "variant"), list(enumerate(VARIANTS)))
def test_digits_drawn_with_the_pen_are_read_as_test_digits_are(
    page, models, index, variant, record_property
):
    drawings, digits = [], []
    for digit, ways in DRAWINGS.items():
        for strokes in ways:
            drawings += [by_hand(strokes, **hand) for hand in HANDS]
            digits += [digit] * len(HANDS)
    shown = page.evaluate(DRAW, [index, drawings])
    page.locator(".vitbook-playground").nth(index).locator("button.vbp-clear").click()
    ink = torch.tensor([s["pixels"] for s in shown], dtype=torch.float32)  # (K, 64)
    with torch.no_grad():
        read = models[variant](ink.reshape(-1, 1, 8, 8) / 16).argmax(dim=1)
    assert read.tolist() == [s["prediction"] for s in shown], "the page and PyTorch disagree"
    labels = torch.tensor(digits)
    right = read == labels
    per_digit = {d: f"{int(right[labels == d].sum())}/{digits.count(d)}" for d in DRAWINGS}
    misread = [f"{d} as {int(r)}" for d, r, ok in zip(digits, read, right, strict=True) if not ok]
    # the ink of the drawings against that of the training digits
    images, _, _, _ = load_digits_split()
    data = (images * 16).round().flatten(1)
    totals, data_totals = ink.sum(dim=1), data.sum(dim=1)
    full, data_full = (ink[ink > 0] >= 12).float().mean(), (data[data > 0] >= 12).float().mean()
    report = (
        f"{variant}: {int(right.sum())} of {len(digits)} drawings read right, by digit "
        f"{per_digit}; misread: {misread or 'none'}; median ink {totals.median():.0f} "
        f"(training digits {data_totals.median():.0f}), cells 12+ of those inked "
        f"{full:.2f} ({data_full:.2f})"
    )
    print(report)
    record_property(f"{variant} drawn digits", report)
    assert abs(totals.median() / data_totals.median() - 1) <= INK_TOLERANCE, report
    assert abs(full - data_full) <= FULL_CELLS_TOLERANCE, report
    assert right.float().mean() >= DRAWN_ACCURACY, report
    assert all(right[labels == d].float().mean() >= DRAWN_DIGIT_ACCURACY for d in DRAWINGS), (
        report
    )


def test_the_pen_thins_as_the_drawing_grows(page):
    root = page.locator(".vitbook-playground").first
    stem = [[(0.5, 0.08), (0.5, 0.92)]]
    (line,) = page.evaluate(DRAW, [0, [stem]])
    (both,) = page.evaluate(DRAW, [0, [stem + [[(0.15, 0.5), (0.85, 0.5)]]]])
    for drawn in (line, both):  # the data's ink, up to pixels as far from the line as the last
        assert abs(sum(drawn["pixels"]) - PEN["ink"]) <= INK_TOLERANCE * PEN["ink"]
    rows = [r for r in range(8) if r not in (3, 4)]  # the stem, away from the bar
    stem_ink = [sum(ink[r * 8 + c] for r in rows for c in range(8))
                for ink in (line["pixels"], both["pixels"])]  # fmt: skip
    assert stem_ink[1] < 0.8 * stem_ink[0], f"the stem did not thin: {stem_ink}"
    # Over a test digit, which already holds about the data's ink, the pen draws its thinnest:
    # a line 0.4 of the grid long adds at most a capsule of radius min_radius around it.
    root.locator("select.vbp-example").select_option("0")
    loaded = page.evaluate("() => window.vitbook.playgrounds[0].pixels()")
    page.evaluate(TOUCH, [root.element_handle(), [[0.5, 0.3], [0.5, 0.7]]])
    over = page.evaluate("() => window.vitbook.playgrounds[0].pixels()")
    capsule = (2 * PEN["min_radius"] + 1) * (0.4 * 32 + 2 * PEN["min_radius"] + 1)
    assert 0 < sum(over) - sum(loaded) <= capsule
    root.locator("button.vbp-clear").click()


def test_the_page_asks_for_nothing_but_itself(page):
    assert page.errors == []
    assert [urlsplit(url).scheme for url in page.requests] == ["file"]
    assert page.requests == [page.path.as_uri()]


def test_the_playground_fits_a_phone(page, tmp_path):
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(100)
        widths = page.evaluate(
            """() => ({page: document.documentElement.scrollWidth,
                       playgrounds: Array.from(document.querySelectorAll(".vitbook-playground"))
                         .map(p => p.getBoundingClientRect().right),
                       grid: document.querySelector("canvas.vbp-grid")
                         .getBoundingClientRect().width})"""
        )
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
    assert widths["page"] <= 390 and max(widths["playgrounds"]) <= 390, widths
    assert widths["grid"] >= 200, "the grid stays large enough to draw on with a finger"


def test_a_playground_inserted_like_jquery_starts(browser, fragments, tmp_path):
    path = tmp_path / "notebook.html"
    path.write_text(JQUERY_PAGE, encoding="utf-8")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(path.as_uri())
        page.evaluate("html => window.insertLikeJQuery('out2', html)", fragments["cls"])
        page.evaluate("html => window.insertLikeJQuery('out1', html)", fragments["mean"])
        state = page.evaluate(
            """() => ({ready: Array.from(document.querySelectorAll(".vitbook-playground"))
                         .map(p => p.getAttribute("data-ready")),
                       pools: window.vitbook.playgrounds.map(p => p.config.pool),
                       classes: window.vitbook.playgrounds[1].predict(new Array(64).fill(0))
                         .probabilities.length})"""
        )
    finally:
        page.close()
    assert not errors, errors
    # in document order, though the second output was inserted first
    assert state == {"ready": ["true", "true"], "pools": ["mean", "cls"], "classes": 10}


def test_the_javascript_ships_as_package_data():
    from importlib import resources

    assets = resources.files("vitbook") / "assets"
    assert "function forward(model, input)" in (assets / "vit.js").read_text()
    assert "window.vitbook.vitMath" in (assets / "playground.js").read_text()
    assert isinstance(digit_playground(load_digits_vit()), DigitPlayground)
    assert Path(__file__).parents[1].joinpath("pyproject.toml").read_text().count('"assets/*"') == 1


@pytest.mark.book
@pytest.mark.xdist_group("book")
def test_the_chapter_page_runs_the_playground(built_book, browser, models, test_digits):
    path = built_book / "book" / "attention_rollout.html"
    page = browser.new_page()
    errors, requests = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("() => (window.vitbook || {}).playgrounds?.length === 1")
        images, _ = test_digits
        inks = (images[:20] * 16).flatten(1).tolist()
        shown = page.evaluate(
            "inks => inks.map(ink => window.vitbook.playgrounds[0].predict(ink).probabilities)",
            inks,
        )
        figure = page.evaluate(
            """() => !!document.querySelector(".vitbook-playground").closest("figure")
                       .querySelector("figcaption")"""
        )
    finally:
        page.close()
    assert not errors, errors
    assert all(urlsplit(url).scheme in ("file", "data") for url in requests), requests
    with torch.no_grad():
        expected = models["mean"](images[:20]).softmax(dim=-1)
    assert (torch.tensor(shown, dtype=torch.float64) - expected.double()).abs().max() < 1e-5
    assert figure, "the playground sits in a numbered, captioned figure"
