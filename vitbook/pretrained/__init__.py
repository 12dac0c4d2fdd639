"""Trained weights: the digits ViTs shipped with the package, and real ViTs from the Hub.

- :mod:`vitbook.pretrained.hub`: the shipped digits and CIFAR-10 ViTs (``load_digits_vit``,
  ``load_cifar10_vit``) and Hugging Face's ViTs (``load_pretrained``, ``PretrainedViT``).
- :mod:`vitbook.pretrained.checkpoints`: vitbook's own model files (weights and config in one
  safetensors file), read and written by :mod:`vitbook.pretrained._safetensors` with checked errors.
- :mod:`vitbook.pretrained.convert` and :mod:`vitbook.pretrained.hf_config`: timm's and Hugging
  Face's state dicts and configurations.
- :mod:`vitbook.pretrained.transfer`: fine-tuning tools (a linear probe, a new resolution).

See chapter: A pretrained ViT.
"""

from vitbook.pretrained.checkpoints import (
    CIFAR10_VIT_PATH,
    DIGITS_VIT_CLS_PATH,
    DIGITS_VIT_PATH,
    ExistingFileError,
    load_model,
    read_metadata,
    save_model,
)
from vitbook.pretrained.convert import (
    config_from_hf,
    from_hf_state_dict,
    from_timm_state_dict,
    hf_class_names,
    to_hf_state_dict,
)
from vitbook.pretrained.hub import (
    DEFAULT_CHECKPOINT,
    PretrainedUnavailableError,
    PretrainedViT,
    load_cifar10_vit,
    load_digits_pretrained,
    load_digits_vit,
    load_pretrained,
)

__all__ = [
    "CIFAR10_VIT_PATH",
    "DEFAULT_CHECKPOINT",
    "DIGITS_VIT_CLS_PATH",
    "DIGITS_VIT_PATH",
    "ExistingFileError",
    "PretrainedUnavailableError",
    "PretrainedViT",
    "config_from_hf",
    "from_hf_state_dict",
    "from_timm_state_dict",
    "hf_class_names",
    "load_cifar10_vit",
    "load_digits_pretrained",
    "load_digits_vit",
    "load_model",
    "load_pretrained",
    "read_metadata",
    "save_model",
    "to_hf_state_dict",
]
