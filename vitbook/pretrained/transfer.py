"""Transfer: a pretrained ViT adapted to a new task, as the ViT paper fine-tunes.

The paper pre-trains on a large data set and then, for each downstream task, "removes the
pre-trained prediction head and attaches a zero-initialized D x K feedforward layer" (Section
3.2); :meth:`vitbook.VisionTransformer.reset_classifier` does that, and
``load_pretrained(..., num_classes=K)`` does it on loading. From there:

- **Full fine-tuning** trains every weight, with the recipe of the paper's Appendix B.1.1 and
  Table 4 (:data:`FINETUNE_RECIPE`: SGD with momentum 0.9, no weight decay, gradients clipped at
  global norm 1, cosine decay; the learning rate chosen on a validation split).
- **A linear probe** trains the new head only: :func:`freeze_body` switches off the gradients
  of everything else and says what it froze.
- **A higher resolution** keeps the patch size, so the grid of patches grows and the learned
  position embeddings are interpolated in 2D to the new grid (Section 3.2):
  :func:`change_resolution`.
- **The checkpoint's preprocessing**: a pretrained model expects pixels resized to its size and
  normalised with the mean and standard deviation it was trained with (0.5 and 0.5 per channel
  for google/vit-base-patch16-224, not ImageNet's statistics). :func:`with_preprocessing` puts
  both inside the model (:class:`Preprocess`), so that training and evaluation take photos of
  any size in [0, 1], 32 x 32 CIFAR-10 photos included, and the resizing runs on the GPU.

See chapter: Fine-tuning a pretrained ViT.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks
from vitbook.data.cifar import Normalize
from vitbook.positional import resample_pos_embed
from vitbook.pretrained import PretrainedViT
from vitbook.vit import VisionTransformer

__all__ = [
    "FINETUNE_RECIPE",
    "Frozen",
    "Preprocess",
    "Preprocessed",
    "change_resolution",
    "freeze_body",
    "with_preprocessing",
]

# The paper's fine-tuning recipe (Appendix B.1.1 and Table 4) as arguments of vitbook.train.fit:
# SGD with momentum 0.9 (fit's "sgd"), no weight decay, gradient clipping at global norm 1, and
# fit's cosine decay. The paper's batch of 512, its 10,000 steps for CIFAR-10 and its learning
# rates {0.001, 0.003, 0.01, 0.03} (chosen on 2% of the training set) depend on the run.
FINETUNE_RECIPE: dict[str, object] = {
    "optimizer": "sgd",
    "weight_decay": 0.0,
    "clip_grad_norm": 1.0,
}


@dataclass(frozen=True)
class Frozen:
    """What :func:`freeze_body` froze and what it left trainable, by parameter name.

    Fields:
        frozen, trainable: parameter names, in the model's order.
        frozen_numbers, trainable_numbers: how many numbers (elements) each group holds.

    Example:
        >>> Frozen(("pos_embed",), ("head.weight", "head.bias"), 96, 4).trainable_share
        0.04

    See chapter: Fine-tuning a pretrained ViT.
    """

    frozen: tuple[str, ...]
    trainable: tuple[str, ...]
    frozen_numbers: int
    trainable_numbers: int

    @property
    def trainable_share(self) -> float:
        return self.trainable_numbers / (self.frozen_numbers + self.trainable_numbers)

    def __str__(self) -> str:
        parts = sorted({name.split(".")[0] for name in self.frozen}, key=self._order)
        return (
            f"frozen: {len(self.frozen)} tensors, {self.frozen_numbers:,} numbers\n"
            f"  ({', '.join(parts)})\n"
            f"trainable: {', '.join(self.trainable)}, {self.trainable_numbers:,} numbers\n"
            f"  ({self.trainable_share:.2%} of the model)"
        )

    def _order(self, part: str) -> int:
        return next(i for i, name in enumerate(self.frozen) if name.split(".")[0] == part)


def freeze_body(model: VisionTransformer) -> Frozen:
    """Leave only the classification head trainable: the model becomes a linear probe.

    Every parameter outside ``model.head`` (and ``model.head_dist`` of a distilled model)
    gets ``requires_grad=False``, so
    :func:`vitbook.train.fit` (which trains only parameters that require gradients) changes the
    head alone, and the backward pass stops at it. The frozen body still runs in train mode
    under ``fit``; with the book's models (no dropout) that changes nothing. Undo it with
    ``model.requires_grad_(True)``.

    Args:
        model: a ``VisionTransformer`` with a head (``num_classes > 0``), usually one just
            given a new zero-initialised head by ``reset_classifier``.

    Returns:
        A :class:`Frozen` listing both groups; ``print`` it to see them.

    Raises:
        TypeError: ``model`` is not a ``VisionTransformer``.
        ValueError: the model has no head (``num_classes=0``).

    Example:
        >>> from vitbook import ViTConfig
        >>> model = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8,
        ...                                     depth=1, num_heads=2, num_classes=10))
        >>> model.reset_classifier(3)
        >>> frozen = freeze_body(model)
        >>> frozen.trainable, frozen.trainable_numbers
        (('head.weight', 'head.bias'), 27)
        >>> [name for name, p in model.named_parameters() if p.requires_grad]
        ['head.weight', 'head.bias']

    See chapter: Fine-tuning a pretrained ViT.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model must be a vitbook VisionTransformer, got {type(model).__name__}; for a "
            "model wrapped by with_preprocessing, pass its .model."
        )
    if model.config.num_classes == 0:
        raise ValueError(
            "the model has num_classes=0, so no head to train; give it one with "
            "model.reset_classifier(K) before freezing the body."
        )
    frozen, trainable = [], []
    frozen_numbers = trainable_numbers = 0
    for name, parameter in model.named_parameters():
        if name.startswith(("head.", "head_dist.")):
            parameter.requires_grad_(True)
            trainable.append(name)
            trainable_numbers += parameter.numel()
        else:
            parameter.requires_grad_(False)
            frozen.append(name)
            frozen_numbers += parameter.numel()
    return Frozen(tuple(frozen), tuple(trainable), frozen_numbers, trainable_numbers)


