"""The photo playground: the exported int8 weights, the fragment, and its forward pass in Chromium.

The unit tests check the payload (int8 weight matrices with their row scales that give the
model's weights bit for bit, float32 for the rest), the fragment (no URL, under 5 MB), the
default test photos and the errors. The browser tests open a standalone page from disk
(``file://``) in headless Chromium with a digit playground and two photo playgrounds on it (so
the shared forward pass is on the page three times), run all 1,000 shipped test photos through
the page's JavaScript and compare it with PyTorch, compare the rollout with
:func:`vitbook.analysis.attention_rollout`, choose menu photos, give the file input photos that
are not CIFAR-10's (checking the page's centre crop and area averaging against numpy's), and
record every request. A second page inserts the fragments as the classic notebook does.
"""

from __future__ import annotations

import base64
import re
import tempfile
import time
from urllib.parse import urlsplit

import numpy as np
import pytest
import torch
from booktools import CHROMIUM_FLAGS, INSERT_LIKE_JQUERY, browser_path
from PIL import Image

from vitbook import VisionTransformer, ViTConfig
from vitbook.analysis import attention_rollout, cls_rollout_map
from vitbook.data import sample_image
from vitbook.data.cifar import CIFAR10_CLASSES, CIFAR10_MEAN, CIFAR10_STD, Normalize
from vitbook.data.cifar_sample import load_cifar10_sample
from vitbook.pretrained import load_cifar10_vit, load_digits_vit, load_model, save_model
from vitbook.widgets.photo_playground import (
    MAX_EXAMPLES,
    MAX_PARAMETERS,
    PhotoPlayground,
    photo_playground,
)
from vitbook.widgets.playground import digit_playground

# The page computes in float64 from the same float32 weights that PyTorch computes with in
# float32 (photos normalised in float64 there, in float32 here): the gap is float32 rounding.
JS_TOLERANCE = 1e-5
ROLLOUT_TOLERANCE = 1e-6  # weights and rollout lie in [0, 1]: float32 rounding, summed over layers
FRAGMENT_LIMIT_BYTES = 5_000_000  # the book's limit for a whole page
URL = re.compile(r"https?:|(?:src|href)\s*=\s*[\"']?//|url\(|@import|fetch\(|XMLHttpRequest")
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>photos</title>
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
# Every photo through predict(): the photos go in as base64 of their (H, W, C) bytes, the
# results come back as float64 bytes in base64, one row per photo: 10 probabilities, 10 logits.
PREDICT_ALL = """([index, photos]) => {
  const playground = window.vitbook.photoPlaygrounds[index];
  const text = atob(photos), bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const rows = [], start = performance.now();
  for (let at = 0; at < bytes.length; at += 3072) {
    const out = playground.predict(bytes.subarray(at, at + 3072));
    rows.push(out.probabilities, out.logits);
  }
  const seconds = (performance.now() - start) / 1000;
  const packed = new Uint8Array(Float64Array.from(rows.flat()).buffer);
  let back = "";
  for (let i = 0; i < packed.length; i += 8192) {
    back += String.fromCharCode.apply(null, packed.subarray(i, i + 8192));
  }
  return {packed: btoa(back), seconds: seconds};
}"""
SHOWN = """root => ({
  probabilities: Array.from(root.querySelectorAll(".vpp-bar"),
                            bar => Number(bar.getAttribute("data-probability"))),
  prediction: Number(root.getAttribute("data-prediction")),
  best: Array.from(root.querySelectorAll(".vpp-best"), bar => bar.textContent),
  menu: root.querySelector("select.vpp-example").value,
  status: root.querySelector(".vpp-status").textContent,
  scale: root.querySelector(".vpp-rollout-scale").textContent,
  photo: Array.from(root.querySelector("canvas.vpp-photo").getContext("2d")
                    .getImageData(0, 0, 32, 32).data).filter((v, i) => i % 4 !== 3),
  rollout: root.querySelector("canvas.vpp-rollout").toDataURL(),
  current: window.vitbook.photoPlaygrounds.find(p => p.root === root).current().pixels,
})"""


