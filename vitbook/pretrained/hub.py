"""Trained weights: a small digits ViT shipped with the package, and real ViTs from the Hub.

The shipped models are safetensors files in ``vitbook/assets`` whose metadata hold the
``ViTConfig`` (``"config"``), the recipe and the measured accuracies. :func:`load_pretrained`
converts a Hugging Face ViT checkpoint (``pip install "vitbook[pretrained]"``) into vitbook's
``VisionTransformer``.

See chapters: Training and classification; A pretrained ViT; Fine-tuning a pretrained ViT.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from vitbook import _checks
from vitbook.pretrained import _safetensors
from vitbook.pretrained.checkpoints import (
    CIFAR10_VIT_PATH,
    DIGITS_VIT_CLS_PATH,
    DIGITS_VIT_PATH,
    load_model,
    read_metadata,
)
from vitbook.pretrained.convert import from_hf_state_dict, hf_class_names
from vitbook.vit import VisionTransformer

__all__ = [
    "DEFAULT_CHECKPOINT",
    "PretrainedUnavailableError",
    "PretrainedViT",
    "load_cifar10_vit",
    "load_digits_pretrained",
    "load_digits_vit",
    "load_pretrained",
]

DEFAULT_CHECKPOINT = "google/vit-base-patch16-224"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in order of preference
_DIGITS_VARIANTS = {"mean": DIGITS_VIT_PATH, "cls": DIGITS_VIT_CLS_PATH}


def load_digits_vit(
    device: str | torch.device = "cpu", *, variant: str = "mean"
) -> VisionTransformer:
    """The ViT trained on the digits of :func:`vitbook.data.load_digits_split`, in eval mode.

    It maps (B, 1, 8, 8) digits in [0, 1] to (B, 10) logits. ``variant="mean"``
    (``DIGITS_VIT_PATH``) mean-pools the patch tokens; ``"cls"`` reads the class token.

    Raises:
        ValueError: an unknown ``variant``.

    Example:
        >>> model = load_digits_vit()
        >>> model.config.grid_size, model.training
        ((4, 4), False)
        >>> model(torch.zeros(3, 1, 8, 8)).shape
        torch.Size([3, 10])
        >>> load_digits_vit(variant="cls").config.pool
        'cls'

    See chapter: Training and classification.
    """
    if variant not in _DIGITS_VARIANTS:
        raise ValueError(
            f"variant={variant!r} is not a shipped digits model; choose one of "
            f"{', '.join(repr(v) for v in _DIGITS_VARIANTS)}."
        )
    return load_model(_DIGITS_VARIANTS[variant], device=device)


def load_cifar10_vit(device: str | torch.device = "cpu") -> torch.nn.Sequential:
    """The ViT trained on CIFAR-10 on a CPU, in eval mode, taking photos in [0, 1].

    Returns ``nn.Sequential(Normalize(mean, std), VisionTransformer)``, mapping (B, 3, 32, 32)
    to (B, 10) logits in the order of :data:`vitbook.data.cifar.CIFAR10_CLASSES`; the file
    holds int8 weights (:func:`vitbook.pretrained.checkpoints.quantize_int8`).

    Example:
        >>> model = load_cifar10_vit()
        >>> model(torch.rand(2, 3, 32, 32)).shape, model.training, model[1].config.embed_dim
        (torch.Size([2, 10]), False, 192)

    See chapter: Real photos.
    """
    import json

    from vitbook.data.cifar import Normalize

    vit = load_model(CIFAR10_VIT_PATH, device=device)
    stats = json.loads(read_metadata(CIFAR10_VIT_PATH)["normalize"])
    return torch.nn.Sequential(Normalize(tuple(stats["mean"]), tuple(stats["std"])), vit).to(
        device
    ).eval()


class PretrainedUnavailableError(OSError):
    """The weights cannot be had here: no network and no cached copy, or no ``huggingface_hub``.

    See chapter: A pretrained ViT.
    """


@dataclass(frozen=True)
class PretrainedViT:
    """A trained ``VisionTransformer`` with what it takes to use it on pictures.

    Fields:
        model: the model, in eval mode.
        class_names: one name per logit.
        mean, std: per-channel normalisation, applied after scaling pixels to [0, 1].
        source: where the weights came from, for captions.

    Raises:
        TypeError / ValueError: on creation, a wrong model, names, ``mean`` or ``std``; in
            ``preprocess``, images that are not (B, C, H, W) floats.

    Example:
        >>> bundle = load_digits_pretrained()
        >>> bundle.class_names[:3], bundle.preprocess(torch.rand(2, 1, 16, 16)).shape
        (('0', '1', '2'), torch.Size([2, 1, 8, 8]))

    See chapter: A pretrained ViT.
    """

    model: VisionTransformer
    class_names: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.model, VisionTransformer):
            raise TypeError(
                f"model must be a vitbook VisionTransformer, got {type(self.model).__name__}."
            )
        cfg = self.model.config
        names = self.class_names
        if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"class_names must be a tuple of str, got {names!r:.80}.")
        if cfg.num_classes and len(names) != cfg.num_classes:
            raise ValueError(
                f"class_names has {len(names)} names but the model has num_classes="
                f"{cfg.num_classes} logits; give one name per logit."
            )
        for field in ("mean", "std"):
            values = getattr(self, field)
            if not isinstance(values, tuple) or len(values) != cfg.in_chans:
                raise ValueError(
                    f"{field}={values!r} must be a tuple of one number per channel, and the "
                    f"model has in_chans={cfg.in_chans}; a {field} of another length would "
                    "silently change the number of channels."
                )
            for c, value in enumerate(values):
                _checks.real(f"{field}[{c}]", value, low=0 if field == "std" else None,
                             open_low=True, fix=f"use {field} of the model's training data")

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1], (B, C, H, W) or (C, H, W), resized (bilinear, antialiased; crop
        first to keep the aspect) to (B, C, *``model.config.img_size``) and normalised."""
        if not isinstance(images, torch.Tensor) or not images.is_floating_point():
            raise TypeError(
                f"images must be a float tensor with values in [0, 1], got "
                f"{getattr(images, 'dtype', type(images).__name__)}; divide uint8 pixels by 255."
            )
        if images.dim() == 3:
            images = images.unsqueeze(0)
        channels = self.model.config.in_chans
        if images.dim() != 4 or images.shape[1] != channels:
            raise ValueError(
                f"images must be (B, {channels}, H, W) or ({channels}, H, W) for this model, got "
                f"shape {tuple(images.shape)}."
            )
        size = self.model.config.img_size
        if tuple(images.shape[-2:]) != size:
            images = F.interpolate(images, size=size, mode="bilinear", antialias=True)
        mean = torch.tensor(self.mean, dtype=images.dtype, device=images.device)
        std = torch.tensor(self.std, dtype=images.dtype, device=images.device)
        return (images - mean[:, None, None]) / std[:, None, None]


