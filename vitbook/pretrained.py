"""A small ViT trained on scikit-learn's handwritten digits, shipped with the package.

The weights live in ``vitbook/assets/digits_vit.safetensors``: a safetensors file holds only
tensors and a JSON header, so loading it runs no code (unlike unpickling a ``torch.save`` file).
The header's metadata stores the ``ViTConfig`` fields (key ``"config"``) and the test accuracy
measured when the file was written (key ``"test_accuracy"``). ``scripts/train_digits_vit.py``
reproduces the file from scratch. safetensors is imported only when a model is loaded.

See chapter: Training and classification.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from vitbook.vit import VisionTransformer, ViTConfig

__all__ = ["DIGITS_VIT_PATH", "load_digits_vit", "read_metadata", "save_model"]

DIGITS_VIT_PATH = Path(__file__).parent / "assets" / "digits_vit.safetensors"


def save_model(model: VisionTransformer, path: str | Path, **metadata: str) -> None:
    """Write a ``VisionTransformer``'s weights and config to a safetensors file.

    Args:
        model: the model; its ``config`` is stored as JSON under the metadata key ``"config"``.
        path: the file to write.
        **metadata: further string entries for the header (for example a test accuracy).

    Raises:
        TypeError: ``model`` is not a ``VisionTransformer``, or a metadata value is not a str.

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
    from safetensors.torch import save_file

    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model must be a vitbook VisionTransformer, got {type(model).__name__}; "
            "save other modules with safetensors.torch.save_file."
        )
    wrong = {k: type(v).__name__ for k, v in metadata.items() if not isinstance(v, str)}
    if wrong:
        raise TypeError(f"metadata values must be str, got {wrong}; convert them with str().")
    config = json.dumps(dataclasses.asdict(model.config), sort_keys=True)
    tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    save_file(tensors, str(path), metadata={"config": config, **metadata})


def read_metadata(path: str | Path = DIGITS_VIT_PATH) -> dict[str, str]:
    """The string metadata in a safetensors file's header, without reading any tensor.

    Example:
        >>> json.loads(read_metadata()["config"])["patch_size"]
        2

    See chapter: Training and classification.
    """
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as file:
        return dict(file.metadata() or {})


def load_model(path: str | Path, device: str | torch.device = "cpu") -> VisionTransformer:
    """Rebuild a ``VisionTransformer`` from a file written by :func:`save_model`, in eval mode."""
    from safetensors.torch import load_file

    metadata = read_metadata(path)
    if "config" not in metadata:
        raise ValueError(
            f"{path} has no 'config' entry in its metadata; write it with vitbook's save_model."
        )
    model = VisionTransformer(ViTConfig(**json.loads(metadata["config"])))
    model.load_state_dict(load_file(str(path)), strict=True)  # every weight, nothing more
    return model.to(device).eval()


def load_digits_vit(device: str | torch.device = "cpu") -> VisionTransformer:
    """The ViT trained on the digits of :func:`vitbook.data.load_digits_split`, in eval mode.

    It reads 8 x 8 grey images (B, 1, 8, 8) in [0, 1] as a 4 x 4 grid of 2 x 2 patches and
    returns (B, 10) logits. Its accuracy on the 450 test digits is stored in the file's metadata
    (``read_metadata()["test_accuracy"]``) and checked by the tests to be at least 0.98.

    Args:
        device: where to put the model.

    Example:
        >>> model = load_digits_vit()
        >>> model.config.grid_size, model.training
        ((4, 4), False)
        >>> model(torch.zeros(3, 1, 8, 8)).shape
        torch.Size([3, 10])

    See chapter: Training and classification.
    """
    return load_model(DIGITS_VIT_PATH, device=device)
