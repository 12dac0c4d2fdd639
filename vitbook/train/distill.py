"""Knowledge distillation as DeiT does it: a frozen teacher's predictions as a second target.

A distilled ViT (``ViTConfig(distilled=True)``) returns class-token and distillation-token
logits in training; :class:`DistillationLoss` gives each its target, as DeiT's ``losses.py``
(Touvron et al., 2021, Section 4)::

    L = (1 - alpha) CE(Z_cls, y) + alpha L_distill(Z_dist, Z_t)

    "hard":  L_distill = CE(Z_dist, argmax_c Z_t)                 (y_t, the teacher's decision)
    "soft":  L_distill = tau^2 KL(softmax(Z_t / tau) || softmax(Z_dist / tau))
    "none":  L_distill = CE(Z_dist, y): no teacher, both heads on the labels

with Z_t the teacher's logits on the images the student saw, y the labels (or soft targets) and
CE a cross-entropy with optional label smoothing. The KL is sum_c p_t log(p_t / p_s), as DeiT's
code, divided by B * n_cls (``kl_reduction="mean"``) or by B (``"batchmean"``). Why tau^2 and
the untrained head of ``"none"``: the chapter *Can a ViT beat the CNN that taught it?*.

The teacher is kept in eval mode and frozen; its logits are computed without gradients in the
caller's autocast. A later non-finite teacher logit makes the loss NaN.

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks

__all__ = ["DISTILLATION_TYPES", "KL_REDUCTIONS", "DistillationLoss", "head_agreement"]

DISTILLATION_TYPES = ("none", "soft", "hard")
KL_REDUCTIONS = ("mean", "batchmean")  # DeiT's B * n_cls, or the per-image KL (sum / B)


class DistillationLoss(nn.Module):
    """DeiT's distillation loss around a frozen teacher: ``loss(outputs, targets, images)``, a
    float32 scalar.

    Args:
        teacher: maps the student's images (B, C, H, W) to (B, n_cls) logits (e.g. a trained
            :class:`vitbook.baselines.DigitsCNN`), never the student itself; frozen for good.
            Unused with ``"none"`` (usually None).
        distillation_type: ``"none"``, ``"soft"`` or ``"hard"`` (see the module docstring).
        alpha: the distillation term's weight, in [0, 1] (DeiT: 0.5); with ``"none"``, the
            distillation head's share of the labels' loss.
        tau: the soft temperature, > 0 (DeiT: 1.0).
        kl_reduction: ``"mean"`` over B * n_cls (DeiT's) or ``"batchmean"`` (n_cls times larger).
        label_smoothing: of the cross-entropy on the true labels (DeiT: 0.1).
        single_head: True for a model with one output that gets both terms (the paper's
            Table 3 without a distillation token).

    Call:
        outputs: two (B, n_cls) tensors, or one with ``single_head=True`` or ``"none"``.
        targets: (B,) class indices, or (B, n_cls) soft targets.
        images: the (B, C, H, W) batch the student saw, augmentation included.

    Raises:
        TypeError: a teacher that is not an ``nn.Module``; outputs of the wrong form.
        ValueError: an unknown type or reduction, ``alpha`` or ``tau`` out of range; teacher
            logits of another shape, or not finite (first call); a teacher in train mode; a
            student that depends on the teacher; student logits without gradients.

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
        kl_reduction: str = "mean",
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
        self.kl_reduction = _checks.choice("kl_reduction", kl_reduction, KL_REDUCTIONS)
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
        self._student_checked = False  # checked once, at the first call that trains
        self._teacher_checked = False  # its first logits are checked once, in eager mode
        if teacher is not None and self.distillation_type != "none":
            teacher.eval()

    def extra_repr(self) -> str:
        return (
            f"distillation_type={self.distillation_type!r}, alpha={self.alpha}, tau={self.tau}, "
            f"label_smoothing={self.label_smoothing}, single_head={self.single_head}, "
            f"kl_reduction={self.kl_reduction!r}"
        )

    def train(self, mode: bool = True) -> DistillationLoss:
        """The loss has no training behaviour of its own; the teacher stays in eval mode."""
        super().train(mode)
        if self.teacher is not None and self.distillation_type != "none":
            self.teacher.eval()
        return self

    def forward(
        self,
        outputs: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        targets: torch.Tensor,
        images: torch.Tensor,
    ) -> torch.Tensor:
        logits, logits_dist = self._split(outputs)
        self._check_gradients(logits, logits_dist)
        if not self._student_checked and logits.requires_grad and self.teacher is not None:
            if not torch.compiler.is_compiling() and self.distillation_type != "none":
                self._check_student(logits, logits_dist)  # then freezes the teacher
        # The loss in float32 even when the forward pass ran in bf16 or fp16, as fit does.
        base = F.cross_entropy(
            logits.float(), targets, label_smoothing=self.label_smoothing
        )  # fmt: skip
        if self.distillation_type == "none":
            if logits_dist is logits:  # one output: the labels' loss alone
                return base
            # No teacher: the distillation head learns the labels too (the token's control).
            on_labels = F.cross_entropy(
                logits_dist.float(), targets, label_smoothing=self.label_smoothing
            )  # fmt: skip
            return (1 - self.alpha) * base + self.alpha * on_labels
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
        if not self._teacher_checked and not torch.compiler.is_compiling():
            self._check_teacher(teacher_logits)  # where the teacher's data enter: once
        student, teacher = logits_dist.float(), teacher_logits.float()
        if self.distillation_type == "hard":
            distill = F.cross_entropy(student, teacher.argmax(dim=1))
            # argmax turns a NaN logit into a class; make the loss NaN instead, for fit to stop
            distill = torch.where(teacher.isfinite().all(), distill, torch.nan)
        else:
            tau = self.tau
            kl = F.kl_div(
                F.log_softmax(student / tau, dim=1),  # the student's log p_s
                F.log_softmax(teacher / tau, dim=1),  # the teacher's log p_t
                reduction="sum",
                log_target=True,
            )  # sum over images and classes of p_t (log p_t - log p_s)
            # DeiT divides by B * n_cls (PyTorch's legacy mean); batchmean by B.
            per = student.numel() if self.kl_reduction == "mean" else student.shape[0]
            distill = kl * (tau * tau) / per
        return (1 - self.alpha) * base + self.alpha * distill

    def _check_gradients(self, logits: torch.Tensor, logits_dist: torch.Tensor) -> None:
        """Refuse logits that carry no gradient while gradients are on: nothing would train."""
        if not torch.is_grad_enabled() or logits.requires_grad or logits_dist.requires_grad:
            return
        raise ValueError(
            "the student's logits carry no gradient, so nothing would train: none of the "
            "parameters behind them requires a gradient (a teacher given to DistillationLoss is "
            "frozen at its first training call, so the student must not have been one; give "
            "each loss a separate, trained teacher). To compute the loss without training, "
            "call it under torch.no_grad()."
        )

    def _check_student(self, logits: torch.Tensor, logits_dist: torch.Tensor) -> None:
        """Refuse a student whose autograd graph reaches the teacher's parameters (no values
        read); freeze the teacher."""
        teacher_params = {id(p) for p in self.teacher.parameters()}
        seen, stack, shared = set(), [logits.grad_fn, logits_dist.grad_fn], 0
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            shared += id(getattr(node, "variable", None)) in teacher_params
            stack.extend(next_node for next_node, _ in node.next_functions)
        if shared:
            raise ValueError(
                f"the student's logits depend on {shared} of the teacher's parameters: the "
                "teacher is the student, or shares its weights, and training would freeze what "
                "it trains. Give DistillationLoss a separate, trained teacher, e.g. "
                "teacher = copy.deepcopy(trained_model), and train another model as the student."
            )
        self.teacher.requires_grad_(False)  # the teacher learns nothing, for good
        self._student_checked = True

    def _check_teacher(self, teacher_logits: torch.Tensor) -> None:
        """Refuse non-finite first teacher logits, and probabilities for soft targets; one read."""
        bad = ~torch.isfinite(teacher_logits)
        values = teacher_logits.detach().float()
        rows = (values >= 0).all(dim=1) & ((values.sum(dim=1) - 1).abs() <= 1e-2)
        found = torch.stack([bad.any(), rows.all()]).tolist()  # the read
        if found[1] and self.distillation_type == "soft":
            raise ValueError(
                f"the teacher returned probabilities (each row >= 0, summing to 1) for all "
                f"{teacher_logits.shape[0]} images of the first batch, not logits: soft "
                "distillation takes softmax(teacher / tau), which would flatten them. Return "
                "the logits (drop its softmax), or their log (log-probabilities are logits)."
            )
        if found[0]:
            images = int(bad.any(dim=1).sum())
            raise ValueError(
                f"the teacher returned non-finite logits (NaN or inf) for {images} of "
                f"{teacher_logits.shape[0]} images in the first batch; its decisions on them "
                "would be arbitrary targets. Check the teacher before distilling from it (its "
                "weights, a damaged file, an overflow in fp16: try precision='bf16' or 'fp32')."
            )
        self._teacher_checked = True

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
    """How a distilled ViT's two heads decide on ``images`` (B, C, H, W), in eval mode (left so).

    Returns:
        ``{"agreement": share of images where the heads agree, "class", "distillation":
        (B,) each head's predictions, "mean": (B,) their mean logits' (the model's output)}``.

    Raises:
        TypeError / ValueError: not a distilled ViT; images not a finite float tensor.

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