@pytest.fixture(scope="module")
def model() -> torch.nn.Sequential:
    return load_cifar10_vit()


@pytest.fixture(scope="module")
def test_photos() -> tuple[torch.Tensor, torch.Tensor]:
    _, _, images, labels = load_cifar10_sample()
    return images, labels


@pytest.fixture(scope="module")
def playground(model) -> PhotoPlayground:
    return photo_playground(model)


@pytest.fixture(scope="module")
def fragment(playground) -> str:
    return playground.to_html()


def as_bytes(images: torch.Tensor) -> np.ndarray:
    """(B, 3, 32, 32) photos in [0, 1] as the page takes them: (B, 32 * 32 * 3) uint8."""
    return (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).flatten(1).numpy()


def from_bytes(pixels) -> torch.Tensor:
    """The page's (H, W, C) pixels 0 .. 255 as a (1, 3, 32, 32) photo in [0, 1]."""
    photo = torch.tensor(np.asarray(pixels, dtype=np.float32)).reshape(1, 32, 32, 3)
    return photo.permute(0, 3, 1, 2) / 255


# --- the payload and the fragment ----------------------------------------------------------------


def test_the_weight_matrices_travel_as_int8_that_give_the_models_weights_bit_for_bit(
    model, playground
):
    tensors = playground.payload["tensors"]
    state = model[1].state_dict()
    assert set(tensors) == set(state)
    int8 = {name for name, entry in tensors.items() if entry["dtype"] == "int8"}
    assert {"patch_embed.proj.weight", "blocks.5.mlp.fc2.weight", "head.weight"} <= int8
    assert len(int8) == 2 + 4 * model[1].config.depth  # the patch embedding, 4 a block, the head
    for name, entry in tensors.items():
        assert entry["shape"] == list(state[name].shape), name
        if name in int8:  # what the page computes: q * scale[row], rounded to float32
            q = np.frombuffer(base64.b64decode(entry["data"]), np.int8).astype(np.float32)
            scale = np.frombuffer(base64.b64decode(entry["scale"]), "<f4")
            values = (q.reshape(len(scale), -1) * scale[:, None]).reshape(entry["shape"])
        else:
            assert entry["dtype"] == "float32", name
            values = np.frombuffer(base64.b64decode(entry["data"]), "<f4").reshape(entry["shape"])
        assert np.array_equal(values.view(np.int32), state[name].numpy().view(np.int32)), name
    config = playground.payload["config"]
    assert config["mean"] == model[0].mean.flatten().tolist()
    assert config["std"] == model[0].std.flatten().tolist()
    assert playground.payload["classes"] == list(CIFAR10_CLASSES)


def test_the_fragment_asks_for_nothing_and_stays_under_5_mb(fragment, record_property):
    size = len(fragment.encode("utf-8"))
    record_property("fragment bytes", size)
    print(f"the photo playground's fragment: {size:,} bytes")
    assert "://" not in fragment and not URL.findall(fragment), URL.findall(fragment)[:3]
    assert size < FRAGMENT_LIMIT_BYTES
    assert fragment.startswith('<div class="vitbook-photo-playground"')
    assert fragment.endswith("</script></div>")
    script = fragment.split('<script class="vpp-js">')[1].removesuffix("</script></div>")
    assert fragment.count('class="vpp-js"') == 1 and "</script" not in script
    assert script.index("vitbook.vitMath = {decode") < script.index("var math = window.vitbook")
    assert '<input type="file" accept="image/*"' in fragment


