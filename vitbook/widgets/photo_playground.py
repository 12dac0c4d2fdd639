"""Show the CIFAR-10 ViT a photo: the shipped model runs in the page, on a test photo or yours.

:func:`photo_playground` shows a menu of test photos and a file input, the 32 x 32 photo, the
class token's attention rollout over the 8 x 8 patches and the ten probabilities, computed
without a kernel by ``vitbook/assets/vit.js`` on the model file's int8 weights and row scales.

The page's interface: ``window.vitbook.photoPlaygrounds``, one entry per playground in document
order, with ``predict(pixels)`` (3,072 values 0 .. 255, row-major (height, width, channel))
returning ``{logits, probabilities, attention, rollout}`` (classes in the order of
:data:`vitbook.data.cifar.CIFAR10_CLASSES`; N x N row-major, N = 65, token 0 the class token),
``load(pixels)`` and ``current()``.

See chapter: Real photos.
"""

from __future__ import annotations

import base64
import html
import json

import torch
from torch import nn

from vitbook.data.cifar import CIFAR10_CLASSES, Normalize
from vitbook.pretrained.checkpoints import dequantize_int8, quantize_int8
from vitbook.vit import VisionTransformer
from vitbook.widgets.playground import SUPPORTED_POS_EMBEDS, _encode, _script, page_config

__all__ = ["MAX_EXAMPLES", "MAX_PARAMETERS", "PhotoPlayground", "photo_playground"]

IMG_SIZE = (32, 32)
CHANNELS = 3
MAX_PARAMETERS = 2_500_000  # 3.3 MB of int8 base64 in the page; the shipped model has 1,806,538
MAX_EXAMPLES = 40  # 4 kB of base64 each
EXAMPLES_PER_CLASS = 2


class PhotoPlayground:
    """A photo playground for one model; displaying it (``_repr_html_``) shows it.

    ``payload`` holds ``"config"`` (with the ``Normalize`` layer's ``mean`` and ``std``),
    ``"classes"``, ``"tensors"`` (weight matrices as ``{"shape", "dtype": "int8", "data",
    "scale"}``, the others float32, in base64) and ``"examples"`` (``{"label", "name",
    "caption", "pixels"}``).

    Example:
        >>> photo_playground()
        PhotoPlayground(D=192, depth=6, num_heads=3, 20 test photos)

    See chapter: Real photos.
    """

    def __init__(self, payload: dict) -> None:
        self.payload = payload

    def __repr__(self) -> str:
        cfg = self.payload["config"]
        return (
            f"PhotoPlayground(D={cfg['embed_dim']}, depth={cfg['depth']}, "
            f"num_heads={cfg['num_heads']}, {len(self.payload['examples'])} test photos)"
        )

    def to_html(self) -> str:
        """The self-contained fragment: markup, inline style, the weights and the script."""
        return render(self.payload)

    def _repr_html_(self) -> str:
        return self.to_html()