class Preprocess(Normalize):
    """Resize images to a model's size, then normalise each channel: a checkpoint's preprocessing.

    A :class:`vitbook.data.cifar.Normalize` with a resize in front.

    The same computation as :meth:`vitbook.pretrained.PretrainedViT.preprocess` (bilinear
    resizing with antialiasing, then ``(x - mean) / std``), as a layer: put in front of a model,
    it lets training and evaluation feed pixels in [0, 1] at any size, and it runs on the
    model's device. ``mean`` and ``std`` are non-persistent buffers, so a state dict holds only
    the model's weights.

    Args:
        size: (H, W) the model takes, or one int for a square.
        mean, std: one number per channel (``std`` > 0).

    Shapes:
        forward: (B, C, H_in, W_in) -> (B, C, H, W).

    Raises:
        ValueError: ``mean`` and ``std`` of different lengths, a non-positive ``std`` or size;
            in ``forward``, images of another number of channels.
        TypeError: in ``forward``, images that are not floating point (before any resizing).

    Example:
        >>> preprocess = Preprocess(4, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
        >>> out = preprocess(torch.ones(2, 3, 2, 2))  # 2 x 2 white pixels
        >>> out.shape, out.unique().tolist()
        (torch.Size([2, 3, 4, 4]), [1.0])

    See chapter: Fine-tuning a pretrained ViT.
    """

    def __init__(
        self, size: int | tuple[int, int], mean: tuple[float, ...], std: tuple[float, ...]
    ) -> None:
        super().__init__(mean, std)
        self.size = _checks.pair("size", size)

    def extra_repr(self) -> str:
        return f"size={self.size}, {super().extra_repr()}"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self._check(images)  # before the resize, which would fail on 8-bit photos inside torch
        if tuple(images.shape[-2:]) != self.size:
            images = F.interpolate(images, size=self.size, mode="bilinear", antialias=True)
        return super().forward(images)  # (B, C, H, W)


class Preprocessed(nn.Module):
    """A ``VisionTransformer`` behind its :class:`Preprocess`: pixels in [0, 1] in, logits out.

    ``config`` is the model's, so :func:`vitbook.train.fit` and ``evaluate`` check labels
    against its number of classes. Made by :func:`with_preprocessing`.

    Shapes:
        forward: (B, C, H_in, W_in) in [0, 1] -> (B, num_classes).

    Example:
        >>> from vitbook import ViTConfig
        >>> vit = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8,
        ...                                   depth=1, num_heads=2, num_classes=3))
        >>> model = Preprocessed(Preprocess(8, (0.5,) * 3, (0.5,) * 3), vit)
        >>> model(torch.rand(2, 3, 32, 32)).shape, model.config.num_classes
        (torch.Size([2, 3]), 3)

    See chapter: Fine-tuning a pretrained ViT.
    """

    def __init__(self, preprocess: Preprocess, model: VisionTransformer) -> None:
        super().__init__()
        if not isinstance(preprocess, Preprocess) or not isinstance(model, VisionTransformer):
            raise TypeError(
                "Preprocessed takes a Preprocess and a VisionTransformer, got "
                f"{type(preprocess).__name__} and {type(model).__name__}."
            )
        self.preprocess = preprocess
        self.model = model

    @property
    def config(self):  # noqa: ANN201 - a ViTConfig, read by fit and evaluate
        return self.model.config

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(images))