def test_the_default_photos_are_the_first_two_test_photos_of_each_class(playground, test_photos):
    images, labels = test_photos
    examples = playground.payload["examples"]
    assert [e["label"] for e in examples] == [c for c in range(10) for _ in range(2)]
    for example in examples:
        index = int(re.fullmatch(r"an? (\w+) \(test photo (\d+)\)", example["caption"])[2])
        assert example["name"] == f"test photo {index}"
        assert example["caption"].split()[1] == CIFAR10_CLASSES[example["label"]]
        assert int(labels[index]) == example["label"]
        earlier = (labels[:index] == example["label"]).sum().item()
        assert earlier < 2, f"test photo {index} is not among the first two of its class"
        pixels = np.frombuffer(base64.b64decode(example["pixels"]), np.uint8)
        assert np.array_equal(pixels, as_bytes(images[index : index + 1])[0])
    assert examples[6]["caption"].startswith("a cat (test photo ")
    assert examples[0]["caption"].startswith("an airplane (test photo ")
    assert repr(playground) == "PhotoPlayground(D=192, depth=6, num_heads=3, 20 test photos)"


def test_widgets_reexports_the_photo_playground():
    from vitbook import widgets

    assert widgets.photo_playground is photo_playground
    assert {"photo_playground", "PhotoPlayground"} <= set(widgets.__all__)


def small_vit(**overrides) -> VisionTransformer:
    fields = dict(img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=8, depth=1,
                  num_heads=2, class_token=True, pool="cls")  # fmt: skip
    return VisionTransformer(ViTConfig(**{**fields, **overrides}))


def photo_model(vit: VisionTransformer | None = None) -> torch.nn.Sequential:
    return torch.nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), vit or small_vit()).eval()


def test_a_small_model_loaded_from_an_int8_file_is_accepted(tmp_path):
    save_model(small_vit(), tmp_path / "small.safetensors", int8=True)
    vit = load_model(tmp_path / "small.safetensors")
    page = photo_playground(photo_model(vit)).to_html()
    assert page.count('"dtype":"int8"') == 2 + 4  # patch embedding, head, and 4 in the block


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: small_vit(), TypeError, r"got VisionTransformer; load the photo model"),
        (
            lambda: torch.nn.Sequential(small_vit()),
            TypeError,
            r"nn.Sequential\(Normalize\(mean, std\), VisionTransformer\).*got "
            r"nn.Sequential\(VisionTransformer\)",
        ),
        (lambda: photo_model(small_vit(img_size=16)), ValueError, r"img_size=\(16, 16\)"),
        (lambda: photo_model(small_vit(in_chans=1)), ValueError, "in_chans=1"),
        (lambda: photo_model(small_vit(num_classes=5)), ValueError, "num_classes=5"),
        (
            lambda: photo_model(small_vit(class_token=False, pool="mean")),
            ValueError,
            "rollout from the class token.*class_token=False",
        ),
        (
            lambda: photo_model(small_vit(pos_embed="relative")),
            ValueError,
            "pos_embed='relative' is not supported",
        ),
        (
            lambda: torch.nn.Sequential(Normalize((0.5,), (0.2,)), small_vit()),
            ValueError,
            "statistics for 1 channels",
        ),
        (
            lambda: photo_model(small_vit(embed_dim=384, depth=2, num_heads=4, mlp_ratio=4.0)),
            ValueError,
            f"the playground takes at most {MAX_PARAMETERS:,}",
        ),
        (lambda: photo_model().double(), TypeError, r"model\.float\(\)"),
        (
            lambda: photo_model(),  # freshly initialised: its weights are no int8 values
            ValueError,
            r"not exactly int8 .* loaded from an int8 file such as load_cifar10_vit\(\)",
        ),
    ],
)
def test_models_the_page_cannot_run_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        photo_playground(make())


def test_weights_with_nan_are_refused():
    model = photo_model()
    with torch.no_grad():
        model[1].head.bias[0] = float("nan")
    with pytest.raises(ValueError, match="head.bias holds NaN or inf"):
        photo_playground(model)


