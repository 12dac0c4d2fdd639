"""State dicts from timm and Hugging Face ``transformers`` into vitbook's ``VisionTransformer``.

vitbook's names are timm's, so a timm state dict is only checked. A Hugging Face ViT names the
tensors differently and keeps query, key and value apart::

    Hugging Face (files on the Hub)                   vitbook / timm
    vit.embeddings.cls_token                          cls_token                (1, 1, D)
    vit.embeddings.position_embeddings                pos_embed                (1, N, D)
    vit.embeddings.patch_embeddings.projection        patch_embed.proj         (D, C, P, P)
    vit.encoder.layer.{i}.layernorm_before            blocks.{i}.norm1
    vit.encoder.layer.{i}.attention.attention.query   blocks.{i}.attn.qkv      rows 0 .. D-1
    vit.encoder.layer.{i}.attention.attention.key       "                      rows D .. 2D-1
    vit.encoder.layer.{i}.attention.attention.value     "                      rows 2D .. 3D-1
    vit.encoder.layer.{i}.attention.output.dense      blocks.{i}.attn.proj
    vit.encoder.layer.{i}.layernorm_after             blocks.{i}.norm2
    vit.encoder.layer.{i}.intermediate.dense          blocks.{i}.mlp.fc1
    vit.encoder.layer.{i}.output.dense                blocks.{i}.mlp.fc2
    vit.layernorm                                     norm
    classifier                                        head

A distilled DeiT (``model_type="deit"``) has the same layers under ``deit.``, and::

    deit.embeddings.distillation_token                dist_token               (1, 1, D)
    cls_classifier                                    head
    distillation_classifier                           head_dist

A DeiT config converts to ``distilled=True`` (``DeiTForImageClassification``'s one
``classifier`` is refused); transformers 5's names (``vit.layers.{i}...``) are accepted; a
``ViTModel`` gives ``num_classes=0``; ``layer_norm_eps`` becomes ``ViTConfig.norm_eps``.

See chapter: A pretrained ViT.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import torch

from vitbook.pretrained import _safetensors
from vitbook.pretrained.hf_config import _hf_dict, _model_type, config_from_hf, hf_class_names
from vitbook.vit import VisionTransformer, ViTConfig, check_fields

__all__ = [
    "config_from_hf",
    "from_hf_state_dict",
    "from_timm_state_dict",
    "hf_class_names",
    "to_hf_state_dict",
]

# vitbook block parameter -> (name in Hub files and transformers 4, name in transformers 5)
_HF_BLOCK = {
    "norm1": ("layernorm_before", "layernorm_before"),
    "attn.q": ("attention.attention.query", "attention.q_proj"),
    "attn.k": ("attention.attention.key", "attention.k_proj"),
    "attn.v": ("attention.attention.value", "attention.v_proj"),
    "attn.proj": ("attention.output.dense", "attention.o_proj"),
    "norm2": ("layernorm_after", "layernorm_after"),
    "mlp.fc1": ("intermediate.dense", "mlp.fc1"),
    "mlp.fc2": ("output.dense", "mlp.fc2"),
}
_HF_LAYER = (re.compile(r"^encoder\.layer\.(\d+)\.(.+)$"), re.compile(r"^layers\.(\d+)\.(.+)$"))
# vitbook top-level parameter -> name inside the Hugging Face ViTModel (before any "vit." prefix)
_HF_TOP = {
    "cls_token": "embeddings.cls_token",
    "pos_embed": "embeddings.position_embeddings",
    "patch_embed.proj.weight": "embeddings.patch_embeddings.projection.weight",
    "patch_embed.proj.bias": "embeddings.patch_embeddings.projection.bias",
    "norm.weight": "layernorm.weight",
    "norm.bias": "layernorm.bias",
}
_HF_HEAD = {"head.weight": "classifier.weight", "head.bias": "classifier.bias"}
# A distilled DeiT: its extra token, and its two heads in place of "classifier".
_HF_DEIT_TOP = {"dist_token": "embeddings.distillation_token"}
_HF_DEIT_HEAD = {
    "head.weight": "cls_classifier.weight",
    "head.bias": "cls_classifier.bias",
    "head_dist.weight": "distillation_classifier.weight",
    "head_dist.bias": "distillation_classifier.bias",
}
_WHY_NOT = {
    "pooler.": "the tanh 'pooler' of ViTModel, which ViTForImageClassification does not use",
    "embeddings.mask_token": "the mask token of masked image modelling",
    "classifier.": "the single head of DeiTForImageClassification, which reads the class token "
    "alone; vitbook's distilled ViT has two heads: convert a "
    "DeiTForImageClassificationWithTeacher",
}


def _names(model_type: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """(prefix, top-level names, head names) of a Hugging Face model type."""
    if model_type == "deit":
        return "deit.", {**_HF_TOP, **_HF_DEIT_TOP}, _HF_DEIT_HEAD
    return "vit.", _HF_TOP, _HF_HEAD


def _state_dict(name: str, value: object) -> dict[str, torch.Tensor]:
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a mapping of parameter names to tensors, got {type(value).__name__}; "
            "pass model.state_dict() or safetensors.torch.load_file(path)."
        )
    wrong = sorted(k for k, v in value.items() if not isinstance(v, torch.Tensor))
    if wrong:
        raise TypeError(f"{name} has entries that are not tensors: {wrong[:5]}; pass tensors.")
    return dict(value)


def _build(
    config: ViTConfig, tensors: dict[str, torch.Tensor], origin: dict[str, str]
) -> VisionTransformer:
    """Check names and shapes against ``config``, then load ``tensors`` into a new model (eval)."""
    _safetensors.check_shapes(config, {name: tuple(t.shape) for name, t in tensors.items()}, origin)
    wrong = sorted(name for name, t in tensors.items() if not t.is_floating_point())
    if wrong:
        raise TypeError(f"the state dict has tensors that are not floating point: {wrong[:5]}.")
    model = VisionTransformer(config)
    model.load_state_dict(tensors, strict=True)
    return model.eval()


def from_timm_state_dict(
    state_dict: Mapping[str, torch.Tensor], config: ViTConfig | str, **overrides: object
) -> VisionTransformer:
    """A ``VisionTransformer`` holding a timm ViT's weights, in eval mode.

    The names are the same, so keys and shapes are only checked. ``config``: a ``ViTConfig`` or a
    preset name such as ``"ViT-B/16"`` (a state dict does not say the number of heads).

    Raises:
        TypeError: ``state_dict`` not a mapping of tensors, ``config`` neither type.
        ValueError: unexpected keys (timm extras such as ``fc_norm``), missing keys, or shapes
            that do not fit.

    Example:
        >>> source = VisionTransformer(ViTConfig(img_size=32, patch_size=8, embed_dim=24,
        ...                                      depth=2, num_heads=3, num_classes=10))
        >>> model = from_timm_state_dict(source.state_dict(), source.config)
        >>> model.config == source.config, model.training
        (True, False)

    See chapter: A pretrained ViT.
    """
    tensors = _state_dict("state_dict", state_dict)
    if isinstance(config, str):
        config = ViTConfig.from_name(config, **overrides)
    elif isinstance(config, ViTConfig):
        check_fields(overrides)
        config = dataclasses.replace(config, **overrides)
    else:
        raise TypeError(
            f"config must be a ViTConfig or a preset name such as 'ViT-B/16', got "
            f"{type(config).__name__}."
        )
    unexpected = sorted(tensors.keys() - _safetensors.expected_shapes(config).keys())
    if unexpected:
        raise ValueError(
            f"the state dict has {len(unexpected)} key(s) that this ViT has no place for: "
            f"{unexpected}; vitbook builds the paper's ViT (no fc_norm, register tokens or layer "
            "scale). Nothing was loaded; remove those keys yourself only if you mean to drop them."
        )
    return _build(config, tensors, {})


def _hf_source(name: str, model_type: str) -> tuple[str, str] | None:
    """A Hugging Face key -> (vitbook name, q/k/v part or ""), or None for a foreign key."""
    prefix, tops, heads = _names(model_type)
    if name in heads.values():
        return next(ours for ours, theirs in heads.items() if theirs == name), ""
    inner = name.removeprefix(prefix)
    for ours, theirs in tops.items():
        if inner == theirs:
            return ours, ""
    for pattern in _HF_LAYER:
        match = pattern.match(inner)
        if match is None:
            continue
        index, rest = match.groups()
        for ours, layouts in _HF_BLOCK.items():
            for theirs in layouts:
                if rest.startswith(theirs + "."):
                    suffix = rest[len(theirs) + 1 :]
                    if ours in ("attn.q", "attn.k", "attn.v"):
                        return f"blocks.{index}.attn.qkv.{suffix}", ours[-1]
                    return f"blocks.{index}.{ours}.{suffix}", ""
    return None


def from_hf_state_dict(
    state_dict: Mapping[str, torch.Tensor], hf_config: object, **overrides: object
) -> VisionTransformer:
    """A ``VisionTransformer`` holding a Hugging Face ViT's or DeiT's weights, in eval mode.

    Takes a ``ViTForImageClassification``, ``ViTModel``, ``DeiTForImageClassificationWithTeacher``
    or ``DeiTModel`` state dict and its config (``transformers``' or ``config.json``'s dict).

    Raises:
        TypeError: the arguments are not a mapping of tensors and a config.
        ValueError: keys with no place (each named), missing parameters, shapes that do not fit,
            or a config vitbook cannot build.

    Example:
        >>> source = VisionTransformer(ViTConfig(img_size=32, patch_size=8, embed_dim=24,
        ...                                      depth=2, num_heads=3, num_classes=10))
        >>> hf = {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3,
        ...       "intermediate_size": 96, "image_size": 32, "patch_size": 8,
        ...       "layer_norm_eps": 1e-6}
        >>> model = from_hf_state_dict(to_hf_state_dict(source), hf)
        >>> images = torch.randn(2, 3, 32, 32)
        >>> bool((model(images) == source.eval()(images)).all())
        True

    See chapter: A pretrained ViT.
    """
    tensors = _state_dict("state_dict", state_dict)
    model_type = _model_type(_hf_dict(hf_config))
    converted: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    qkv_parts: dict[str, dict[str, torch.Tensor]] = {}
    unexpected = []
    for name, tensor in tensors.items():
        target = _hf_source(name, model_type)
        if target is None:
            unexpected.append(name)
            continue
        ours, part = target
        if part:
            qkv_parts.setdefault(ours, {})[part] = tensor
        elif ours in converted:
            raise ValueError(
                f"{name} and {origin[ours]} both map to {ours}; pass one model's state dict."
            )
        else:
            converted[ours], origin[ours] = tensor, name
    if unexpected:
        reasons = [
            f"{name} ({why})" if (why := _why_not(name, model_type)) else name
            for name in sorted(unexpected)
        ]
        raise ValueError(
            f"the state dict has {len(unexpected)} key(s) that a "
            f"{'DeiT' if model_type == 'deit' else 'ViT'} has no place for: {reasons}. "
            "Nothing was loaded; remove those keys yourself only if you mean to drop them."
        )
    for ours, parts in qkv_parts.items():
        lacking = [p for p in "qkv" if p not in parts]
        if lacking:
            raise ValueError(
                f"{ours} needs query, key and value; the state dict lacks "
                f"{[{'q': 'query', 'k': 'key', 'v': 'value'}[p] for p in lacking]} for it."
            )
        shapes = {p: tuple(t.shape) for p, t in parts.items()}
        if len(set(shapes.values())) != 1:
            raise ValueError(
                f"query, key and value for {ours} have shapes {shapes['q']}, {shapes['k']} and "
                f"{shapes['v']}; a ViT's three projections share one shape (D, D) or (D,)."
            )
        converted[ours] = torch.cat([parts["q"], parts["k"], parts["v"]])  # (3D, D) or (3D,)
        origin[ours] = f"{ours} (query, key, value)"
    num_classes = converted["head.weight"].shape[0] if "head.weight" in converted else 0
    config = config_from_hf(hf_config, num_classes=num_classes, **overrides)
    names = hf_class_names(hf_config)
    if num_classes and names and len(names) != num_classes:
        raise ValueError(
            f"the classifier has {num_classes} rows but id2label names {len(names)} classes; "
            "pass the config that belongs to these weights."
        )
    _, tops, heads = _names(model_type)
    for ours, theirs in {**tops, **heads}.items():
        origin.setdefault(ours, theirs)
    return _build(config, converted, origin)


def _why_not(name: str, model_type: str) -> str:
    inner = name.removeprefix(_names(model_type)[0])
    if model_type == "vit" and name.startswith("deit."):
        return "a DeiT's name: pass its DeiT config (model_type='deit')"
    return next((why for prefix, why in _WHY_NOT.items() if inner.startswith(prefix)), "")


def to_hf_state_dict(model: VisionTransformer) -> dict[str, torch.Tensor]:
    """A vitbook ViT's weights under the names of a Hugging Face ``ViTForImageClassification``.

    The inverse of :func:`from_hf_state_dict` (a distilled model gets DeiT's names).

    Raises:
        TypeError: ``model`` is not a ``VisionTransformer``.
        ValueError: its config has no Hugging Face ViT counterpart.

    Example:
        >>> model = VisionTransformer(ViTConfig(img_size=32, patch_size=8, embed_dim=24,
        ...                                     depth=1, num_heads=3, num_classes=10))
        >>> hf = to_hf_state_dict(model)
        >>> hf["vit.encoder.layer.0.attention.attention.key.weight"].shape
        torch.Size([24, 24])

    See chapter: A pretrained ViT.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"model must be a vitbook VisionTransformer, got {type(model).__name__}.")
    cfg = model.config
    if not (
        cfg.class_token and cfg.pos_embed == "learned" and cfg.pool == "cls"
        and cfg.stem == "patch"
    ):  # fmt: skip
        raise ValueError(
            "a Hugging Face ViT has a class token, learned positions, class-token pooling and "
            f"a patch embedding; this model has class_token={cfg.class_token}, "
            f"pos_embed={cfg.pos_embed!r}, pool={cfg.pool!r}, stem={cfg.stem!r}."
        )
    prefix, tops, heads = _names("deit" if cfg.distilled else "vit")
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach()
        if name in heads:
            out[heads[name]] = tensor
        elif name in tops:
            out[prefix + tops[name]] = tensor
        else:
            _, index, rest = name.split(".", 2)  # blocks.{i}.attn.qkv.weight
            layer = f"{prefix}encoder.layer.{index}."
            module, suffix = rest.rsplit(".", 1)
            if module == "attn.qkv":
                for part, chunk in zip("qkv", tensor.chunk(3), strict=True):
                    out[layer + _HF_BLOCK[f"attn.{part}"][0] + "." + suffix] = chunk.clone()
            else:
                out[layer + _HF_BLOCK[module][0] + "." + suffix] = tensor
    return out
