"""Train and evaluate an image classifier: one small, seeded loop for any ``nn.Module``.

``fit`` runs mini-batch AdamW with a linear warm-up and a cosine decay of the learning rate, the
recipe of ViT and DeiT, scaled down; ``evaluate`` and ``predict`` run a model in eval mode without
gradients; ``plot_history`` draws the learning curves. Data are plain tensors,
``(images (B, C, H, W), labels (B,))``; batches are moved to the model's device (CPU or CUDA), the
model never moves them itself.

A ``tqdm.auto`` progress bar shows the epochs (a widget in Jupyter, text elsewhere). Turn it off
with ``progress=False``, or for every call by setting the environment variable
``VITBOOK_PROGRESS=0``. tqdm is imported only when a bar is shown.

See chapter: Training and classification.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks
from vitbook.plotting.training import plot_history  # re-exported: it draws a History

__all__ = ["History", "evaluate", "fit", "plot_history", "predict", "random_shift"]

Data = tuple[torch.Tensor, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


@dataclass
class History:
    """What ``fit`` measured, one entry per epoch.

    Fields:
        train_loss: mean cross-entropy over the epoch's batches (with label smoothing, if any).
        train_accuracy: fraction of training images classified right during the epoch (with
            augmentation and dropout on, so usually below the accuracy of the final model).
        eval_accuracy: accuracy on ``eval_data`` after the epoch; empty without ``eval_data``.
        seconds: wall-clock seconds of each epoch (evaluation included).

    Example:
        >>> history = History(train_loss=[2.3, 1.1], train_accuracy=[0.1, 0.6])
        >>> history.epochs, history.total_seconds
        (2, 0.0)

    See chapter: Training and classification.
    """

    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def epochs(self) -> int:
        return len(self.train_loss)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds))


def _num_classes(model: nn.Module) -> int | None:
    """K from a vitbook model's config, or None for another module (read from its logits)."""
    num_classes = getattr(getattr(model, "config", None), "num_classes", None)
    if num_classes == 0:
        raise ValueError(
            "the model has num_classes=0, so no classification head; build it with "
            "num_classes=K to train or evaluate a classifier."
        )
    return num_classes if isinstance(num_classes, int) else None


def _model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module mapping images to logits, got {type(model).__name__}."
        )
    return model


def _device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    _model(model)
    if device is not None:
        return _checks.device("device", device)
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _progress_enabled(progress: bool) -> bool:
    return progress and os.environ.get("VITBOOK_PROGRESS", "1") != "0"


def random_shift(max_shift: int = 1) -> Augment:
    """An augmentation that moves each image by up to ``max_shift`` pixels, filling with zeros.

    Every image in the batch gets its own shift (dy, dx), each uniform in
    ``-max_shift .. max_shift``, drawn from the generator that ``fit`` passes in.

    Returns:
        ``augment(images (B, C, H, W), generator) -> (B, C, H, W)``.

    Example:
        >>> augment = random_shift(1)
        >>> images = torch.ones(4, 1, 8, 8)
        >>> augment(images, torch.Generator().manual_seed(0)).shape
        torch.Size([4, 1, 8, 8])

    See chapter: Training and classification.
    """
    if isinstance(max_shift, bool) or not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(f"max_shift={max_shift!r} must be an int >= 0; use 1 for 8x8 digits.")

    def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, _, h, w = images.shape
        m = max_shift
        padded = F.pad(images, (m, m, m, m))  # (B, C, H + 2m, W + 2m), zeros around
        offsets = torch.randint(0, 2 * m + 1, (b, 2), generator=generator).tolist()
        return torch.stack(
            [padded[k, :, dy : dy + h, dx : dx + w] for k, (dy, dx) in enumerate(offsets)]
        )  # (B, C, H, W)

    return augment