@pytest.mark.parametrize(
    ("examples", "error", "message"),
    [
        ("photos", TypeError, "a pair"),
        ((torch.zeros(2, 32, 32), torch.zeros(2, dtype=torch.long)), ValueError, r"\(E, 3, 32"),
        ((torch.zeros(2, 32, 32, 3), torch.zeros(2, dtype=torch.long)), ValueError, "shape"),
        (
            (torch.zeros(MAX_EXAMPLES + 1, 3, 32, 32), torch.zeros(MAX_EXAMPLES + 1).long()),
            ValueError,
            f"1 to {MAX_EXAMPLES}",
        ),
        ((torch.zeros(0, 3, 32, 32), torch.zeros(0, dtype=torch.long)), ValueError, "1 to"),
        ((torch.full((2, 3, 32, 32), 255.0), torch.zeros(2).long()), ValueError, r"\[0, 1\]"),
        ((torch.full((2, 3, 32, 32), torch.nan), torch.zeros(2).long()), ValueError, "NaN"),
        ((torch.zeros(2, 3, 32, 32), torch.tensor([3, 10])), ValueError, "0 .. 9"),
        ((torch.zeros(2, 3, 32, 32), torch.tensor([0.0, 1.0])), ValueError, "integers"),
        ((torch.zeros(2, 3, 32, 32), [3, 4]), TypeError, "two tensors"),
    ],
)
def test_bad_examples_are_refused(model, examples, error, message):
    with pytest.raises(error, match=message):
        photo_playground(model, examples=examples)


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
def second_fragment(model, test_photos) -> str:
    images, labels = test_photos
    return photo_playground(model, examples=(images[100:105], labels[100:105])).to_html()


@pytest.fixture(scope="module")
def page(browser, fragment, second_fragment, tmp_path_factory):
    """A digit playground, then two photo playgrounds (the default, then 5 photos), and every
    request the page made."""
    path = tmp_path_factory.mktemp("photo_playground") / "photos.html"
    digits = digit_playground(load_digits_vit()).to_html()
    path.write_text(
        PAGE.replace("{fragments}", digits + "<hr>" + fragment + "<hr>" + second_fragment),
        encoding="utf-8",
    )
    page = browser.new_page()
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => (window.vitbook.photoPlaygrounds || []).length === 2")
    page.requests, page.errors, page.path = requests, errors, path
    yield page
    page.close()


def test_the_page_registers_every_playground_and_keeps_other_keys(page):
    state = page.evaluate(
        """() => ({other: window.vitbook.other, digits: window.vitbook.playgrounds.length,
                   photos: window.vitbook.photoPlaygrounds.map(
                     p => p.root.querySelectorAll("select.vpp-example option").length),
                   ready: window.vitbook.photoPlaygrounds.map(
                     p => p.root.getAttribute("data-ready")),
                   same: window.vitbook.vitMath === window.vitbook.playgroundMath,
                   keys: Object.keys(window.vitbook.vitMath).sort()})"""
    )
    assert state == {
        "other": "kept", "digits": 1, "photos": [21, 6], "ready": ["true", "true"],
        "same": True, "keys": ["decode", "erf", "forward", "gelu", "rollout"],
    }  # fmt: skip


def test_the_page_decodes_int8_weights_to_the_models_float32_values(page, playground, model):
    names = ["blocks.2.attn.qkv.weight", "head.weight", "patch_embed.proj.weight", "pos_embed"]
    entries = [playground.payload["tensors"][name] for name in names]
    packed = page.evaluate(
        """entries => entries.map(entry => {
             const bytes = new Uint8Array(window.vitbook.vitMath.decode(entry).buffer);
             let text = "";
             for (let i = 0; i < bytes.length; i += 8192) {
               text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
             }
             return btoa(text);
           })""",
        entries,
    )
    state = model[1].state_dict()
    for name, data in zip(names, packed, strict=True):
        decoded = np.frombuffer(base64.b64decode(data), "<f8")
        assert np.array_equal(decoded, state[name].double().flatten().numpy()), name