def photo_playground(
    model: nn.Sequential | None = None,
    *,
    examples: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> PhotoPlayground:
    """Show the photo model a test photo or a photo of your own, in the page, kernel-free.

    Args:
        model: ``nn.Sequential(Normalize(mean, std), VisionTransformer)`` for 32 x 32 RGB photos,
            10 classes, a class token and int8-valued weight matrices; by default
            :func:`vitbook.pretrained.load_cifar10_vit`.
        examples: ``(images (E, 3, 32, 32) in [0, 1], labels (E,))``, 1 <= E <= 40; by default
            two test photos of each class.

    Raises:
        TypeError: not such a model, weights not float32, examples not a pair of tensors.
        ValueError: a model of other sizes, without a class token, over ``MAX_PARAMETERS``,
            non-finite or not int8 times row scales; examples of other shapes or values.

    Example:
        >>> page = photo_playground().to_html()
        >>> page.startswith('<div class="vitbook-photo-playground"'), "://" in page
        (True, False)
        >>> len(page.encode()) < 5_000_000
        True

    See chapter: Real photos.
    """
    if model is None:
        from vitbook.pretrained import load_cifar10_vit

        model = load_cifar10_vit()
    tensors = _export(model)
    if examples is None:
        from vitbook.data.cifar_sample import load_cifar10_sample

        _, _, images, labels = load_cifar10_sample()
        first = [
            int(index)
            for label in range(len(CIFAR10_CLASSES))
            for index in (labels == label).nonzero()[:EXAMPLES_PER_CLASS, 0]
        ]
        examples, where = (images[first], labels[first]), "test photo"
    else:
        first, where = None, "photo"
    images, labels = _check_examples(examples)
    normalize, vit = model
    config = page_config(vit.config)
    config["mean"] = normalize.mean.flatten().tolist()  # the layer's float32 values
    config["std"] = normalize.std.flatten().tolist()
    photos = (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1)  # (E, H, W, C)
    payload = {"config": config, "classes": list(CIFAR10_CLASSES), "tensors": tensors}
    payload["examples"] = [
        {
            "label": int(label),
            "name": f"{where} {k if first is None else first[k]}",
            "pixels": base64.b64encode(photo.contiguous().numpy().tobytes()).decode("ascii"),
        }
        for k, (photo, label) in enumerate(zip(photos, labels.tolist(), strict=True))
    ]
    for example in payload["examples"]:  # "a cat (test photo 3)"
        example["caption"] = f"{_a(CIFAR10_CLASSES[example['label']])} ({example['name']})"
    return PhotoPlayground(payload)


def _export(model: object) -> dict:
    """The ViT's tensors for the page: weight matrices in int8 with row scales, others float32."""
    _check_model(model)
    vit = model[1]
    state = dict(vit.state_dict())
    if "pos_embed" not in state and vit.pos_embed is not None:
        state["pos_embed"] = vit.pos_embed  # the sincos2d table, a non-persistent buffer
    packed, names = quantize_int8(state)
    restored = dequantize_int8(packed, names)
    inexact = [name for name in names if not torch.equal(restored[name], state[name])]
    if inexact:
        raise ValueError(
            f"{inexact[0]} (and {len(inexact) - 1} more weight matrices) is not exactly int8 "
            "values times one scale per row, and the page holds the weight matrices so: pass a "
            "model loaded from an int8 file such as load_cifar10_vit() (save a trained one "
            "with save_model(model, path, int8=True) and read it back with load_model(path))."
        )
    tensors = {}
    for name, tensor in state.items():
        if name in names:
            scale = packed[name + ".int8_scale"].numpy().astype("<f4")  # little-endian
            tensors[name] = {
                "shape": list(tensor.shape),
                "dtype": "int8",
                "data": base64.b64encode(packed[name].numpy().tobytes()).decode("ascii"),
                "scale": base64.b64encode(scale.tobytes()).decode("ascii"),
            }
        else:
            tensors[name] = _encode(tensor)
    return tensors


def _check_model(model: object) -> None:
    layers = list(model) if isinstance(model, nn.Sequential) else []
    kinds = [type(layer) for layer in layers]
    if kinds != [Normalize, VisionTransformer]:
        got = (
            f"nn.Sequential({', '.join(kind.__name__ for kind in kinds)})"
            if isinstance(model, nn.Sequential)
            else type(model).__name__
        )
        raise TypeError(
            f"model must be nn.Sequential(Normalize(mean, std), VisionTransformer), as "
            f"load_cifar10_vit() returns it, got {got}; load the photo model with "
            "vitbook.pretrained.load_cifar10_vit()."
        )
    normalize, vit = layers
    cfg = vit.config
    if cfg.img_size != IMG_SIZE or cfg.in_chans != CHANNELS or cfg.num_classes != 10:
        raise ValueError(
            f"the playground shows 32 x 32 RGB photos of CIFAR-10's 10 classes, but the model "
            f"has img_size={cfg.img_size}, in_chans={cfg.in_chans}, "
            f"num_classes={cfg.num_classes}; use a CIFAR-10 model such as load_cifar10_vit()."
        )
    if len(normalize.mean) != CHANNELS:
        raise ValueError(
            f"the Normalize layer has statistics for {len(normalize.mean)} channels; a photo "
            "has 3: use Normalize(CIFAR10_MEAN, CIFAR10_STD), as load_cifar10_vit() does."
        )
    if not cfg.class_token or cfg.distilled or cfg.stem != "patch":
        raise ValueError(
            f"the playground maps the attention rollout from the class token and its page "
            f"script runs one class token and a patch embedding, got class_token="
            f"{cfg.class_token}, distilled={cfg.distilled}, stem={cfg.stem!r}; use a model "
            "such as load_cifar10_vit()."
        )
    if cfg.pos_embed not in SUPPORTED_POS_EMBEDS:
        raise ValueError(
            f"pos_embed={cfg.pos_embed!r} is not supported: the page's forward pass adds a "
            f"position table to the tokens ({', '.join(SUPPORTED_POS_EMBEDS)}) and has no "
            "relative position bias; use a model with pos_embed='learned' or 'sincos2d'."
        )
    count = sum(p.numel() for p in vit.parameters())
    if count > MAX_PARAMETERS:
        raise ValueError(
            f"the model has {count:,} parameters, {count * 4 / 3 / 1e6:.1f} MB of int8 weights "
            f"in the page; the playground takes at most {MAX_PARAMETERS:,}: use a smaller model."
        )
    named = {**vit.state_dict(), "Normalize mean": normalize.mean, "Normalize std": normalize.std}
    for name, tensor in named.items():
        if tensor.dtype != torch.float32:
            raise TypeError(
                f"{name} has dtype {tensor.dtype}; the page holds float32 weights: convert "
                "the model with model.float()."
            )
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} holds NaN or inf; the model cannot be run in the page.")


