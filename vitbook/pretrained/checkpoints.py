"""vitbook's own model files: a ``VisionTransformer``'s weights and config in one safetensors file.

:func:`save_model` stores the ``ViTConfig`` as JSON under the metadata key ``"config"``, beside
the caller's string entries; :func:`load_model` checks the header against the tensors first.

See chapter: Training and classification.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from vitbook import _checks
from vitbook._files import ASSETS
from vitbook.pretrained import _safetensors
from vitbook.vit import VisionTransformer, ViTConfig, check_fields

__all__ = [
    "CIFAR10_VIT_PATH",
    "DIGITS_VIT_CLS_PATH",
    "DIGITS_VIT_PATH",
    "RESERVED_METADATA",
    "ExistingFileError",
    "dequantize_int8",
    "load_model",
    "quantize_int8",
    "read_metadata",
    "read_weights",
    "save_model",
]

DIGITS_VIT_PATH = ASSETS / "digits_vit.safetensors"
DIGITS_VIT_CLS_PATH = ASSETS / "digits_vit_cls.safetensors"
CIFAR10_VIT_PATH = ASSETS / "cifar10_vit.safetensors"
RESERVED_METADATA = ("config", "int8")
SCALE = ".int8_scale"  # the tensor beside an int8 weight that holds its rows' scales


def quantize_int8(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Every weight matrix as 8-bit integers with one fp32 scale per output row.

    ``q = round(w / s)`` in -127 .. 127, ``s = max |w[o]| / 127`` rounded up to 16 significant
    bits (so ``q * s`` is exact in fp32 and quantizing is idempotent); other tensors stay.
    Returns ``(tensors, names)``: scales under ``name + ".int8_scale"``; the names made int8.

    Example:
        >>> packed, names = quantize_int8({"fc.weight": torch.tensor([[0.5, -1.0], [2.0, 0.1]]),
        ...                                "fc.bias": torch.zeros(2)})
        >>> names, packed["fc.weight"].tolist()
        (['fc.weight'], [[63, -127], [127, 6]])

    See chapter: Real photos.
    """
    packed: dict[str, torch.Tensor] = {}
    names = []
    for name, tensor in tensors.items():
        if name.endswith("weight") and tensor.dim() >= 2:
            rows = tensor.detach().float().flatten(1)  # (out, rest)
            scale = (rows.abs().amax(dim=1) / 127).clamp_min(2.0**-100)
            mantissa, exponent = torch.frexp(scale)  # scale = mantissa * 2**exponent
            scale = torch.ldexp(torch.ceil(mantissa * 2**16) / 2**16, exponent)  # 16 bits, up
            quantized = torch.round(rows / scale[:, None]).clamp(-127, 127)
            packed[name] = quantized.to(torch.int8).reshape(tensor.shape).contiguous()
            packed[name + SCALE] = scale.contiguous()
            names.append(name)
        else:
            packed[name] = tensor
    return packed, names


def dequantize_int8(tensors: dict[str, torch.Tensor], names: list[str]) -> dict[str, torch.Tensor]:
    """The weights of :func:`quantize_int8` back as fp32, ``q * s`` row by row.

    Example:
        >>> packed, names = quantize_int8({"fc.weight": torch.tensor([[0.5, -1.0]])})
        >>> dequantize_int8(packed, names)["fc.weight"].tolist()
        [[0.4960777759552002, -1.0000298023223877]]

    See chapter: Real photos.
    """
    out = {name: t for name, t in tensors.items() if not name.endswith(SCALE)}
    for name in names:
        scale = tensors[name + SCALE].float()
        shape = (-1,) + (1,) * (tensors[name].dim() - 1)
        out[name] = tensors[name].float() * scale.reshape(shape)
    return out


class ExistingFileError(FileExistsError, ValueError):
    """``save_model`` would replace a file that is not a vitbook model (pass ``overwrite=True``).

    See chapter: Training and classification.
    """


