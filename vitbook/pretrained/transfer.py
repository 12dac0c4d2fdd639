"""Transfer: a pretrained ViT adapted to a new task, as the ViT paper fine-tunes (Section 3.2).

:meth:`vitbook.VisionTransformer.reset_classifier` attaches a new zero-initialised head; then
full fine-tuning uses :data:`FINETUNE_RECIPE` (the paper's Appendix B.1.1), a linear probe
:func:`freeze_body`, a higher resolution :func:`change_resolution`, and the checkpoint's own
resizing and normalisation :func:`with_preprocessing` (:class:`Preprocess`).

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
from vitbook.pretrained.hub import PretrainedViT
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

# The paper's fine-tuning recipe (Appendix B.1.1, Table 4) as fit's fields; batch size, steps and
# learning rate depend on the run.
FINETUNE_RECIPE: dict[str, object] = {
    "optimizer": "sgd",
    "weight_decay": 0.0,
    "clip_grad_norm": 1.0,
}


@dataclass(frozen=True)
class Frozen:
    """What :func:`freeze_body` froze and left trainable, by name; ``*_numbers`` count elements.

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

    Every parameter outside ``head`` (and ``head_dist``) gets ``requires_grad=False``
    (``model.requires_grad_(True)`` undoes it); returns a :class:`Frozen`.

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

    :meth:`vitbook.pretrained.PretrainedViT.preprocess` as a layer; ``size`` is (H, W) or one int.
    Shapes: (B, C, H_in, W_in) -> (B, C, H, W).

    Raises:
        ValueError: ``mean`` and ``std`` of different lengths, a non-positive ``std`` or size;
            in ``forward``, images of another number of channels.
        TypeError: in ``forward``, images that are not floating point.

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

    ``config`` is the model's. Shapes: (B, C, H_in, W_in) -> (B, num_classes).

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
    """``pretrained.model`` (its weights shared) behind its own resizing and normalisation:
    images in [0, 1] of any size in.

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

    Learned position embeddings are interpolated in 2D by ``mode``
    (:func:`vitbook.resample_pos_embed`), a sine-cosine table rebuilt; device, dtype, mode and
    frozen parameters are kept.

    Raises:
        TypeError: ``model`` is not a ``VisionTransformer``.
        ValueError: a size that is not a multiple of the patch size, an unknown ``mode``, or a
            model with relative position biases.

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