def load_digits_pretrained(device: str | torch.device = "cpu") -> PretrainedViT:
    """The shipped digits ViT (:func:`load_digits_vit`) as a :class:`PretrainedViT`.

    See chapter: A pretrained ViT.
    """
    model = load_digits_vit(device)
    return PretrainedViT(
        model=model,
        class_names=tuple(str(digit) for digit in range(10)),
        mean=(0.0,),
        std=(1.0,),
        source=f"vitbook digits ViT ({DIGITS_VIT_PATH.name})",
    )


def _hub_file(name: str, filename: str, **options: object) -> Path:
    """One file of a Hub repository, from the cache or downloaded into it."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import (
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as error:
        raise PretrainedUnavailableError(
            f"loading {name!r} from the Hugging Face Hub needs huggingface_hub: "
            'pip install "vitbook[pretrained]" (Colab has it already).'
        ) from error
    try:
        return Path(hf_hub_download(name, filename, **options))
    except LocalEntryNotFoundError as error:
        raise PretrainedUnavailableError(
            f"{filename} of {name!r} is neither in the Hugging Face cache nor downloadable: there "
            "is no network here, or HF_HUB_OFFLINE=1 is set. Run once with internet access "
            "(Colab, for example: ViT-B/16 is about 350 MB) and it is cached for later, or pass "
            "a local folder holding config.json and model.safetensors. Offline, "
            "load_digits_pretrained() gives the digits ViT shipped with vitbook."
        ) from error
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError) as error:
        raise ValueError(
            f"{name!r} (revision {options.get('revision') or 'main'}) is not a model repository "
            f"on the Hugging Face Hub that can be read, nor a local folder; check the name, for "
            f"example {DEFAULT_CHECKPOINT!r}. ({type(error).__name__})"
        ) from error


def _checkpoint_files(
    name: str, options: dict[str, object]
) -> tuple[dict, dict[str, torch.Tensor], dict]:
    """(config.json, the weights, preprocessor_config.json or {}) of a folder or Hub repository."""
    folder = Path(name)
    if folder.is_dir():
        def fetch(filename: str) -> Path:
            path = folder / filename
            if not path.is_file():
                raise FileNotFoundError(f"{path} does not exist")
            return path

        missing: tuple[type[Exception], ...] = (FileNotFoundError,)
    else:
        from huggingface_hub.utils import EntryNotFoundError

        def fetch(filename: str) -> Path:
            return _hub_file(name, filename, **options)

        missing = (EntryNotFoundError,)
    try:
        config = _safetensors.read_json(fetch("config.json"))
    except missing as error:
        raise ValueError(f"{name!r} has no config.json; it is not a transformers model.") from error
    weights = None
    for filename in WEIGHT_FILES:
        try:
            path = fetch(filename)
        except missing:
            continue
        if filename.endswith(".safetensors"):
            _safetensors.check_float(path, _safetensors.read_header(path)[1])
            weights = _safetensors.load_tensors(path)
        else:  # a pickle: weights_only refuses anything but tensors and plain containers
            weights = _safetensors.load_pickle(path)
        break
    if weights is None:
        raise ValueError(f"{name!r} has none of the weight files {list(WEIGHT_FILES)}.")
    try:
        processor = _safetensors.read_json(fetch("preprocessor_config.json"))
    except missing:
        processor = {}
    return config, weights, processor


def load_pretrained(
    name: str = DEFAULT_CHECKPOINT,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
    device: str | torch.device = "cpu",
    num_classes: int | None = None,
    class_names: tuple[str, ...] | None = None,
    **overrides: object,
) -> PretrainedViT:
    """A Hugging Face ViT checkpoint as vitbook's own ``VisionTransformer``, with class names.

    Reads ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``, tensors only) and
    ``preprocessor_config.json`` from a local folder or the Hub.

    Args:
        name: a Hub repository such as ``"google/vit-base-patch16-224"``, or a local folder.
        local_files_only: read the cache only, never the network.
        num_classes: a new zero-initialised head of this many classes; ``None`` keeps the
            checkpoint's.
        class_names: the new head's names; by default ``"class 0"``, ``"class 1"``, ...
        **overrides: ``ViTConfig`` fields to change, e.g. ``attn_impl="sdpa"``.

    Returns:
        A :class:`PretrainedViT`, ``mean`` and ``std`` from the preprocessor config (else 0.5).

    Raises:
        PretrainedUnavailableError: offline with no cached copy, or huggingface_hub missing.
        ValueError: an unknown repository or revision; missing, invalid or non-finite files; a
            pickle holding more than tensors; a config that does not match the weights;
            ``class_names`` without ``num_classes`` or not one per class.
        TypeError: a mistyped argument or config entry, or ``class_names`` as one str.

    Example:
        >>> import tempfile
        >>> try:
        ...     load_pretrained("google/vit-base-patch16-224", cache_dir=tempfile.mkdtemp(),
        ...                     local_files_only=True)
        ... except PretrainedUnavailableError as error:
        ...     print("offline:", error)
        offline: config.json of 'google/vit-base-patch16-224' is neither in the Hugging ...

    See chapter: A pretrained ViT.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"name must be a Hub repository such as {DEFAULT_CHECKPOINT!r} or a folder, got "
            f"{name!r}."
        )
    if num_classes is not None:
        _checks.integer("num_classes", num_classes, minimum=1, fix="e.g. num_classes=10")
    _new_class_names(class_names, num_classes)  # checked before any file is read
    options = {"revision": revision, "cache_dir": cache_dir, "local_files_only": local_files_only}
    hf_config, weights, processor = _checkpoint_files(name, options)
    device = _checks.device("device", device)
    try:
        model = from_hf_state_dict(weights, hf_config, **overrides)
    except (TypeError, ValueError) as err:
        raise _checks.same_kind(err)(f"the checkpoint {name!r} does not convert: {err}") from err
    if num_classes is not None:
        model.reset_classifier(num_classes)  # zero-initialised, as in the paper's Section 3.2
    classes = model.config.num_classes
    names = _new_class_names(class_names, num_classes) or hf_class_names(hf_config)
    names = names or tuple(f"class {i}" for i in range(classes))
    channels = model.config.in_chans
    mean, std = (
        _per_channel(name, key, processor.get(key, 0.5), channels)
        for key in ("image_mean", "image_std")
    )
    return PretrainedViT(model=model.to(device), class_names=names, mean=mean, std=std,
                         source=name)


