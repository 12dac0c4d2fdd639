"""Knowledge distillation as DeiT does it: a frozen teacher's predictions as a second target.

A distilled ViT (``ViTConfig(distilled=True)``) returns two sets of logits in training, one from
its class token and one from its distillation token. :class:`DistillationLoss` gives each its
target, as the DeiT authors' ``losses.py`` does (Touvron et al., 2021, Section 4)::

    L = (1 - alpha) CE(Z_cls, y) + alpha L_distill(Z_dist, Z_t)

    "none":  L_distill = 0 and alpha is not used: L = CE(Z_cls, y)
    "hard":  L_distill = CE(Z_dist, argmax_c Z_t)                 (y_t, the teacher's decision)
    "soft":  L_distill = tau^2 KL(softmax(Z_t / tau) || softmax(Z_dist / tau)), summed over the
             batch and the classes and divided by B * n_cls, as the authors' code does (a
             per-class mean: 1 / n_cls of the usual per-image KL)

with Z_t the teacher's logits on the same augmented images the student saw, y the labels (or
soft targets after MixUp) and CE a cross-entropy with optional label smoothing. DeiT's defaults
are ``alpha=0.5`` and ``tau=1.0``; with ``"hard"`` and ``alpha=0.5`` this is the paper's equation
for hard-label distillation, (CE(Z_cls, y) + CE(Z_dist, y_t)) / 2.

The loss is a callable ``criterion(outputs, targets, images) -> loss`` for
:func:`vitbook.train.fit`. It holds the teacher frozen and in eval mode, and keeps it there: the
teacher's parameters stop requiring gradients, ``loss.train()`` does not reach it, and a teacher
switched back to train mode by hand is refused on the next call. Its logits are computed under
``torch.no_grad()`` inside whatever autocast the caller runs the loss in (``fit`` runs it in the
forward pass's), so teacher and student see the same numbers.

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks

__all__ = ["DISTILLATION_TYPES", "DistillationLoss", "head_agreement"]

DISTILLATION_TYPES = ("none", "soft", "hard")


class DistillationLoss(nn.Module):
    """DeiT's distillation loss around a frozen teacher: ``loss(outputs, targets, images)``.

    Args:
        teacher: any module mapping the student's images (B, C, H, W) to (B, n_cls) logits, e.g.
            a trained :class:`vitbook.baselines.DigitsCNN`. It is switched to eval mode and its
            parameters to ``requires_grad=False`` here, for good. None only with ``"none"``.
        distillation_type: ``"none"``, ``"soft"`` or ``"hard"`` (see the module docstring).
        alpha: the distillation term's weight, in [0, 1]; DeiT uses 0.5.
        tau: the soft distillation's temperature, > 0; DeiT uses 1.0.
        label_smoothing: of the cross-entropy on the true labels (DeiT: 0.1); the teacher's hard
            labels get none, as in DeiT.
        single_head: False (the default) for a distilled ViT, whose train-mode output is the
            tuple ``(class logits, distillation logits)``; True for a model with one output
            that gets both terms: the "usual" distillation the paper compares its token with
            (Table 3, the rows without a distillation token).

    Call:
        outputs: the student's output in train mode: a tuple of two (B, n_cls) tensors, or one
            (B, n_cls) tensor with ``single_head=True`` (or with ``"none"``).
        targets: (B,) class indices, or (B, n_cls) soft targets (after MixUp).
        images: the (B, C, H, W) batch the student saw, augmentation included: the teacher
            labels the same pictures.

    Returns:
        A scalar loss (float32).

    Raises:
        TypeError: a teacher that is not an ``nn.Module``; outputs that are not what the student
            should return (a single tensor where the distillation token's logits belong: build
            the student with ``distilled=True`` and keep it in train mode).
        ValueError: an unknown type, ``alpha`` or ``tau`` out of range; teacher logits of
            another shape than the student's; a teacher found in train mode.

    Example:
        >>> from vitbook import VisionTransformer, ViTConfig
        >>> teacher = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        >>> loss = DistillationLoss(teacher, "hard")
        >>> student = VisionTransformer(ViTConfig(img_size=8, patch_size=2, in_chans=1,
        ...     num_classes=10, embed_dim=16, depth=1, num_heads=2, distilled=True))
        >>> images, labels = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
        >>> value = loss(student.train()(images), labels, images)
        >>> value.shape, teacher.training, teacher[1].weight.requires_grad
        (torch.Size([]), False, False)

    See chapter: Can a ViT beat the CNN that taught it?
    """

    def __init__(
        self,
        teacher: nn.Module | None,
        distillation_type: str = "hard",
        *,
        alpha: float = 0.5,
        tau: float = 1.0,
        label_smoothing: float = 0.0,
        single_head: bool = False,
    ) -> None:
        super().__init__()
        self.distillation_type = _checks.choice(
            "distillation_type", distillation_type, DISTILLATION_TYPES
        )
        self.alpha = _checks.real("alpha", alpha, low=0, high=1, fix="DeiT uses 0.5")
        self.tau = _checks.real("tau", tau, low=0, open_low=True, fix="DeiT uses 1.0")
        self.label_smoothing = _checks.real(
            "label_smoothing", label_smoothing, low=0, high=1, open_high=True,
            fix="DeiT uses 0.1",
        )  # fmt: skip
        self.single_head = _checks.boolean("single_head", single_head)
        if teacher is None and distillation_type != "none":
            raise TypeError(
                f"distillation_type={distillation_type!r} needs a teacher; pass a trained "
                "model, or use distillation_type='none' to train on the labels alone."
            )
        if teacher is not None and not isinstance(teacher, nn.Module):
            raise TypeError(
                f"teacher must be a torch.nn.Module mapping images to logits, got "
                f"{type(teacher).__name__}."
            )
        self.teacher = teacher
        if teacher is not None:
            teacher.requires_grad_(False)
            teacher.eval()

    def extra_repr(self) -> str:
        return (
            f"distillation_type={self.distillation_type!r}, alpha={self.alpha}, tau={self.tau}, "
            f"label_smoothing={self.label_smoothing}, single_head={self.single_head}"
        )

    def train(self, mode: bool = True) -> DistillationLoss:
        """The loss has no training behaviour of its own; the teacher stays in eval mode."""
        super().train(mode)
        if self.teacher is not None:
            self.teacher.eval()
        return self

    def forward(
        self,
        outputs: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        targets: torch.Tensor,
        images: torch.Tensor,
    ) -> torch.Tensor:
        logits, logits_dist = self._split(outputs)
        # The loss in float32 even when the forward pass ran in bf16 or fp16, as fit does.
        base = F.cross_entropy(
            logits.float(), targets, label_smoothing=self.label_smoothing
        )  # fmt: skip
        if self.distillation_type == "none":
            return base
        if self.teacher.training:
            raise ValueError(
                "the teacher is in train mode (teacher.train() was called after the loss was "
                "built); its dropout and batch-norm statistics would change its targets from "
                "batch to batch. Call teacher.eval()."
            )
        with torch.no_grad():  # the teacher learns nothing; inside the caller's autocast
            teacher_logits = self.teacher(images)  # (B, n_cls)
        if teacher_logits.shape != logits_dist.shape:
            raise ValueError(
                f"the teacher's logits have shape {tuple(teacher_logits.shape)} but the "
                f"student's {tuple(logits_dist.shape)}; teacher and student must classify the "
                "same images into the same classes."
            )
        student, teacher = logits_dist.float(), teacher_logits.float()
        if self.distillation_type == "hard":
            distill = F.cross_entropy(student, teacher.argmax(dim=1))
        else:
            tau = self.tau
            distill = F.kl_div(
                F.log_softmax(student / tau, dim=1),
                F.log_softmax(teacher / tau, dim=1),
                reduction="sum",
                log_target=True,
            ) * (tau * tau) / student.numel()  # DeiT divides by B * n_cls
        return (1 - self.alpha) * base + self.alpha * distill

    def _split(
        self, outputs: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(class logits, distillation logits) from the student's output, shapes checked."""
        if isinstance(outputs, (tuple, list)) and len(outputs) == 2 and not self.single_head:
            logits, logits_dist = outputs
        elif isinstance(outputs, torch.Tensor) and (
            self.single_head or self.distillation_type == "none"
        ):
            logits = logits_dist = outputs
        elif isinstance(outputs, torch.Tensor):
            raise TypeError(
                "the student returned one tensor of logits, but the distillation token's "
                "logits belong in a second one: build the student with "
                "ViTConfig(distilled=True) and call it in train mode (it returns (class, "
                "distillation) logits there), or pass single_head=True to put both terms on "
                "the one head."
            )
        else:
            raise TypeError(
                "outputs must be the student's logits: a (class, distillation) pair of "
                f"(B, n_cls) tensors, or one tensor with single_head=True; got "
                f"{type(outputs).__name__}"
                f"{' of length ' + str(len(outputs)) if isinstance(outputs, (tuple, list)) else ''}"
                f"{' with single_head=True' if self.single_head else ''}."
            )
        for name, value in (("class logits", logits), ("distillation logits", logits_dist)):
            _checks.floating(name, value, "(B, n_cls)")
            if value.ndim != 2 or value.shape != logits.shape:
                raise ValueError(
                    f"{name} have shape {tuple(value.shape)}; both heads give (B, n_cls) "
                    f"logits of one shape (the class logits have {tuple(logits.shape)})."
                )
        return logits, logits_dist