def test_the_page_computes_what_pytorch_computes_on_all_1000_test_photos(
    page, model, test_photos, record_property
):
    images, _ = test_photos
    with torch.no_grad():
        logits = model(images)  # (1000, 10)
    probabilities = logits.softmax(dim=-1)
    photos = base64.b64encode(as_bytes(images).tobytes()).decode("ascii")
    start = time.monotonic()
    out = page.evaluate(PREDICT_ALL, [0, photos])
    wall = time.monotonic() - start
    js = torch.frombuffer(bytearray(base64.b64decode(out["packed"])), dtype=torch.float64)
    js = js.reshape(len(images), 20)  # little-endian float64, as this machine and the page
    gaps = {
        "probabilities": (js[:, :10] - probabilities.double()).abs().max().item(),
        "logits": (js[:, 10:] - logits.double()).abs().max().item(),
    }
    report = (
        f"{len(images)} test photos: largest JS - PyTorch differences {gaps}; predict() "
        f"{1000 * out['seconds'] / len(images):.0f} ms a photo, {wall:.0f} s in all"
    )
    print(report)
    record_property("all test photos", report)
    assert gaps["probabilities"] <= JS_TOLERANCE, report
    assert gaps["logits"] <= JS_TOLERANCE * max(1.0, logits.abs().max().item()), report
    assert torch.equal(js[:, :10].argmax(dim=1), probabilities.argmax(dim=1))


def test_the_rollout_is_that_of_the_analysis_module(page, model, test_photos):
    images, _ = test_photos
    photos = images[[0, 7, 500, 999]]
    with torch.no_grad():
        _, attentions = model[1].forward_with_attention(model[0](photos))
    rollout = attention_rollout(attentions)  # (4, 65, 65)
    cls_map = cls_rollout_map(rollout, model[1].config.grid_size)  # (4, 8, 8)
    out = page.evaluate(
        """photos => photos.map(pixels => {
             const result = window.vitbook.photoPlaygrounds[1].predict(pixels);
             return {rollout: result.rollout, attention: result.attention};
           })""",
        as_bytes(photos).tolist(),
    )
    js_rollout = torch.tensor([o["rollout"] for o in out], dtype=torch.float64).reshape(4, 65, 65)
    js_weights = torch.tensor([o["attention"] for o in out], dtype=torch.float64)
    assert js_weights.shape == (4, 6, 3, 65 * 65)
    weights = torch.stack(attentions, dim=1).flatten(3).double()  # (4, L, Nh, N * N)
    assert (js_weights - weights).abs().max() < ROLLOUT_TOLERANCE
    assert (js_rollout - rollout.double()).abs().max() < ROLLOUT_TOLERANCE
    js_map = js_rollout[:, 0, 1:].reshape(4, 8, 8)  # what the map shows: row 0 over the patches
    assert (js_map - cls_map.double()).abs().max() < ROLLOUT_TOLERANCE


def test_choosing_a_menu_photo_shows_it_and_its_prediction(page, model, playground):
    root = page.locator(".vitbook-photo-playground").first
    first = root.evaluate(SHOWN)
    assert first["menu"] == "0" and re.fullmatch(
        r"Test photo \d+, labelled airplane\.", first["status"]
    )
    root.locator("select.vpp-example").select_option("7")  # the second cat
    index = int(re.search(r"\d+", playground.payload["examples"][7]["name"])[0])
    cat = root.evaluate(SHOWN)
    pixels = np.frombuffer(base64.b64decode(playground.payload["examples"][7]["pixels"]), np.uint8)
    assert cat["current"] == cat["photo"] == pixels.tolist()
    assert cat["probabilities"] != first["probabilities"] and cat["rollout"] != first["rollout"]
    assert cat["status"] == f"Test photo {index}, labelled cat."
    with torch.no_grad():
        expected = model(from_bytes(pixels)).softmax(dim=-1)[0]
    shown = torch.tensor(cat["probabilities"], dtype=torch.float64)
    assert (shown - expected.double()).abs().max() < JS_TOLERANCE
    assert cat["prediction"] == int(expected.argmax())
    assert cat["best"] == [root.locator(".vpp-bar").nth(cat["prediction"]).text_content()]
    share = r"\d+\.\d\u00a0%"  # a percentage that does not break from its number
    assert re.fullmatch(f"Largest patch share {share}; class\u00a0token {share}", cat["scale"])