def _new_class_names(
    class_names: tuple[str, ...] | None, num_classes: int | None
) -> tuple[str, ...] | None:
    """The names of a new head's classes, checked; None to keep the checkpoint's."""
    if isinstance(class_names, str):
        raise TypeError(
            f"class_names={class_names!r} is one str, which would be read as "
            f"{len(class_names)} names ({', '.join(map(repr, class_names[:3]))}"
            f"{', ...' if len(class_names) > 3 else ''}); pass a tuple with one name per "
            f"class, e.g. class_names=('cat', 'dog'), or ({class_names!r},) for one class."
        )
    if class_names is None:
        return None if num_classes is None else tuple(f"class {i}" for i in range(num_classes))
    if num_classes is None:
        raise ValueError(
            "class_names names the classes of a new head; pass num_classes too, e.g. "
            f"num_classes={len(class_names)}."
        )
    names = tuple(class_names)
    if len(names) != num_classes or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"class_names has {len(names)} entries for num_classes={num_classes}; give one "
            "str per class."
        )
    return names


def _per_channel(name: str, key: str, value: object, channels: int) -> tuple[float, ...]:
    """A preprocessor's mean or std: one number for every channel, or one per channel."""
    values = [value] * channels if isinstance(value, (int, float)) else value
    if not isinstance(values, list) or len(values) != channels:
        raise ValueError(
            f"{key}={value!r} in the preprocessor config of {name!r} must give one number per "
            f"channel, and the model has {channels}; fix the preprocessor_config.json."
        )
    for c, number in enumerate(values):
        _checks.real(f"{key}[{c}] of {name!r}", number, low=0 if key == "image_std" else None,
                     open_low=True, fix="fix the preprocessor_config.json")
    return tuple(float(number) for number in values)
