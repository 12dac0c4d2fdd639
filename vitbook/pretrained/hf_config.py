"""Hugging Face ViT and DeiT configs read into a ``ViTConfig``, and their class names.

A checkpoint on the Hub comes with a ``config.json``: sizes under Hugging Face's names
(``hidden_size``, ``num_hidden_layers``, ...), the LayerNorm epsilon, dropout, the model type and
``id2label``. :func:`config_from_hf` turns it into the ``ViTConfig`` that builds the same model;
:func:`hf_class_names` lists the classes in the order of the logits. Both are re-exported by
:mod:`vitbook.pretrained.convert`.

See chapter: A pretrained ViT.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from vitbook import _checks
from vitbook.config import ViTConfig, check_fields

__all__ = ["MODEL_TYPES", "config_from_hf", "hf_class_names"]

MODEL_TYPES = ("vit", "deit")


def _hf_dict(hf_config: object) -> dict:
    if hasattr(hf_config, "to_dict"):  # a transformers ViTConfig
        hf_config = hf_config.to_dict()
    if not isinstance(hf_config, Mapping):
        raise TypeError(
            f"hf_config must be a transformers ViTConfig or the dict of its config.json, got "
            f"{type(hf_config).__name__}."
        )
    return dict(hf_config)


def hf_class_names(hf_config: object) -> tuple[str, ...]:
    """The class names of a Hugging Face config (``id2label``), in the order of the logits.

    Example:
        >>> hf_class_names({"id2label": {"1": "cat", "0": "dog"}})
        ('dog', 'cat')

    See chapter: A pretrained ViT.
    """
    labels = _hf_dict(hf_config).get("id2label") or {}
    if not isinstance(labels, Mapping):
        raise TypeError(
            f"id2label must be a dict {{index: name}} as in config.json, got "
            f"{type(labels).__name__}; for a list of names use dict(enumerate(names))."
        )
    try:
        ordered = sorted((int(index), str(name)) for index, name in labels.items())
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"id2label keys must be class indices such as '0' or 0, got {list(labels)[:5]}."
        ) from err
    if [index for index, _ in ordered] != list(range(len(ordered))):
        raise ValueError(
            f"id2label must number its classes 0, 1, 2, ... without gaps; got the indices "
            f"{[index for index, _ in ordered][:10]}."
        )
    return tuple(name for _, name in ordered)


def config_from_hf(hf_config: object, *, num_classes: int, **overrides: object) -> ViTConfig:
    """The ``ViTConfig`` of a Hugging Face ViT or DeiT config: sizes, epsilon and dropout.

    A DeiT config (``model_type="deit"``) gives ``distilled=True``: every Hugging Face DeiT has
    the distillation token.

    Args:
        hf_config: a ``transformers.ViTConfig`` or ``DeiTConfig``, or the dict read from its
            ``config.json``.
        num_classes: rows of the classifier (0 for a ``ViTModel`` without one); Hugging Face
            configs carry a label count even when there is no classifier, so it is an argument.
        **overrides: ``ViTConfig`` fields to change, e.g. ``attn_impl="sdpa"``.

    Raises:
        TypeError: ``hf_config`` is neither a config nor a dict.
        ValueError: a model type other than ``"vit"`` or ``"deit"``, an activation other than
            exact GELU, or a missing size.

    Example:
        >>> hf = {"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2,
        ...       "num_attention_heads": 4, "intermediate_size": 256, "image_size": 32,
        ...       "patch_size": 8, "layer_norm_eps": 1e-12}
        >>> cfg = config_from_hf(hf, num_classes=10)
        >>> cfg.embed_dim, cfg.mlp_ratio, cfg.norm_eps, cfg.num_classes
        (64, 4.0, 1e-12, 10)

    See chapter: A pretrained ViT.
    """
    hf = _hf_dict(hf_config)
    check_fields(overrides)
    model_type = _model_type(hf)
    activation = hf.get("hidden_act", "gelu")
    if activation != "gelu":
        raise ValueError(
            f"hidden_act={activation!r}: vitbook's MLP uses the exact GELU ('gelu'), as "
            "Hugging Face and timm run the ViT checkpoints."
        )
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    absent = [name for name in (*sizes, "image_size", "patch_size") if name not in hf]
    if absent:
        raise ValueError(f"hf_config lacks {absent}; pass the model's full config.json.")
    for name in (*sizes, "patch_size", "num_channels"):
        if name in hf:
            _checks.positive_int(f"hf_config[{name!r}]", hf[name])
    width, hidden = hf["hidden_size"], hf["intermediate_size"]
    mlp_ratio = hidden / width
    if int(width * mlp_ratio) != hidden:  # float rounding, e.g. 7 * (61 / 7) = 60.99999...
        mlp_ratio = math.nextafter(mlp_ratio, math.inf)
    if int(width * mlp_ratio) != hidden:
        raise ValueError(
            f"intermediate_size={hidden} is not int(hidden_size * r) for r = {mlp_ratio!r}."
        )
    image_size = hf["image_size"]
    _checks.pair("hf_config['image_size']", image_size)
    fields = {
        "img_size": tuple(image_size) if isinstance(image_size, (list, tuple)) else image_size,
        "patch_size": hf["patch_size"],
        "in_chans": hf.get("num_channels", 3),
        "num_classes": num_classes,
        "embed_dim": width,
        "depth": hf["num_hidden_layers"],
        "num_heads": hf["num_attention_heads"],
        "mlp_ratio": mlp_ratio,
        "qkv_bias": hf.get("qkv_bias", True),
        "norm_eps": hf.get("layer_norm_eps", 1e-12),
        "drop_rate": hf.get("hidden_dropout_prob", 0.0),
        "attn_drop_rate": hf.get("attention_probs_dropout_prob", 0.0),
        "distilled": model_type == "deit",
    }
    try:
        return ViTConfig(**{**fields, **overrides})
    except (TypeError, ValueError) as err:
        names = {"qkv_bias": "qkv_bias", "norm_eps": "layer_norm_eps",
                 "drop_rate": "hidden_dropout_prob",
                 "attn_drop_rate": "attention_probs_dropout_prob"}
        raise _checks.same_kind(err)(
            f"hf_config gives a config vitbook cannot build: {err} (Hugging Face names: "
            f"{names})"
        ) from err


def _model_type(hf: dict) -> str:
    model_type = hf.get("model_type", "vit")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type={model_type!r} is neither a plain ViT nor a DeiT; vitbook converts "
            "model_type='vit' and 'deit' (BEiT, DINOv2 and others differ in tokens, norms or "
            "biases)."
        )
    return model_type
