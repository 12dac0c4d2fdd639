"""Draw a digit: the trained digits ViT runs in the page, and its attention follows the pen.

:func:`digit_playground` shows a drawing grid, the class probabilities, one head's (or the
heads' mean) attention and the rollout from one query, updated without a kernel by
``vitbook/assets/vit.js``, a float64 JavaScript forward pass that mirrors
:class:`vitbook.VisionTransformer` on the weights of :func:`export_weights`.

The page's interface: ``window.vitbook.playgrounds``, one entry per playground in document
order, with ``predict(ink)`` (64 row-major ink values 0 .. 16, pixel = ink / 16) returning
``{logits, probabilities, attention, rollout}`` (``attention[layer][head]`` and ``rollout``:
N x N row-major, token 0 the class token, rows the queries), ``pixels()`` and ``load(ink)``.
The pen draws on a 32 x 32 bitmap counted in 4 x 4 blocks, as the digits were made (``PEN``).

See chapter: Inside a trained ViT.
"""

from __future__ import annotations

import base64
import html
import json
import math

import torch

from vitbook._files import ASSETS
from vitbook.config import ViTConfig
from vitbook.vit import VisionTransformer

__all__ = ["DigitPlayground", "decode_weights", "digit_playground", "export_weights"]

IMG_SIZE = (8, 8)
NUM_CLASSES = 10
INK_MAX = 16  # the digits' scale: pixel = ink / 16
MAX_PARAMETERS = 300_000  # 1.6 MB of base64 in the page at most; the digits models have 135,050
SUPPORTED_POS_EMBEDS = ("learned", "sincos2d", "none")
# The pen, in pixels of the 32 x 32 bitmap. ink: the median number of on pixels of a training
# digit (tests/test_playground.py measures it). min_radius: a line stays 3 pixels wide when a
# loaded test digit already holds that ink. max_radius: a line is at most 12 pixels wide (the
# 1s, the widest strokes of the training digits, hold a median 9 pixels of ink per bitmap row).
PEN = {"ink": 313, "min_radius": 1.5, "max_radius": 6.0}


def export_weights(model: VisionTransformer) -> dict:
    """The model as a JSON-able payload for the page: its config and every tensor it uses.

    Returns ``{"config": {...}, "tensors": {name: {"shape", "dtype": "float32", "data"}}}``:
    each state-dict tensor under its timm name (plus a fixed ``pos_embed``), as base64 of
    little-endian float32.

    Raises:
        TypeError: ``model`` is not a :class:`vitbook.VisionTransformer`, or its weights are not
            float32 (convert with ``model.float()``).
        ValueError: a model the page cannot run: not 8 x 8 pixels, 1 channel and 10 classes,
            relative position bias, more than ``MAX_PARAMETERS`` parameters, or weights
            holding NaN or inf.

    Example:
        >>> from vitbook.pretrained import load_digits_vit
        >>> payload = export_weights(load_digits_vit())
        >>> payload["config"]["pool"], payload["tensors"]["head.weight"]["shape"]
        ('mean', [10, 64])

    See chapter: Inside a trained ViT.
    """
    _check_model(model)
    cfg = model.config
    tensors = dict(model.state_dict())
    if "pos_embed" not in tensors and model.pos_embed is not None:
        tensors["pos_embed"] = model.pos_embed  # the sincos2d table, a non-persistent buffer
    return {
        "config": page_config(cfg),
        "tensors": {name: _encode(tensor) for name, tensor in tensors.items()},
    }


def page_config(cfg: ViTConfig) -> dict:
    """The fields of a config that the page's forward pass (``vit.js``) reads, JSON-able."""
    return {
        "img_size": list(cfg.img_size),
        "patch_size": cfg.patch_size,
        "in_chans": cfg.in_chans,
        "num_classes": cfg.num_classes,
        "embed_dim": cfg.embed_dim,
        "depth": cfg.depth,
        "num_heads": cfg.num_heads,
        "class_token": cfg.class_token,
        "pos_embed": cfg.pos_embed,
        "pool": cfg.pool,
        "norm_eps": cfg.norm_eps,
    }