def save_model(
    model: VisionTransformer,
    path: str | Path,
    *,
    overwrite: bool = False,
    int8: bool = False,
    **metadata: str,
) -> None:
    """Write a ``VisionTransformer``'s weights and config to a safetensors file, atomically.

    Replaces a vitbook model file, any other only with ``overwrite=True``. ``int8=True``: weight
    matrices by :func:`quantize_int8`. ``**metadata``: string entries (not ``"config"``).

    Raises:
        TypeError: not a ``VisionTransformer``, a metadata value not a str, ``path`` not a path.
        ValueError: a reserved key, a model on the meta device, ``path`` a folder.
        ExistingFileError: ``path`` exists and is not a vitbook model.

    Example:
        >>> import tempfile
        >>> cfg = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10,
        ...                 embed_dim=16, depth=1, num_heads=2)
        >>> path = Path(tempfile.mkdtemp()) / "tiny.safetensors"
        >>> save_model(VisionTransformer(cfg), path, note="untrained")
        >>> read_metadata(path)["note"]
        'untrained'

    See chapter: Training and classification.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model must be a vitbook VisionTransformer, got {type(model).__name__}; "
            "save other modules with safetensors.torch.save_file."
        )
    path = _safetensors.file_path("path", path)
    _checks.boolean("overwrite", overwrite)
    _checks.boolean("int8", int8)
    wrong = {k: type(v).__name__ for k, v in metadata.items() if not isinstance(v, str)}
    if wrong:
        raise TypeError(f"metadata values must be str, got {wrong}; convert them with str().")
    reserved = sorted(set(metadata) & set(RESERVED_METADATA))
    if reserved:
        raise ValueError(
            f"metadata keys {reserved} are reserved: save_model stores the model's config there; "
            "choose other names, e.g. note=..."
        )
    state = model.state_dict()
    if any(t.device.type == "meta" for t in state.values()):
        raise ValueError(
            "model is on the meta device (shapes without values); build it on the CPU or a GPU "
            "and train or load its weights before saving."
        )
    if path.is_dir():
        raise ValueError(
            f"path {path} is a folder; pass a file name such as {path / 'model.safetensors'}."
        )
    if path.exists() and not overwrite and not _is_model_file(path):
        raise ExistingFileError(
            f"{path} exists and is not a vitbook model file; save_model does not replace it. "
            "Pass overwrite=True to replace it anyway, or choose another path."
        )
    config = json.dumps(dataclasses.asdict(model.config), sort_keys=True)
    tensors = {name: t.detach().cpu().contiguous() for name, t in state.items()}
    if int8:
        tensors, names = quantize_int8(tensors)
        metadata = {**metadata, "int8": json.dumps(names)}
    _safetensors.write_atomically(tensors, path, {"config": config, **metadata})


def _int8_names(metadata: dict[str, str], header: dict) -> list[str]:
    """The weights a file stores as int8 (its ``"int8"`` entry), each with its row scales."""
    names = json.loads(metadata.get("int8", "[]"))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"the 'int8' entry must be a JSON list of tensor names, got {names!r}")
    for name in names:
        shape, dtype = header.get(name, ((), "absent"))
        scale_shape, scale_dtype = header.get(name + SCALE, ((), "absent"))
        if dtype != "I8" or scale_dtype != "F32" or tuple(scale_shape) != tuple(shape[:1]):
            raise ValueError(
                f"{name} is listed as int8 but is {dtype} with scales {scale_dtype} of shape "
                f"{tuple(scale_shape)}; an int8 weight of shape {tuple(shape)} needs one F32 "
                f"scale per row in {name + SCALE}"
            )
    extra = [k for k in header if k.endswith(SCALE) and k[: -len(SCALE)] not in names]
    if extra:
        raise ValueError(f"scales {extra} belong to no int8 weight")
    return names


def _is_model_file(path: Path) -> bool:
    try:
        config = json.loads(_safetensors.read_header(path)[0]["config"])
    except (ValueError, KeyError):  # not safetensors, no config, bad JSON
        return False
    return isinstance(config, dict)


def read_metadata(path: str | Path = DIGITS_VIT_PATH) -> dict[str, str]:
    """The string metadata in a safetensors file's header, without reading any tensor.

    Raises:
        TypeError: ``path`` is not a path.
        FileNotFoundError: there is no such file.
        ValueError: the file is a folder or not a readable safetensors file (named).

    Example:
        >>> json.loads(read_metadata()["config"])["patch_size"]
        2

    See chapter: Training and classification.
    """
    return _safetensors.read_header(_safetensors.file_path("path", path))[0]


def read_weights(path: str | Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """Any safetensors file's string metadata and its tensors, on the CPU, as saved.

    For models that are not a ``VisionTransformer`` (a teacher CNN); the caller checks the fit.

    Raises:
        TypeError: ``path`` is not a path.
        FileNotFoundError: there is no such file.
        ValueError: a folder, or not a readable safetensors file (named).

    Example:
        >>> metadata, tensors = read_weights(DIGITS_VIT_PATH)
        >>> tensors["cls_token"].shape == (1, 1, json.loads(metadata["config"])["embed_dim"])
        True

    See chapter: Can a ViT beat the CNN that taught it?
    """
    path = _safetensors.file_path("path", path)
    metadata, _ = _safetensors.read_header(path)
    return metadata, _safetensors.load_tensors(path)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> VisionTransformer:
    """Rebuild a ``VisionTransformer`` from a file written by :func:`save_model`, in eval mode.

    Raises:
        TypeError: ``path`` is not a path, or ``device`` not a device.
        FileNotFoundError: there is no such file.
        ValueError: not safetensors, no or bad ``"config"``, tensors that do not match it,
            non-float or non-finite weights; naming the file.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "digits.safetensors"
        >>> save_model(load_model(DIGITS_VIT_PATH), path)
        >>> load_model(path).config.grid_size
        (4, 4)

    See chapter: Training and classification.
    """
    path = _safetensors.file_path("path", path)
    device = _checks.device("device", device)
    metadata, header = _safetensors.read_header(path)
    if "config" not in metadata:
        raise ValueError(
            f"{path} has no 'config' entry in its metadata; write it with vitbook's save_model."
        )
    try:
        fields = json.loads(metadata["config"])
        if not isinstance(fields, dict):
            raise TypeError(f"the config is a JSON {type(fields).__name__}, not an object")
        check_fields(fields)
        config = ViTConfig(**fields)
        int8 = _int8_names(metadata, header)
        shapes = {name: shape for name, (shape, _) in header.items() if not name.endswith(SCALE)}
        _safetensors.check_shapes(config, shapes, {})
    except (json.JSONDecodeError, TypeError, ValueError) as err:
        raise ValueError(f"{path} does not hold a vitbook model that can be loaded: {err}") from err
    _safetensors.check_float(path, {k: v for k, v in header.items() if k not in int8})
    tensors = dequantize_int8(_safetensors.load_tensors(path), int8)
    model = VisionTransformer(config)
    model.load_state_dict(tensors, strict=True)  # names and shapes were checked above
    return model.to(device).eval()