def with_preprocessing(pretrained: PretrainedViT) -> Preprocessed:
    """The model of ``pretrained`` with its own resizing and normalisation in front.

    The result shares its weights with ``pretrained.model`` (training one trains the other),
    takes images in [0, 1] of any size (32 x 32 CIFAR-10 photos for a 224 px ViT-B/16: resized
    to 224 x 224 inside, on the model's device) and normalises them with the checkpoint's
    ``mean`` and ``std``, read from its ``preprocessor_config.json`` by ``load_pretrained``.

    Raises:
        TypeError: ``pretrained`` is not a :class:`vitbook.pretrained.PretrainedViT`.

    Example:
        >>> from vitbook.pretrained import load_digits_pretrained
        >>> bundle = load_digits_pretrained()
        >>> model = with_preprocessing(bundle)
        >>> images = torch.rand(2, 1, 16, 16)
        >>> torch.equal(model(images), bundle.model(bundle.preprocess(images)))
        True

    See chapter: Fine-tuning a pretrained ViT.
    """
    if not isinstance(pretrained, PretrainedViT):
        raise TypeError(
            f"pretrained must be a PretrainedViT (from load_pretrained), got "
            f"{type(pretrained).__name__}."
        )
    cfg = pretrained.model.config
    parameter = next(pretrained.model.parameters())
    preprocess = Preprocess(cfg.img_size, pretrained.mean, pretrained.std)
    return Preprocessed(preprocess.to(parameter.device), pretrained.model)


def change_resolution(
    model: VisionTransformer, img_size: int | tuple[int, int], *, mode: str = "bicubic"
) -> VisionTransformer:
    """A copy of ``model`` for another image size: same patches, more (or fewer) of them.

    As in the paper's Section 3.2: the patch size stays, so a larger image gives a larger grid
    (Gh, Gw) and a longer sequence; every weight is copied, and learned position embeddings
    are interpolated in 2D from the old grid to the new one by
    :func:`vitbook.resample_pos_embed` (the class token's row is kept). A fixed sine-cosine
    table is simply made for the new grid. The copy is on the same device, in the same dtype
    and mode, with the same parameters frozen (``requires_grad``); the original is not changed.

    Args:
        model: the model to copy.
        img_size: the new (H, W), or one int, a multiple of the patch size.
        mode: how to interpolate: ``"bicubic"`` (timm's default), ``"bilinear"`` or
            ``"nearest"``.

    Returns:
        A new ``VisionTransformer`` whose config differs in ``img_size`` only.

    Raises:
        TypeError: ``model`` is not a ``VisionTransformer``.
        ValueError: a size that is not a multiple of the patch size, an unknown ``mode``, or a
            model with relative position biases (their tables are sized for one grid).

    Example:
        >>> from vitbook import ViTConfig
        >>> model = VisionTransformer(ViTConfig(img_size=8, patch_size=2, in_chans=1,
        ...                                     embed_dim=8, depth=1, num_heads=2))
        >>> bigger = change_resolution(model, 12)
        >>> model.pos_embed.shape, bigger.pos_embed.shape, bigger.config.grid_size
        (torch.Size([1, 17, 8]), torch.Size([1, 37, 8]), (6, 6))

    See chapter: Fine-tuning a pretrained ViT.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"model must be a vitbook VisionTransformer, got {type(model).__name__}.")
    _checks.choice("mode", mode, ("bicubic", "bilinear", "nearest"))
    cfg = model.config
    if cfg.pos_embed == "relative":
        raise ValueError(
            "change_resolution does not resize relative position bias tables "
            "(pos_embed='relative'); use a model with learned or sincos2d positions."
        )
    new_cfg = dataclasses.replace(cfg, img_size=img_size)  # validates the size
    reference = next(model.parameters())
    copy = VisionTransformer(new_cfg).to(device=reference.device, dtype=reference.dtype)
    state = model.state_dict()
    if cfg.pos_embed == "learned":
        state["pos_embed"] = resample_pos_embed(
            state["pos_embed"], new_cfg.grid_size, num_prefix_tokens=cfg.num_prefix_tokens,
            old_grid_size=cfg.grid_size, mode=mode,
        )  # (1, N, D) -> (1, N', D)  # fmt: skip
    copy.load_state_dict(state)
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    for name, parameter in copy.named_parameters():  # a frozen tensor stays frozen
        parameter.requires_grad_(name not in frozen)
    return copy.train(model.training)
