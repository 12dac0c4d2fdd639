"""Reading and writing weight files safely: every failure names the file and says what to do.

A safetensors header (names, dtypes, shapes, metadata) is read and checked before any tensor is;
a ``.bin`` pickle is loaded with ``torch.load(..., weights_only=True)``, whose refusal is
reported in our own words.

See chapters: Training and classification; A pretrained ViT.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from vitbook.stem import conv_stem_layers
from vitbook.vit import VisionTransformer, ViTConfig

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def file_path(name: str, value: object) -> Path:
    """A ``str`` or ``os.PathLike`` as a ``Path``."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise TypeError(f"{name} must be a file path (str or pathlib.Path), got {value!r}.")
    return Path(value)


def _existing(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; check the path.")
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a weight file; pass the file inside it.")


def read_header(path: Path) -> tuple[dict[str, str], dict[str, tuple[tuple[int, ...], str]]]:
    """A safetensors file's metadata and ``{name: (shape, dtype)}``, without reading tensors."""
    from safetensors import SafetensorError, safe_open

    _existing(path)
    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = dict(file.metadata() or {})
            tensors = {}
            for name in file.keys():
                view = file.get_slice(name)
                tensors[name] = (tuple(view.get_shape()), view.get_dtype())
    except (SafetensorError, OSError) as err:
        raise ValueError(
            f"{path} is not a readable safetensors file ({err}); it may be truncated or of "
            "another format. Write it again, e.g. with vitbook.pretrained.save_model."
        ) from err
    return metadata, tensors


def check_float(path: Path, tensors: Mapping[str, tuple[tuple[int, ...], str]]) -> None:
    """Model weights are floating point; an integer or bool tensor in a weight file is foreign."""
    wrong = sorted(f"{name}: {dtype}" for name, (_, dtype) in tensors.items()
                   if dtype not in FLOAT_DTYPES)
    if wrong:
        raise ValueError(
            f"{path} holds tensors that are not floating point: {wrong[:5]}; it is not a file of "
            "ViT weights."
        )


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file (on the CPU), each checked to be finite."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    _existing(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ValueError(
            f"{path} is not a readable safetensors file ({err}); it may be truncated or of "
            "another format."
        ) from err
    check_finite(path, tensors)
    return tensors


def check_finite(path: object, tensors: Mapping[str, torch.Tensor]) -> None:
    bad = sorted(
        name
        for name, t in tensors.items()
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    )
    if bad:
        raise ValueError(
            f"{path} holds NaN or inf in {bad[:5]}; a model with such weights gives NaN outputs. "
            "Use a file written before training diverged."
        )


def load_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A ``torch.save`` file of tensors, unpickled with ``weights_only=True``, on the CPU."""
    _existing(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        refused = re.search(r"(?:Unsupported global|Unsupported operand)[^\n.]*", str(err))
        detail = f" ({refused.group(0).strip()})" if refused else ""
        # Not chained: torch's message suggests turning the safety off, which vitbook never does.
        raise ValueError(
            f"{path} holds Python objects other than tensors{detail}, and unpickling them could "
            "run code, so vitbook refuses to load it. Use the checkpoint's model.safetensors "
            "instead, or convert the file to safetensors in a place where you trust it."
        ) from None
    except (RuntimeError, EOFError, OSError) as err:
        raise ValueError(
            f"{path} is not a readable PyTorch weight file ({type(err).__name__}); it may be "
            "truncated or of another format. Download it again."
        ) from err


def read_json(path: Path) -> dict:
    """A JSON object (a dict) from a file, or a ValueError naming the file."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); fix or replace the file.") from err
    if not isinstance(value, dict):
        raise ValueError(
            f"{path} holds a JSON {type(value).__name__}, not an object of settings; it is not "
            "a model config."
        )
    return value