@torch.no_grad()
def head_agreement(model: nn.Module, images: torch.Tensor, *, batch_size: int = 256) -> dict:
    """How a distilled ViT's two heads decide on ``images``: each alone, and together.

    The model runs in eval mode (and is left there); for each image the class head's and the
    distillation head's predicted classes are compared.

    Args:
        model: a distilled :class:`vitbook.VisionTransformer`.
        images: (B, C, H, W) float images, finite.
        batch_size: images per forward pass.

    Returns:
        ``{"agreement": share of images where the heads predict the same class,
        "class": (B,) the class head's predictions, "distillation": (B,) the distillation
        head's, "mean": (B,) the prediction of their mean logits (the model's output)}``.

    Raises:
        TypeError / ValueError: a model that is not a distilled ViT, images that are not a
            finite float tensor.

    Example:
        >>> from vitbook import VisionTransformer, ViTConfig
        >>> model = VisionTransformer(ViTConfig(img_size=8, patch_size=2, in_chans=1,
        ...     num_classes=10, embed_dim=16, depth=1, num_heads=2, distilled=True))
        >>> result = head_agreement(model, torch.randn(5, 1, 8, 8))
        >>> 0.0 <= result["agreement"] <= 1.0, result["class"].shape
        (True, torch.Size([5]))

    See chapter: Can a ViT beat the CNN that taught it?
    """
    if getattr(getattr(model, "config", None), "distilled", False) is not True:
        raise TypeError(
            f"model must be a distilled vitbook VisionTransformer (ViTConfig(distilled=True)), "
            f"got {type(model).__name__}"
            f"{' with distilled=False' if hasattr(model, 'config') else ''}."
        )
    images = _checks.floating("images", images, "(B, C, H, W)")
    _checks.finite("images", images)
    _checks.integer("batch_size", batch_size, minimum=1, fix="use e.g. batch_size=256")
    model.eval()
    device = next(model.parameters()).device
    parts = {"class": [], "distillation": [], "mean": []}
    for chunk in images.split(batch_size):
        logits, logits_dist = model.forward_heads(model.forward_features(chunk.to(device)))
        parts["class"].append(logits.argmax(dim=1).cpu())
        parts["distillation"].append(logits_dist.argmax(dim=1).cpu())
        parts["mean"].append((logits + logits_dist).argmax(dim=1).cpu())
    result = {name: torch.cat(values) for name, values in parts.items()}
    agreement = (result["class"] == result["distillation"]).float().mean().item()
    return {"agreement": agreement, **result}