def area_average(photo: np.ndarray, side: int = 32) -> np.ndarray:
    """The centre square of an (H, W, 3) photo reduced to (side, side, 3) by area averaging:
    a weight matrix (side, size) of overlaps, applied to the rows and to the columns."""
    height, width, _ = photo.shape
    size = min(height, width)
    top, left = (height - size) // 2, (width - size) // 2
    square = photo[top : top + size, left : left + size].astype(np.float64)
    o, p = np.arange(side)[:, None], np.arange(size)[None, :]  # output and source pixels
    overlap = np.minimum((o + 1) * size, (p + 1) * side) - np.maximum(o * size, p * side)
    weights = np.clip(overlap, 0, None) / size  # each row sums to 1
    return np.einsum("rp,pqc,sq->rsc", weights, square, weights)


def choose_file(page, root, path) -> dict:
    with page.expect_file_chooser() as chooser:
        root.locator("input.vpp-file").click()
    chooser.value.set_files(path)
    page.wait_for_function(
        "root => /^Your photo|could not be read/.test("
        "root.querySelector('.vpp-status').textContent)",
        arg=root.element_handle(),
    )
    return root.evaluate(SHOWN)


@pytest.mark.parametrize(
    ("height", "width"),
    [(403, 507), (491, 389), (20, 13)],  # wide, tall, smaller than 32 x 32
)
def test_a_photo_of_your_own_is_cropped_averaged_shown_and_predicted(
    page, model, tmp_path, height, width
):
    photo = sample_image("grace_hopper", size=None).permute(1, 2, 0)  # (H, W, 3) in [0, 1]
    photo = (photo[100 : 100 + height, 0:width] * 255).round().to(torch.uint8).numpy()
    path = tmp_path / "grace_hopper.png"
    Image.fromarray(photo).save(path)
    root = page.locator(".vitbook-photo-playground").first
    shown = choose_file(page, root, path)
    expected = area_average(photo)
    pixels = np.asarray(shown["current"]).reshape(32, 32, 3)
    assert np.abs(pixels - expected).max() <= 1, np.abs(pixels - expected).max()
    assert shown["photo"] == shown["current"]
    assert shown["menu"] == "" and "grace_hopper.png" in shown["status"]
    assert f"{width} x {height} pixels" in shown["status"]
    with torch.no_grad():
        probabilities = model(from_bytes(shown["current"])).softmax(dim=-1)[0]
    gap = (torch.tensor(shown["probabilities"]) - probabilities.double()).abs().max()
    assert gap < JS_TOLERANCE
    root.locator("select.vpp-example").select_option("3")  # a test photo again, then back
    assert root.evaluate(SHOWN)["probabilities"] != shown["probabilities"]
    root.locator("select.vpp-example").select_option("")
    assert root.evaluate(SHOWN)["current"] == shown["current"]


def test_a_transparent_picture_is_shown_on_white(page, tmp_path):
    rgba = np.zeros((48, 64, 4), np.uint8)
    rgba[:, :32] = (200, 30, 60, 255)  # opaque on the left; the right half is transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "half.png")
    root = page.locator(".vitbook-photo-playground").first
    pixels = np.asarray(choose_file(page, root, tmp_path / "half.png")["current"])
    pixels = pixels.reshape(32, 32, 3)  # the centre 48 x 48: 24 columns opaque, 24 transparent
    assert (pixels[:, :16] == (200, 30, 60)).all() and (pixels[:, 16:] == 255).all()