def write_atomically(
    tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]
) -> None:
    """Write a safetensors file next to ``path``, then move it into place in one step.

    A reader sees the old file or the new one; the file gets a plain write's permissions (an
    existing file keeps its own) and is on disk before it replaces the old one
    (:func:`vitbook._files.write_with`).
    """
    from safetensors.torch import save_file

    from vitbook._files import write_with

    if not path.parent.is_dir():
        raise FileNotFoundError(
            f"the folder {path.parent} does not exist; create it first, e.g. with "
            "Path(...).mkdir(parents=True)."
        )
    write_with(path, lambda temporary: save_file(tensors, str(temporary), metadata=metadata))


def _num_tensors(config: ViTConfig) -> int:
    """How many tensors a VisionTransformer's state dict holds, in closed form."""
    block = 11 + int(config.qkv_bias)  # norm1 2, qkv 1-2, proj 2, norm2 2, fc1 2, fc2 2
    stem = 0
    if config.stem == "conv":  # conv 1 and norm 2 per 3 x 3 layer
        stem = 3 * len(conv_stem_layers(config.patch_size, config.embed_dim, config.stem_depth))
    heads = 2 if config.distilled else 1
    return (
        2  # patch_embed.proj
        + stem
        + int(config.class_token)
        + int(config.distilled)
        + int(config.pos_embed == "learned")
        + config.depth * block
        + 2  # norm
        + (2 * heads if config.num_classes > 0 else 0)
    )


def _check_size(config: ViTConfig, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Refuse a config out of all proportion to the weights, in time independent of the config.

    Runs before anything the config's size is built.
    """
    count, values = len(shapes), sum(math.prod(shape) for shape in shapes.values())
    if _num_tensors(config) > 2 * count + 16:
        raise ValueError(
            f"the config needs {_num_tensors(config):,} tensors (depth={config.depth}), but the "
            f"weights hold {count}; the config does not belong to these weights."
        )
    if config.pos_embed == "sincos2d":  # a table that no tensor vouches for: keep it in proportion
        table = config.num_tokens * config.embed_dim
        if table > max(values, 2**24):
            raise ValueError(
                f"the config asks for a {config.num_tokens} x {config.embed_dim} sine-cosine "
                f"table ({table:,} values) beside weights of {values:,} values; img_size="
                f"{config.img_size} does not belong to these weights."
            )


def expected_shapes(config: ViTConfig) -> dict[str, torch.Size]:
    """The state-dict keys and shapes of a VisionTransformer, without allocating its weights."""
    with torch.device("meta"):
        model = VisionTransformer(config)
    return {name: t.shape for name, t in model.state_dict().items()}


def check_shapes(
    config: ViTConfig, shapes: Mapping[str, tuple[int, ...]], origin: Mapping[str, str]
) -> None:
    """Check that ``shapes`` has exactly the names and shapes of ``config``'s state dict."""
    _check_size(config, shapes)
    expected = expected_shapes(config)
    missing = sorted(origin.get(name, name) for name in expected.keys() - shapes.keys())
    if missing:
        raise ValueError(
            f"the state dict lacks {len(missing)} parameter(s) that the model needs: {missing}; "
            "check that it is a complete ViT checkpoint and that the config matches it."
        )
    wrong = [
        f"{origin.get(name, name)}: {tuple(shape)}, expected {tuple(expected[name])}"
        for name, shape in shapes.items()
        if name in expected and tuple(shape) != tuple(expected[name])
    ]
    unexpected = sorted(origin.get(name, name) for name in shapes.keys() - expected.keys())
    if unexpected:
        raise ValueError(
            f"the state dict has {len(unexpected)} key(s) that this ViT has no place for: "
            f"{unexpected}; nothing was loaded."
        )
    if wrong:
        raise ValueError(
            f"shapes do not match the config {config}: {wrong}. Use the config the "
            "checkpoint was trained with; for another image size, resize pos_embed with "
            "vitbook.resample_pos_embed after loading."
        )
    values = sum(math.prod(shape) for shape in shapes.values())
    if values != config.num_parameters():  # the closed form agrees with the shapes checked above
        raise ValueError(
            f"the weights hold {values:,} values but the config needs "
            f"{config.num_parameters():,}; the config does not belong to these weights."
        )