def _check_examples(examples: object) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(examples, (tuple, list)) or len(examples) != 2:
        raise TypeError(
            f"examples must be a pair (images, labels), got {type(examples).__name__}; "
            "pass e.g. (x_test[:20], y_test[:20])."
        )
    images, labels = examples
    if not isinstance(images, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise TypeError("examples must be two tensors: images (E, 3, 32, 32) and labels (E,).")
    images = images.detach().float().cpu()
    k = images.shape[0] if images.ndim == 4 else -1
    shapes_fit = images.shape[1:] == (CHANNELS, *IMG_SIZE) and labels.shape == (k,)
    if not shapes_fit or not 1 <= k <= MAX_EXAMPLES:
        raise ValueError(
            f"examples have images of shape {tuple(images.shape)} and labels of shape "
            f"{tuple(labels.shape)}; pass 1 to {MAX_EXAMPLES} photos (E, 3, 32, 32) and E "
            "labels (E,)."
        )
    if not bool(((images >= 0) & (images <= 1)).all()):
        raise ValueError(
            "example photos must lie in [0, 1], as load_cifar10_sample gives them (8-bit "
            "pixels / 255); NaN is refused too."
        )
    if labels.is_floating_point() or not bool(((labels >= 0) & (labels < 10)).all()):
        raise ValueError(f"example labels must be integers 0 .. 9, got {labels.tolist()}.")
    return images, labels.long().cpu()


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def render(payload: dict) -> str:
    """The HTML fragment of one photo playground (see the module docstring for what it holds)."""
    examples = "".join(
        f'<option value="{i}"{" selected" * (i == 0)}>{html.escape(e["caption"])}</option>'
        for i, e in enumerate(payload["examples"])
    )
    bars = "".join(
        f'<div class="vpp-bar"><span class="vpp-class">{html.escape(name)}</span>'
        '<span class="vpp-track"><span class="vpp-fill"></span></span><output></output></div>'
        for name in payload["classes"]
    )
    model = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div class="vitbook-photo-playground">{STYLE}<p class="vpp-howto">{HOW_TO}</p>'
        '<div class="vpp-row"><label>Test photo <select class="vpp-example" autocomplete="off">'
        f'<option value="" disabled>(your own photo)</option>{examples}</select></label>'
        '<label>Your own photo <input type="file" accept="image/*" class="vpp-file"></label>'
        '</div><p class="vpp-status" aria-live="polite"></p><div class="vpp-top">'
        '<div class="vpp-map"><div class="vpp-title">What the model sees</div>'
        '<canvas class="vpp-photo" width="32" height="32" role="img" aria-label="The photo as '
        'the model sees it, 32 by 32 pixels"></canvas><div class="vpp-scale">'
        "32&nbsp;x&nbsp;32 pixels, 64&nbsp;patches of 4&nbsp;x&nbsp;4</div></div>"
        '<div class="vpp-map"><div class="vpp-title">Attention rollout</div>'
        '<canvas class="vpp-rollout" width="256" height="256" role="img" aria-label="The '
        "photo with the attention rollout from the class token: the patches it draws on most "
        'are the brightest"></canvas><div class="vpp-rollout-scale vpp-scale"></div></div>'
        f'<div class="vpp-bars"><div class="vpp-title">Class probabilities</div>{bars}</div>'
        f'</div><p class="vpp-note">{NOTE}</p>'
        f'<script type="application/json" class="vpp-model">{model}</script>'
        f'<script class="vpp-js">{_script("photo_playground.js")}</script></div>'
    )