def _schedule(step: int, total: int, warmup: int) -> float:
    """Learning-rate factor: linear warm-up to 1, then a cosine down to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def fit(
    model: nn.Module,
    train_data: Data,
    *,
    epochs: int,
    lr: float = 1e-3,
    weight_decay: float = 0.05,
    batch_size: int = 64,
    seed: int = 0,
    warmup_epochs: int = 1,
    label_smoothing: float = 0.0,
    augment: Augment | None = None,
    eval_data: Data | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> History:
    """Train ``model`` in place with AdamW, warm-up and cosine decay; return the learning curves.

    Each epoch visits every training image once, in a fresh random order. The learning rate rises
    linearly over ``warmup_epochs`` and then follows a cosine to 0 at the last step, per batch.
    ``seed`` seeds the order, the augmentation and torch's global generator (for dropout), so the
    same model initialisation and the same seed give the same history on the same machine.

    Args:
        model: maps (B, C, H, W) images to (B, K) logits; trained in place, left in train mode.
        train_data: ``(images (B, C, H, W) float, labels (B,) int64)``.
        epochs: passes over ``train_data``.
        lr: the peak learning rate; weight_decay: AdamW's decoupled weight decay.
        batch_size: images per step (the last batch of an epoch may be smaller).
        seed: seeds everything random in training.
        warmup_epochs: epochs of linear warm-up (0 for none).
        label_smoothing: passed to ``F.cross_entropy``; 0.1 in DeiT.
        augment: ``augment(images, generator)`` applied to each training batch, e.g.
            :func:`random_shift`.
        eval_data: evaluated with :func:`evaluate` after every epoch, if given.
        device: where to train; by default the device of the model's parameters.
        progress: show a ``tqdm.auto`` bar (also off when ``VITBOOK_PROGRESS=0``).

    Returns:
        A :class:`History`.

    Raises:
        TypeError: data that are not ``(float images, int64 labels)`` pairs; an argument of the
            wrong type (a str for ``lr``, a non-callable ``augment``, ...).
        ValueError: before the first step, an argument out of range, unequal lengths, images
            holding NaN or inf, or labels outside ``0 .. num_classes-1`` (the model is not
            touched); during training, the first non-finite loss or gradient stops it before
            the step that would have spread it, so the model keeps the weights of the step
            before (the optimizer state is discarded with the error).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.randn(32, 1, 4, 4)
        >>> labels = (images.mean(dim=(1, 2, 3)) > 0).long()  # (B,) a learnable rule
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
        >>> history = fit(model, (images, labels), epochs=20, lr=0.1, batch_size=8,
        ...               progress=False)
        >>> history.epochs, history.train_loss[-1] < history.train_loss[0]
        (20, True)

    See chapter: Training and classification.
    """
    device = _device(model, device)
    num_classes = _num_classes(_model(model))
    images, labels = _checks.labelled_data("train_data", train_data, num_classes)
    if eval_data is not None:
        _checks.labelled_data("eval_data", eval_data, num_classes)
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int; use e.g. {name}=10.")
    _checks.integer("warmup_epochs", warmup_epochs, fix="use 0 for no warm-up")
    _checks.integer("seed", seed, minimum=-(2**63))
    lr = _checks.real("lr", lr, fix="1e-3 is a good start for AdamW")
    if not lr > 0:
        raise ValueError(f"lr={lr!r} must be positive; 1e-3 is a good start for AdamW.")
    _checks.real("weight_decay", weight_decay, low=0, fix="ViT and DeiT use 0.05")
    _checks.real("label_smoothing", label_smoothing, low=0, high=1, open_high=True,
                 fix="DeiT uses 0.1")
    if augment is not None and not callable(augment):
        raise TypeError(f"augment must be a function augment(images, generator) or None, got "
                        f"{type(augment).__name__}; e.g. augment=random_shift(1).")
    _checks.boolean("progress", progress)
    model.to(device)
    torch.manual_seed(seed)  # dropout, and anything else that draws from the global generator
    generator = torch.Generator().manual_seed(seed)  # order and augmentation, on the CPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps_per_epoch = math.ceil(len(images) / batch_size)
    total, warmup = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _schedule(step, total, warmup)
    )
    history = History()
    bar = None
    if _progress_enabled(progress):
        from tqdm.auto import tqdm

        bar = tqdm(total=epochs, desc="training", unit="epoch")
    step = 0
    for epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        loss_sum, correct = 0.0, 0
        order = torch.randperm(len(images), generator=generator)
        for batch in order.split(batch_size):
            x, y = images[batch], labels[batch]  # (b, C, H, W), (b,)
            if augment is not None:
                x = augment(x, generator)
            x, y = x.to(device), y.to(device)
            logits = model(x)  # (b, K)
            if step == 0:
                _checks.logits(logits, labels)
            loss = F.cross_entropy(logits, y, label_smoothing=label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            if torch.isfinite(loss):
                loss.backward()
            # Stop before a non-finite loss or gradient reaches the weights: they stay as they
            # were before this step, and the error says where training went wrong.
            _check_step(model, loss, epoch, step, total, lr)
            optimizer.step()
            scheduler.step()
            step += 1
            loss_sum += loss.item() * len(batch)
            correct += (logits.argmax(dim=1) == y).sum().item()
        history.train_loss.append(loss_sum / len(images))
        history.train_accuracy.append(correct / len(images))
        if eval_data is not None:
            history.eval_accuracy.append(evaluate(model, eval_data, batch_size=256))
            model.train()
        history.seconds.append(time.perf_counter() - start)
        if bar is not None:
            shown = {"loss": f"{history.train_loss[-1]:.3f}"}
            if history.eval_accuracy:
                shown["eval acc"] = f"{history.eval_accuracy[-1]:.3f}"
            bar.set_postfix(shown)
            bar.update()
    if bar is not None:
        bar.close()
    return history


def _check_step(
    model: nn.Module, loss: torch.Tensor, epoch: int, step: int, total: int, lr: float
) -> None:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    finite = torch.stack([loss.isfinite(), *(g.isfinite().all() for g in grads)])
    if bool(finite.all()):
        return
    what = f"loss is {loss.item()}" if not torch.isfinite(loss) else "gradients are not finite"
    raise ValueError(
        f"the training {what} at epoch {epoch + 1}, step {step + 1} of {total}; training "
        "stopped before this step, so the model keeps the weights it had after the step before. "
        f"Lower lr (now {lr:g}), check the data and the model, or use fewer epochs."
    )


@torch.no_grad()
def predict(
    model: nn.Module,
    images: torch.Tensor,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """Class probabilities of ``images`` (B, C, H, W): (B, K) on the CPU, model in eval mode.

    The model is switched to eval mode (dropout off) and stays there.

    Raises:
        TypeError / ValueError: images that are not a floating-point tensor or hold NaN or inf,
            ``batch_size`` not a positive int, an unknown device.

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
    device = _device(model, device)
    model.eval()
    chunks = [
        model(chunk.to(device)).softmax(dim=1).cpu()  # (b, K)
        for chunk in images.split(batch_size)
    ]
    return torch.cat(chunks)  # (B, K)


def evaluate(
    model: nn.Module,
    data: Data,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
) -> float:
    """Accuracy of ``model`` on ``data = (images (B, C, H, W), labels (B,))``, in [0, 1].

    A prediction is the class of the largest logit; the model is left in eval mode.

    Raises:
        TypeError / ValueError: as :func:`predict`, and labels that are not a (B,) int64 tensor
            of class indices ``0 .. K-1`` (K from the model's config or its logits).

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
    images, labels = _checks.labelled_data("data", data, _num_classes(_model(model)))
    probabilities = predict(model, images, batch_size=batch_size, device=device)  # (B, K)
    _checks.labels("data labels", labels, probabilities.shape[1])
    predicted = probabilities.argmax(dim=1)
    return (predicted == labels).float().mean().item()