def decode_weights(payload: dict) -> dict[str, torch.Tensor]:
    """The tensors of an :func:`export_weights` payload, as float32 tensors of their shapes.

    Raises:
        ValueError: a payload that is not one of :func:`export_weights`, or a tensor whose
            bytes do not fit its shape.

    Example:
        >>> from vitbook.pretrained import load_digits_vit
        >>> model = load_digits_vit()
        >>> tensors = decode_weights(export_weights(model))
        >>> torch.equal(tensors["head.bias"], model.head.bias)
        True

    See chapter: Inside a trained ViT.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("tensors"), dict):
        raise ValueError(
            "payload must be the dict returned by export_weights(model), with a 'tensors' key."
        )
    tensors = {}
    for name, entry in payload["tensors"].items():
        data = base64.b64decode(entry["data"])
        shape = tuple(entry["shape"])
        if entry.get("dtype") != "float32" or len(data) != 4 * math.prod(shape):
            raise ValueError(
                f"tensor {name!r} holds {len(data)} bytes of {entry.get('dtype')!r}, but shape "
                f"{shape} in float32 needs {4 * math.prod(shape)}; export it again."
            )
        flat = torch.frombuffer(bytearray(data), dtype=torch.float32)
        if not _little_endian():  # pragma: no cover - every machine this runs on is
            flat = flat.view(torch.uint8).reshape(-1, 4).flip(-1).reshape(-1).view(torch.float32)
        tensors[name] = flat.reshape(shape).clone()
    return tensors


class DigitPlayground:
    """A digit playground for one model; displaying it (``_repr_html_``) shows it.

    ``payload`` is the :func:`export_weights` payload with ``"examples"`` and ``"pen"``.

    Example:
        >>> from vitbook.pretrained import load_digits_vit
        >>> playground = digit_playground(load_digits_vit())
        >>> playground
        DigitPlayground(pool='mean', depth=4, num_heads=4, 10 test digits)

    See chapter: Inside a trained ViT.
    """

    def __init__(self, payload: dict) -> None:
        self.payload = payload

    def __repr__(self) -> str:
        cfg = self.payload["config"]
        return (
            f"DigitPlayground(pool={cfg['pool']!r}, depth={cfg['depth']}, "
            f"num_heads={cfg['num_heads']}, {len(self.payload['examples'])} test digits)"
        )

    def to_html(self) -> str:
        """The self-contained fragment: markup, inline style, the weights and the script."""
        return render(self.payload)

    def _repr_html_(self) -> str:
        return self.to_html()


def digit_playground(
    model: VisionTransformer,
    *,
    examples: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> DigitPlayground:
    """Draw a digit and watch the model's prediction, attention and rollout, in the page.

    ``examples`` are ``(images (E, 1, 8, 8) in [0, 1], labels (E,))``, 1 <= E <= 20; by default
    the first test digit of each class.

    Raises:
        TypeError / ValueError: a model that :func:`export_weights` refuses; examples that are
            not (E, 1, 8, 8) images in [0, 1] with E labels in 0 .. 9.

    Example:
        >>> from vitbook.pretrained import load_digits_vit
        >>> page = digit_playground(load_digits_vit(variant="cls")).to_html()
        >>> page.startswith('<div class="vitbook-playground"'), "://" in page
        (True, False)

    See chapter: Inside a trained ViT.
    """
    payload = export_weights(model)
    if examples is None:
        from vitbook.data import load_digits_split

        _, _, images, labels = load_digits_split()
        first = [int((labels == digit).nonzero()[0]) for digit in range(NUM_CLASSES)]
        examples = (images[first], labels[first])
    images, labels = _check_examples(examples)
    payload["pen"] = dict(PEN)
    payload["examples"] = [
        {"label": int(label), "ink": [_number(v) for v in (image * INK_MAX).flatten().tolist()]}
        for image, label in zip(images, labels, strict=True)
    ]
    return DigitPlayground(payload)


def _check_model(model: object) -> None:
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model must be a vitbook VisionTransformer, got {type(model).__name__}; load one "
            "with vitbook.pretrained.load_digits_vit()."
        )
    cfg = model.config
    if cfg.img_size != IMG_SIZE or cfg.in_chans != 1 or cfg.num_classes != NUM_CLASSES:
        raise ValueError(
            f"the playground draws 8 x 8 grey digits of 10 classes, but the model has "
            f"img_size={cfg.img_size}, in_chans={cfg.in_chans}, num_classes={cfg.num_classes}; "
            "use a digits model such as load_digits_vit()."
        )
    if cfg.distilled or cfg.stem != "patch":
        raise ValueError(
            f"the playground's page script runs the ViT of the book's first chapters: one "
            f"class token and a patch embedding, got distilled={cfg.distilled}, "
            f"stem={cfg.stem!r}; use a digits model such as load_digits_vit()."
        )
    if cfg.pos_embed not in SUPPORTED_POS_EMBEDS:
        raise ValueError(
            f"pos_embed={cfg.pos_embed!r} is not supported: the page's forward pass adds a "
            f"position table to the tokens ({', '.join(SUPPORTED_POS_EMBEDS)}) and has no "
            "relative position bias; use a model with pos_embed='sincos2d' or 'learned'."
        )
    count = sum(p.numel() for p in model.parameters())
    if count > MAX_PARAMETERS:
        raise ValueError(
            f"the model has {count:,} parameters, {4 * count * 4 / 3 / 1e6:.1f} MB of weights in "
            f"the page; the playground takes at most {MAX_PARAMETERS:,}: use a smaller model."
        )
    for name, tensor in model.state_dict().items():
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
            "pass e.g. (x_test[:10], y_test[:10])."
        )
    images, labels = examples
    if not isinstance(images, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise TypeError("examples must be two tensors: images (E, 1, 8, 8) and labels (E,).")
    images = images.detach().float().cpu()
    k = images.shape[0] if images.ndim == 4 else -1
    if images.shape[1:] != (1, *IMG_SIZE) or not 1 <= k <= 20 or labels.shape != (k,):
        raise ValueError(
            f"examples have images of shape {tuple(images.shape)} and labels of shape "
            f"{tuple(labels.shape)}; pass 1 to 20 images (E, 1, 8, 8) and E labels (E,)."
        )
    if not bool(((images >= 0) & (images <= 1)).all()):
        raise ValueError(
            "example images must lie in [0, 1] (pixel = ink / 16, as load_digits_split gives)."
        )
    if labels.is_floating_point() or not bool(((labels >= 0) & (labels < 10)).all()):
        raise ValueError(f"example labels must be integers 0 .. 9, got {labels.tolist()}.")
    return images, labels


def _encode(tensor: torch.Tensor) -> dict:
    values = tensor.detach().cpu().contiguous().to(torch.float32)
    data = values.numpy().astype("<f4").tobytes()  # little-endian, whatever the machine
    return {
        "shape": list(values.shape),
        "dtype": "float32",
        "data": base64.b64encode(data).decode("ascii"),
    }


def _little_endian() -> bool:
    import sys

    return sys.byteorder == "little"


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 6)


def _script(page: str = "playground.js") -> str:
    """The page's script: the forward pass (``vit.js``), then the page's own script."""
    script = "\n".join((ASSETS / name).read_text(encoding="utf-8") for name in ("vit.js", page))
    if "</script" in script.lower():  # pragma: no cover - a guard for edits of the assets
        raise RuntimeError(f"vit.js and {page} must not contain '</script'.")
    return script


def render(payload: dict) -> str:
    """The HTML fragment of one playground (see the module docstring for what it holds)."""
    cfg = payload["config"]
    gh, gw = (size // cfg["patch_size"] for size in cfg["img_size"])
    prefix = int(cfg["class_token"])
    layers = "".join(  # numbered from 0, as attention[layer][head] and the figures
        f'<option value="{i}"{" selected" * (i == cfg["depth"] - 1)}>{i}</option>'
        for i in range(cfg["depth"])
    )
    heads = '<option value="mean" selected>mean of the heads</option>' + "".join(
        f'<option value="{h}">{h}</option>' for h in range(cfg["num_heads"])
    )
    queries = []
    if cfg["pool"] == "mean":
        queries.append(("pooled", "pooled output (the head reads it)"))
    if prefix:
        read = " (the head reads it)" if cfg["pool"] == "cls" else ""
        queries.append(("0", f"class token{read}"))
    queries += [
        (str(prefix + k), f"patch {k} (row {k // gw}, col {k % gw})") for k in range(gh * gw)
    ]
    query_options = "".join(f'<option value="{v}">{html.escape(t)}</option>' for v, t in queries)
    example_options = '<option value="">(your drawing)</option>' + "".join(
        f'<option value="{i}"{" selected" * (i == 0)}>a {e["label"]}</option>'
        for i, e in enumerate(payload["examples"])
    )
    bars = "".join(
        f'<div class="vbp-bar"><span class="vbp-class">{d}</span>'
        '<span class="vbp-track"><span class="vbp-fill"></span></span><output></output></div>'
        for d in range(cfg["num_classes"])
    )
    model = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    script = _script()
    return (
        f'<div class="vitbook-playground" data-pool="{cfg["pool"]}">{STYLE}'
        f'<p class="vbp-howto">{HOW_TO_DRAW}</p>'
        '<div class="vbp-top"><div class="vbp-draw">'
        '<canvas class="vbp-grid" width="480" height="480" role="img" '
        'aria-label="Drawing grid of 8 by 8 pixels: draw a digit with the mouse or a finger">'
        "</canvas>"
        '<div class="vbp-row"><button type="button" data-tool="pen" aria-pressed="true">Pen'
        '</button><button type="button" data-tool="eraser" aria-pressed="false">Eraser</button>'
        '<button type="button" class="vbp-clear">Clear</button>'
        f'<label>Test digit <select class="vbp-example" autocomplete="off">{example_options}'
        "</select></label></div></div>"
        '<div class="vbp-bars"><div class="vbp-title">Class probabilities</div>'
        '<p class="vbp-empty">The grid is empty: draw a digit, or load a test digit, to see '
        f"what the model reads.</p>{bars}</div>"
        "</div>"
        '<div class="vbp-row vbp-menus">'
        f'<label>Layer <select class="vbp-layer" autocomplete="off">{layers}</select></label>'
        f'<label>Head <select class="vbp-head" autocomplete="off">{heads}</select></label>'
        f'<label>Query <select class="vbp-query" autocomplete="off">{query_options}</select>'
        "</label></div>"
        '<div class="vbp-maps">'
        '<div class="vbp-map"><div class="vbp-title">Attention of the layer and head</div>'
        '<canvas class="vbp-attention" width="320" height="320" role="img" '
        'aria-label="The attention of the chosen layer and head from the chosen query, in '
        'orange over the digit"></canvas><div class="vbp-attention-scale vbp-scale"></div>'
        "</div>"
        '<div class="vbp-map"><div class="vbp-title">Attention rollout, all layers</div>'
        '<canvas class="vbp-rollout" width="320" height="320" role="img" '
        'aria-label="The attention rollout from the chosen query, in orange over the digit">'
        '</canvas><div class="vbp-rollout-scale vbp-scale"></div></div></div>'
        '<p class="vbp-note">Orange: each patch\'s share, from 0 to the largest share in the map '
        "(printed under it, with the class token's share, which has no place on the grid). "
        "Layers, heads and patches are numbered from 0, as the tensors index them.</p>"
        '<details class="vbp-pixels"><summary>The ink as a Python list</summary>'
        '<textarea class="vbp-ink" readonly rows="10" spellcheck="false" '
        'aria-label="The ink values of the drawing, 8 rows of 8, from 0 to 16"></textarea>'
        "</details>"
        f'<script type="application/json" class="vbp-model">{model}</script>'
        f'<script class="vbp-js">{script}</script></div>'
    )


HOW_TO_DRAW = (
    "Draw one digit, large: fill the box from top to bottom, in one or two strokes, and cross "
    "your 7 (most 7s of the data set are crossed). Lines thin out as you draw: every drawing "
    "gets as much ink as the data set's digits."
)

STYLE = (
    "<style>"
    ".vitbook-playground{margin:0.5em 0;max-width:100%;box-sizing:border-box;text-align:left}"
    ".vitbook-playground *{box-sizing:border-box}"
    ".vitbook-playground .vbp-top,.vitbook-playground .vbp-maps{display:flex;flex-wrap:wrap;"
    "gap:0.8em 1.5em;align-items:flex-start}"
    ".vitbook-playground .vbp-draw{width:240px;max-width:100%}"
    ".vitbook-playground canvas{display:block;width:100%;height:auto;aspect-ratio:1;"
    "border:1px solid rgba(128,128,128,0.6)}"
    ".vitbook-playground canvas.vbp-grid{touch-action:none;cursor:crosshair}"
    ".vitbook-playground .vbp-row{display:flex;flex-wrap:wrap;gap:0.4em 0.6em;align-items:center;"
    "margin:0.5em 0}"
    ".vitbook-playground .vbp-menus{gap:0.4em 1.5em}"
    ".vitbook-playground label{display:inline-flex;flex-wrap:wrap;align-items:center;"
    "gap:0.2em 0.5em;margin:0;max-width:100%}"
    ".vitbook-playground select{max-width:100%;font:inherit;font-size:0.9em}"
    ".vitbook-playground button{font:inherit;font-size:0.9em;color:inherit;background:none;"
    "border:1px solid rgba(128,128,128,0.7);border-radius:4px;padding:0.15em 0.7em;"
    "min-height:2em;cursor:pointer}"
    ".vitbook-playground button[aria-pressed=true]{background:rgba(31,119,180,0.2);"
    "border-color:#1f77b4;font-weight:600}"
    ".vitbook-playground .vbp-bars{flex:1 1 200px;max-width:340px}"
    ".vitbook-playground .vbp-title{font-weight:600;margin:0 0 0.3em;font-size:0.95em}"
    ".vitbook-playground .vbp-bar{display:flex;align-items:center;gap:0.5em;height:1.6em}"
    ".vitbook-playground .vbp-class{width:1em;text-align:right;font-variant-numeric:tabular-nums}"
    ".vitbook-playground .vbp-track{flex:1;height:0.9em;background:rgba(128,128,128,0.18);"
    "border-radius:2px;overflow:hidden}"
    ".vitbook-playground .vbp-fill{display:block;height:100%;width:0;background:#1f77b4}"
    ".vitbook-playground .vbp-best .vbp-fill{background:#e6550d}"
    ".vitbook-playground .vbp-best .vbp-class,.vitbook-playground .vbp-best output"
    "{font-weight:700}"
    ".vitbook-playground output{width:4.2em;text-align:right;white-space:nowrap;"
    "font-variant-numeric:tabular-nums;font-size:0.9em}"
    ".vitbook-playground .vbp-map{width:160px;max-width:calc(50% - 0.75em)}"
    ".vitbook-playground .vbp-scale,.vitbook-playground .vbp-note{font-size:0.85em;"
    "margin:0.2em 0 0}"
    ".vitbook-playground .vbp-note{margin:0.5em 0}"
    ".vitbook-playground .vbp-howto{margin:0 0 0.5em;font-size:0.95em}"
    # an empty grid shows no prediction, and says so
    ".vitbook-playground .vbp-empty{display:none;margin:0 0 0.3em;font-size:0.9em}"
    ".vitbook-playground.vbp-blank .vbp-empty{display:block}"
    ".vitbook-playground details{margin:0.3em 0}"
    # the classic Notebook's stylesheet hides the disclosure triangle of <summary>
    ".vitbook-playground summary{display:list-item;cursor:pointer}"
    ".vitbook-playground textarea{width:100%;max-width:24em;font-family:monospace;"
    "font-size:0.85em;color:inherit;background:none}"
    "</style>"
)