HOW_TO = (
    "Choose a test photo, or a photo of your own (a phone offers its camera too): the model "
    "sees its centre square as 32 x 32 pixels and gives each of CIFAR-10's ten classes a "
    "probability, the most probable in orange. It knows no other classes."
)
NOTE = (
    "Right: the attention rollout from the class token through all six layers, the share of "
    "each patch in what the class token reads. The patch with the largest share is shown at "
    "full brightness, the others dimmed in proportion; the largest share and the class "
    "token's own, which has no place on the photo, are printed under the map."
)

STYLE = (
    "<style>"
    ".vitbook-photo-playground{margin:0.5em 0;max-width:100%;box-sizing:border-box;"
    "text-align:left}"
    ".vitbook-photo-playground *{box-sizing:border-box}"
    ".vitbook-photo-playground .vpp-top{display:flex;flex-wrap:wrap;gap:0.8em 1em;"
    "align-items:flex-start}"
    ".vitbook-photo-playground .vpp-map{width:200px;max-width:calc(50% - 0.5em)}"
    ".vitbook-photo-playground canvas{display:block;width:100%;height:auto;aspect-ratio:1;"
    "border:1px solid rgba(128,128,128,0.6)}"
    ".vitbook-photo-playground canvas.vpp-photo{image-rendering:crisp-edges;"
    "image-rendering:pixelated}"
    ".vitbook-photo-playground .vpp-row{display:flex;flex-wrap:wrap;gap:0.4em 1.2em;"
    "align-items:center;margin:0.5em 0}"
    ".vitbook-photo-playground label{display:inline-flex;flex-wrap:wrap;align-items:center;"
    "gap:0.2em 0.5em;margin:0;max-width:100%}"
    ".vitbook-photo-playground select,.vitbook-photo-playground input{max-width:100%;"
    "font:inherit;font-size:0.9em;min-height:2em}"
    ".vitbook-photo-playground input::file-selector-button{font:inherit;min-height:2em;"
    "cursor:pointer}"
    ".vitbook-photo-playground .vpp-bars{flex:1 1 220px;max-width:340px}"
    ".vitbook-photo-playground .vpp-title{font-weight:600;margin:0 0 0.3em;font-size:0.95em}"
    ".vitbook-photo-playground .vpp-bar{display:flex;align-items:center;gap:0.5em;height:1.6em}"
    ".vitbook-photo-playground .vpp-class{width:5.6em;text-align:right;font-size:0.9em}"
    ".vitbook-photo-playground .vpp-track{flex:1;height:0.9em;background:rgba(128,128,128,0.18);"
    "border-radius:2px;overflow:hidden}"
    ".vitbook-photo-playground .vpp-fill{display:block;height:100%;width:0;background:#1f77b4}"
    ".vitbook-photo-playground .vpp-best .vpp-fill{background:#e6550d}"
    ".vitbook-photo-playground .vpp-best .vpp-class,.vitbook-photo-playground .vpp-best output"
    "{font-weight:700}"
    ".vitbook-photo-playground output{width:4.2em;text-align:right;white-space:nowrap;"
    "font-variant-numeric:tabular-nums;font-size:0.9em}"
    ".vitbook-photo-playground .vpp-scale,.vitbook-photo-playground .vpp-note,"
    ".vitbook-photo-playground .vpp-status{font-size:0.85em;margin:0.2em 0 0}"
    ".vitbook-photo-playground .vpp-note{margin:0.5em 0}"
    ".vitbook-photo-playground .vpp-status{margin:0 0 0.5em;min-height:1.3em}"
    ".vitbook-photo-playground .vpp-howto{margin:0 0 0.5em;font-size:0.95em}"
    "</style>"
)