def test_a_file_that_is_no_picture_is_named_and_changes_nothing(page, tmp_path):
    (tmp_path / "notes.txt").write_text("not a photo", encoding="utf-8")
    root = page.locator(".vitbook-photo-playground").first
    before = root.evaluate(SHOWN)
    after = choose_file(page, root, tmp_path / "notes.txt")
    assert after["status"].startswith("notes.txt could not be read as a picture")
    assert after["current"] == before["current"]
    assert after["probabilities"] == before["probabilities"]


def test_load_and_predict_take_3072_pixels(page, model, test_photos):
    images, _ = test_photos
    pixels = as_bytes(images[42:43])[0].tolist()
    root = page.locator(".vitbook-photo-playground").nth(1)
    root.evaluate("(root, pixels) => window.vitbook.photoPlaygrounds[1].load(pixels)", pixels)
    shown = root.evaluate(SHOWN)
    assert shown["current"] == pixels and shown["menu"] == ""
    with torch.no_grad():
        expected = model(images[42:43]).softmax(dim=-1)[0].double()
    assert (torch.tensor(shown["probabilities"]) - expected).abs().max() < JS_TOLERANCE
    with pytest.raises(Exception, match="a photo is 3,072 pixels"):
        page.evaluate("() => window.vitbook.photoPlaygrounds[0].predict([1, 2, 3])")


def test_the_photo_is_drawn_with_crisp_pixels(page):
    state = page.locator("canvas.vpp-photo").first.evaluate(
        """canvas => ({width: canvas.width, height: canvas.height,
                       shown: canvas.getBoundingClientRect().width,
                       rendering: getComputedStyle(canvas).imageRendering})"""
    )
    assert state["width"] == state["height"] == 32 and state["shown"] >= 150
    assert state["rendering"] == "pixelated"


def test_the_page_asks_for_nothing_but_itself(page):
    assert page.errors == []
    assert page.requests[0] == page.path.as_uri()
    # The files chosen above are read from this machine through blob: URLs, which name the
    # page's own memory (blob:null/..., the origin of a page opened from disk).
    assert {urlsplit(url).scheme for url in page.requests[1:]} <= {"blob"}, page.requests


def test_the_playground_fits_a_phone(page):
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(100)
        widths = page.evaluate(
            """() => {
              const root = document.querySelector(".vitbook-photo-playground");
              const controls = root.querySelectorAll("select, input");
              return {page: document.documentElement.scrollWidth,
                      right: Math.max(...Array.from(
                        document.querySelectorAll(".vitbook-photo-playground *"),
                        e => e.getBoundingClientRect().right)),
                      photo: root.querySelector("canvas.vpp-photo").getBoundingClientRect().width,
                      controls: Array.from(controls, c => c.getBoundingClientRect().height
                                           / parseFloat(getComputedStyle(c).fontSize))};
            }"""
        )
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
    assert widths["page"] <= 390 and widths["right"] <= 390 - 16, widths
    assert widths["photo"] >= 150, "the photos stay large enough to see"
    assert min(widths["controls"]) >= 1.99, widths  # 2em of their own font, to layout rounding


def test_playgrounds_inserted_like_jquery_start(browser, fragment, second_fragment, tmp_path):
    path = tmp_path / "notebook.html"
    path.write_text(JQUERY_PAGE, encoding="utf-8")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(path.as_uri())
        page.evaluate("html => window.insertLikeJQuery('out2', html)", second_fragment)
        page.evaluate("html => window.insertLikeJQuery('out1', html)", fragment)
        state = page.evaluate(
            """() => ({ready: Array.from(document.querySelectorAll(".vitbook-photo-playground"))
                         .map(p => p.getAttribute("data-ready")),
                       menus: window.vitbook.photoPlaygrounds.map(
                         p => p.root.querySelectorAll("select.vpp-example option").length),
                       classes: window.vitbook.photoPlaygrounds[1].predict(
                         new Array(3072).fill(128)).probabilities.length})"""
        )
    finally:
        page.close()
    assert not errors, errors
    # in document order, though the second output was inserted first
    assert state == {"ready": ["true", "true"], "menus": [21, 6], "classes": 10}
