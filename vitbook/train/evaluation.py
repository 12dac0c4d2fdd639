"""Running a trained classifier: its predictions and its accuracy.

``predict`` (probabilities) and ``evaluate`` (accuracy) run a model in eval mode, without
gradients, in chunks, on its device; ``Evaluator`` is ``fit``'s accuracy after each epoch.

See chapter: Training and classification.
"""

from __future__ import annotations

import torch
from torch import nn

from vitbook import _checks
from vitbook.train._shared import (
    as_module,
    autocast,
    device_of,
    logits_of,
    num_classes_of,
    resolve_precision,
)

__all__ = ["Evaluator", "evaluate", "predict"]

Data = tuple[torch.Tensor, torch.Tensor]


@torch.no_grad()
def predict(
    model: nn.Module,
    images: torch.Tensor,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> torch.Tensor:
    """Class probabilities of ``images`` (B, C, H, W): (B, n_cls) on the CPU, model in eval mode.

    The model is left in eval mode; ``precision`` as in :func:`fit`; float32 probabilities.

    Raises:
        TypeError / ValueError: images not a finite floating-point tensor, ``batch_size`` not
            a positive int, an unknown device or precision; outputs not (B, n_cls) logits.

    Example:
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
        >>> probabilities = predict(model, torch.zeros(5, 1, 2, 2))
        >>> probabilities.shape, torch.allclose(probabilities.sum(dim=1), torch.ones(5))
        (torch.Size([5, 3]), True)

    See chapter: Training and classification.
    """
    if not isinstance(images, torch.Tensor) or not torch.is_floating_point(images):
        raise TypeError(
            "images must be a floating-point tensor (B, C, H, W), got "
            f"{getattr(images, 'dtype', type(images).__name__)}; convert with .float()."
        )
    _checks.finite("images", images)
    _checks.integer("batch_size", batch_size, minimum=1, fix="use e.g. batch_size=256")
    device = device_of(model, device)
    precision = resolve_precision(precision, device)
    return _probabilities(model, images, batch_size, device, precision).cpu()


def _probabilities(
    model: nn.Module, images: torch.Tensor, batch_size: int, device: torch.device, precision: str
) -> torch.Tensor:
    """(B, n_cls) float32 probabilities on ``device``, unchecked: the callers check."""
    model.eval()
    chunks = []
    with torch.no_grad(), autocast(device, precision):
        for chunk in images.split(batch_size):
            logits = logits_of(model(chunk.to(device)))  # (b, n_cls); a tuple's mean
            _logit_rows(logits, len(chunk))
            chunks.append((logits if precision == "fp32" else logits.float()).softmax(dim=1))
    return torch.cat(chunks)  # (B, n_cls)


def _logit_rows(logits: object, images: int) -> None:
    """Refuse logits that are not (images, n_cls) (a shape check: no GPU sync)."""
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or len(logits) != images:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"the model returned {shape} for {images} images; predicting needs (B, n_cls) "
            "logits, one row per image. End the model with a Linear layer to n_cls classes, "
            "or drop an extra axis in its forward (logits[:, 0] for (B, 1, n_cls))."
        )


def evaluate(
    model: nn.Module,
    data: Data,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> float:
    """Accuracy of ``model`` on ``data = (images (B, C, H, W), labels (B,))``, in [0, 1].

    A prediction is the largest logit's class; the model is left in eval mode.

    Raises:
        TypeError / ValueError: as :func:`predict`; labels not (B,) int64 in ``0 .. n_cls-1``.

    Example:
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(1, 2))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.copy_(torch.tensor([[-1.0], [1.0]]))
        ...     _ = model[1].bias.zero_()
        >>> images = torch.tensor([-2.0, -1.0, 1.0, 2.0]).reshape(4, 1, 1, 1)
        >>> evaluate(model, (images, torch.tensor([0, 0, 1, 0])))
        0.75

    See chapter: Training and classification.
    """
    images, labels = _checks.labelled_data("data", data, num_classes_of(as_module(model)))
    probabilities = predict(
        model, images, batch_size=batch_size, device=device, precision=precision
    )  # (B, n_cls)
    _checks.labels("data labels", labels, probabilities.shape[1])
    predicted = probabilities.argmax(dim=1)
    return (predicted == labels).float().mean().item()


class Evaluator:
    """``fit``'s accuracy on ``eval_data`` after each epoch; labels checked at the first call.

    See chapter: Training and classification.
    """

    def __init__(
        self,
        model: nn.Module,
        data: Data | None,
        batch_size: int,
        device: torch.device,
        precision: str,
    ) -> None:
        self.model, self.data, self.batch_size = model, data, batch_size
        self.device, self.precision, self.checked = device, precision, False

    def __call__(self) -> float:
        images, labels = self.data
        probabilities = _probabilities(
            self.model, images, self.batch_size, self.device, self.precision
        )  # (B, n_cls)
        if not self.checked:
            _checks.labels("eval_data labels", labels, probabilities.shape[1])
            self.checked = True
        predicted = probabilities.argmax(dim=1)
        return (predicted == labels.to(self.device)).float().mean().item()
