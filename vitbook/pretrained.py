"""Trained weights: a small digits ViT shipped with the package, and real ViTs from the Hub.

**The shipped model.** The weights live in ``vitbook/assets/digits_vit.safetensors``: a
safetensors file holds only tensors and a JSON header, so loading it runs no code (unlike
unpickling a ``torch.save`` file). The header's metadata stores the ``ViTConfig`` fields (key
``"config"``) and the test accuracy measured when the file was written (key
``"test_accuracy"``). ``scripts/train_digits_vit.py`` reproduces the file from scratch. That model
pools by averaging its patch tokens; a second one, ``digits_vit_cls.safetensors``
(``load_digits_vit(variant="cls")``, made by ``scripts/train_digits_vit.py --variant cls``),
reads its prediction from the class token, so that rollout from the class token means something.
safetensors is imported only when a model is loaded.

**Pretrained ImageNet models.** :func:`load_pretrained` downloads a Hugging Face ViT checkpoint
such as ``google/vit-base-patch16-224`` (ViT-B/16, ImageNet-21k pre-training, ImageNet-1k
fine-tuning) with ``huggingface_hub``, the optional extra ``pip install "vitbook[pretrained]"``,
and converts it with :func:`vitbook.convert.from_hf_state_dict` into vitbook's own
``VisionTransformer``; the class names come from the checkpoint's ``id2label``. Downloads are
cached (``~/.cache/huggingface``). Without a network and without a cached copy it raises
:class:`PretrainedUnavailableError`, which says what to do. The converters of
:mod:`vitbook.convert` are re-exported here.

See chapters: Training and classification; A pretrained ViT.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from vitbook.convert import (
    config_from_hf,
    from_hf_state_dict,
    from_timm_state_dict,
    hf_class_names,
    to_hf_state_dict,
)
from vitbook.vit import VisionTransformer, ViTConfig

__all__ = [
    "DEFAULT_CHECKPOINT",
    "DIGITS_VIT_CLS_PATH",
    "DIGITS_VIT_PATH",
    "PretrainedUnavailableError",
    "PretrainedViT",
    "config_from_hf",
    "from_hf_state_dict",
    "from_timm_state_dict",
    "hf_class_names",
    "load_digits_pretrained",
    "load_digits_vit",
    "load_model",
    "load_pretrained",
    "read_metadata",
    "save_model",
    "to_hf_state_dict",
]

DIGITS_VIT_PATH = Path(__file__).parent / "assets" / "digits_vit.safetensors"
DIGITS_VIT_CLS_PATH = Path(__file__).parent / "assets" / "digits_vit_cls.safetensors"
_DIGITS_VARIANTS = {"mean": DIGITS_VIT_PATH, "cls": DIGITS_VIT_CLS_PATH}
DEFAULT_CHECKPOINT = "google/vit-base-patch16-224"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in order of preference


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


def load_digits_vit(
    device: str | torch.device = "cpu", *, variant: str = "mean"
) -> VisionTransformer:
    """The ViT trained on the digits of :func:`vitbook.data.load_digits_split`, in eval mode.

    It reads 8 x 8 grey images (B, 1, 8, 8) in [0, 1] as a 4 x 4 grid of 2 x 2 patches and
    returns (B, 10) logits. Its accuracy on the 450 test digits is stored in the file's metadata
    (``read_metadata(path)["test_accuracy"]``) and checked by the tests.

    Args:
        device: where to put the model.
        variant: ``"mean"``, the model the chapters study (``DIGITS_VIT_PATH``): mean pooling of
            the patch tokens, though it has a class token, which attention uses and the head
            never reads; test accuracy at least 0.98. ``"cls"`` (``DIGITS_VIT_CLS_PATH``): the
            same size, read out from the class token (``pool="cls"``), as in the ViT paper;
            test accuracy at least 0.97.

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


class PretrainedUnavailableError(OSError):
    """The weights cannot be had here: no network and no cached copy, or no ``huggingface_hub``.

    The message says what to do. A notebook can catch it and fall back to the shipped digits
    model (:func:`load_digits_pretrained`).

    See chapter: A pretrained ViT.
    """


@dataclass(frozen=True)
class PretrainedViT:
    """A trained ``VisionTransformer`` with what it takes to use it on pictures.

    Fields:
        model: the model, in eval mode.
        class_names: one name per logit.
        mean, std: per-channel normalisation the model was trained with, applied after scaling
            pixels to [0, 1].
        source: where the weights came from, for captions.

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

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1], (B, C, H, W) or (C, H, W), resized to the model's size, normalised.

        Resizing is bilinear with antialiasing and does not keep the aspect ratio; crop first
        (``vitbook.data.sample_image`` crops to the centre) to avoid stretching.

        Returns:
            (B, C, H', W') with (H', W') = ``model.config.img_size``.
        """
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

    Its images are grey digits (1 channel, 8 x 8) in [0, 1], used without normalisation; its
    class names are ``"0"`` to ``"9"``.

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
        config = json.loads(fetch("config.json").read_text(encoding="utf-8"))
    except missing as error:
        raise ValueError(f"{name!r} has no config.json; it is not a transformers model.") from error
    weights = None
    for filename in WEIGHT_FILES:
        try:
            path = fetch(filename)
        except missing:
            continue
        if filename.endswith(".safetensors"):
            from safetensors.torch import load_file

            weights = load_file(str(path))
        else:  # a pickle: weights_only refuses anything but tensors and plain containers
            weights = torch.load(path, map_location="cpu", weights_only=True)
        break
    if weights is None:
        raise ValueError(f"{name!r} has none of the weight files {list(WEIGHT_FILES)}.")
    try:
        processor = json.loads(fetch("preprocessor_config.json").read_text(encoding="utf-8"))
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
    **overrides: object,
) -> PretrainedViT:
    """A Hugging Face ViT checkpoint as vitbook's own ``VisionTransformer``, with class names.

    Reads ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``, unpickled with
    ``weights_only=True``) and ``preprocessor_config.json`` from a local folder or from the Hub,
    through the Hugging Face cache, and converts them with :func:`from_hf_state_dict`.

    Args:
        name: a Hub repository such as ``"google/vit-base-patch16-224"``, or a local folder
            (for example one written by ``ViTForImageClassification.save_pretrained``).
        revision: a branch, tag or commit of the repository; the default is ``main``.
        cache_dir: the Hugging Face cache to use instead of the default.
        local_files_only: never use the network; read the cache only.
        device: where to put the model.
        **overrides: ``ViTConfig`` fields to change, e.g. ``attn_impl="sdpa"``.

    Returns:
        A :class:`PretrainedViT`; ``mean`` and ``std`` come from the preprocessor config
        (0.5 per channel, the ViT image processor's default, when there is none).

    Raises:
        PretrainedUnavailableError: offline with no cached copy, or huggingface_hub missing.
        ValueError: an unknown repository or revision, missing files, or weights that do not
            convert (see :func:`from_hf_state_dict`).

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
    options = {"revision": revision, "cache_dir": cache_dir, "local_files_only": local_files_only}
    hf_config, weights, processor = _checkpoint_files(name, options)
    model = from_hf_state_dict(weights, hf_config, **overrides).to(device)
    classes = model.config.num_classes
    names = hf_class_names(hf_config) or tuple(f"class {i}" for i in range(classes))
    channels = model.config.in_chans
    mean = tuple(float(v) for v in processor.get("image_mean", [0.5] * channels))
    std = tuple(float(v) for v in processor.get("image_std", [0.5] * channels))
    return PretrainedViT(model=model, class_names=names, mean=mean, std=std, source=name)
