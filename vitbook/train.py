"""Train and evaluate an image classifier: one small, seeded loop for any ``nn.Module``.

``fit`` runs mini-batch AdamW (or SGD) with a linear warm-up and a cosine decay of the learning
rate, the recipe of ViT and DeiT, scaled down; ``evaluate`` and ``predict`` run a model in eval mode
without gradients; ``plot_history`` draws the learning curves. Data are plain tensors,
``(images (B, C, H, W), labels (B,))``; ``fit`` moves them to the model's device (CPU or CUDA), the
model never moves them itself. On a GPU ``fit`` trains in mixed precision, keeps the data on the
GPU when they fit, augments there, and waits for the GPU once per step.

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

__all__ = [
    "History",
    "evaluate",
    "fit",
    "plot_history",
    "predict",
    "random_shift",
    "resolve_precision",
]

Data = tuple[torch.Tensor, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "sgd")


@dataclass
class History:
    """What ``fit`` measured, one entry per epoch.

    Fields:
        train_loss: mean cross-entropy over the epoch's batches (with label smoothing, if any).
        train_accuracy: fraction of training images classified right during the epoch (with
            augmentation and dropout on, so usually below the accuracy of the final model).
        eval_accuracy: accuracy on ``eval_data`` after the epoch; empty without ``eval_data``.
        seconds: wall-clock seconds of each epoch (evaluation included).
        precision: what the forward passes computed in: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

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
    precision: str = "fp32"

    @property
    def epochs(self) -> int:
        return len(self.train_loss)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds))


def _num_classes(model: nn.Module) -> int | None:
    """n_cls from a vitbook model's config, or None for another module (read from its logits)."""
    num_classes = getattr(getattr(model, "config", None), "num_classes", None)
    if num_classes == 0:
        raise ValueError(
            "the model has num_classes=0, so no classification head; build it with "
            "num_classes=n_cls to train or evaluate a classifier."
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
    ``-max_shift .. max_shift``, drawn from the generator that ``fit`` passes in (on the images'
    device). The crop is done by indexing, for the whole batch at once, so it runs on a GPU
    without a Python loop and without waiting for the host.

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
        b, c, h, w = images.shape
        m, device = max_shift, images.device
        padded = F.pad(images, (m, m, m, m))  # (B, C, H + 2m, W + 2m), zeros around
        offsets = torch.randint(0, 2 * m + 1, (b, 2), generator=generator, device=device)
        rows = offsets[:, :1] + torch.arange(h, device=device)  # (B, H) rows of padded to keep
        cols = offsets[:, 1:] + torch.arange(w, device=device)  # (B, W)
        return padded[  # one index per output axis, broadcast to (B, C, H, W)
            torch.arange(b, device=device)[:, None, None, None],
            torch.arange(c, device=device)[None, :, None, None],
            rows[:, None, :, None],
            cols[:, None, None, :],
        ]

    return augment


def _schedule(step: int, total: int, warmup: int) -> float:
    """Learning-rate factor: linear warm-up to 1, then a cosine down to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision ``fit`` trains in: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

    ``"auto"`` picks bf16 on a GPU that computes it natively (compute capability 8.0 or higher:
    A100, H100, RTX 30xx and later), fp16 with a gradient scaler on older GPUs (a T4, Colab's free
    GPU, has fast fp16 and no fast bf16) and fp32 elsewhere, the CPU included. Asking for
    ``"bf16"`` or ``"fp16"`` explicitly works on the CPU too (slowly: for tests and curiosity).

    Example:
        >>> resolve_precision("auto", "cpu"), resolve_precision("bf16", "cpu")
        ('fp32', 'bf16')

    See chapter: Real photos on a GPU.
    """
    _checks.choice("precision", precision, PRECISIONS)
    device = _checks.device("device", device)
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
    return "fp32"


def _autocast(device: torch.device, precision: str) -> torch.autocast:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")


def _fits_on(device: torch.device, *tensors: torch.Tensor) -> bool:
    """Whether the tensors can live on ``device`` beside training: under half its free memory."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return sum(t.numel() * t.element_size() for t in tensors) < free // 2


def _world() -> tuple[int, int]:
    """(rank, number of processes) under ``torch.distributed``; (0, 1) in a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _optimizer(
    name: str, params: list[nn.Parameter], lr: float, weight_decay: float, device: torch.device
) -> torch.optim.Optimizer:
    # The fused CUDA kernels also take the gradient scaler's verdict on the GPU, without a sync.
    fused = {"fused": True} if device.type == "cuda" else {}
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay, **fused)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **fused)


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
    mix: Mix | None = None,
    eval_data: Data | None = None,
    device: str | torch.device | None = None,
    precision: str = "auto",
    optimizer: str = "adamw",
    clip_grad_norm: float | None = None,
    progress: bool = True,
) -> History:
    """Train ``model`` in place with AdamW, warm-up and cosine decay; return the learning curves.

    Each epoch visits every training image once, in a fresh random order. The learning rate rises
    linearly over ``warmup_epochs`` and then follows a cosine to 0 at the last step, per batch.
    ``seed`` seeds the order, the augmentation and torch's global generator (for dropout and
    stochastic depth), so the same model initialisation and the same seed give the same history
    on the same machine.

    On a GPU the loop does what a fast hand-written loop does: the training images move to the
    GPU once when they take less than half its free memory (else each batch moves), the order
    and the augmentation are drawn there, the forward pass runs in mixed precision
    (``precision``), and each step touches the host once, to check that the loss and the
    gradients are finite before the weights change. Losses and accuracies are summed on the
    device and read once per epoch.

    Under ``torchrun`` (a ``torch.distributed`` process group set up by the caller), every
    process draws the same order and augmentation for the global batch of ``batch_size`` images
    and trains on its share of it inside PyTorch's ``DistributedDataParallel``, which averages
    the gradients: the same steps as one process with the whole batch (dropout and stochastic
    depth draw their own masks in each process).

    Args:
        model: maps (B, C, H, W) images to (B, n_cls) logits; trained in place, left in train
            mode. Only parameters with ``requires_grad`` are trained (freeze the rest for a
            linear probe).
        train_data: ``(images (B, C, H, W) float, labels (B,) int64)``.
        epochs: passes over ``train_data``.
        lr: the peak learning rate; weight_decay: the optimizer's weight decay (decoupled for
            AdamW).
        batch_size: images per step (the last batch of an epoch may be smaller).
        seed: seeds everything random in training.
        warmup_epochs: epochs of linear warm-up (0 for none).
        label_smoothing: passed to ``F.cross_entropy``; 0.1 in DeiT.
        augment: ``augment(images, generator) -> images``, applied to each training batch on the
            training device with a generator there, e.g. :func:`random_shift`.
        mix: ``mix(images, labels, generator) -> (images, targets (B, n_cls))``, after
            ``augment``: MixUp or CutMix with soft targets (see :mod:`vitbook.augment`).
        eval_data: evaluated after every epoch, if given (the validation split).
        device: where to train; by default the device of the model's parameters.
        precision: ``"auto"`` (bf16 on recent GPUs, fp16 with a gradient scaler on older ones,
            fp32 on the CPU; see :func:`resolve_precision`), ``"fp32"``, ``"bf16"`` or
            ``"fp16"``.
        optimizer: ``"adamw"`` or ``"sgd"`` (momentum 0.9, as the ViT paper fine-tunes).
        clip_grad_norm: scale the gradients down to this global norm when above it (1.0 in the
            ViT paper); ``None`` for no clipping.
        progress: show a ``tqdm.auto`` bar (also off when ``VITBOOK_PROGRESS=0``).

    Returns:
        A :class:`History`.

    Raises:
        TypeError: data that are not ``(float images, int64 labels)`` pairs; an argument of the
            wrong type (a str for ``lr``, a non-callable ``augment``, ...).
        ValueError: before the first step, an argument out of range, unequal lengths, images
            holding NaN or inf, labels outside ``0 .. n_cls-1``, or a model with nothing to
            train (the model is not touched); during training, the first non-finite loss or
            gradient stops it before the step that would have spread it, so the model keeps
            the weights of the step before (the optimizer state is discarded with the error).
            In fp16 an overflowing gradient is the gradient scaler's business: that step is
            skipped and the scale lowered, as mixed-precision training does.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.randn(32, 1, 4, 4)
        >>> labels = (images.mean(dim=(1, 2, 3)) > 0).long()  # (B,) a learnable rule
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
        >>> history = fit(model, (images, labels), epochs=20, lr=0.1, batch_size=8,
        ...               progress=False)
        >>> history.epochs, history.train_loss[-1] < history.train_loss[0], history.precision
        (20, True, 'fp32')

    See chapter: Training and classification.
    """
    device = _device(model, device)
    num_classes = _num_classes(_model(model))
    images, labels = _checks.labelled_data("train_data", train_data, num_classes)
    if eval_data is not None:
        eval_data = _checks.labelled_data("eval_data", eval_data, num_classes)
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
    for name, function, form in (
        ("augment", augment, "augment(images, generator) or None, got {}; e.g. random_shift(1)"),
        ("mix", mix, "mix(images, labels, generator) or None, got {}; e.g. a MixUp"),
    ):
        if function is not None and not callable(function):
            raise TypeError(f"{name} must be a function {form.format(type(function).__name__)}.")
    precision = resolve_precision(precision, device)
    _checks.choice("optimizer", optimizer, OPTIMIZERS)
    if clip_grad_norm is not None:
        _checks.real("clip_grad_norm", clip_grad_norm, low=0, open_low=True,
                     fix="the ViT paper clips at 1.0")
    _checks.boolean("progress", progress)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "the model has no parameter with requires_grad=True, so there is nothing to train; "
            "unfreeze at least the head (model.head.requires_grad_(True))."
        )
    rank, world = _world()
    if batch_size % world:
        raise ValueError(
            f"batch_size={batch_size} is the global batch of {world} processes, so it must be a "
            f"multiple of {world}; use e.g. batch_size={batch_size - batch_size % world or world}."
        )
    model.to(device)
    net = model if world == 1 else nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None
    )  # DDP averages the gradients of the processes in backward
    data_device = device if _fits_on(device, images, labels) else torch.device("cpu")
    images, labels = images.to(data_device), labels.to(data_device)
    torch.manual_seed(seed)  # dropout, stochastic depth: torch's global generators
    # Order and augmentation draw from one generator where the data are (the GPU, when they fit).
    generator = torch.Generator(data_device).manual_seed(seed)
    augment_generator = (
        generator if data_device == device else torch.Generator(device).manual_seed(seed)
    )
    optim = _optimizer(optimizer, params, lr, weight_decay, device)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    steps_per_epoch = math.ceil(len(images) / batch_size)
    total, warmup = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda step: _schedule(step, total, warmup)
    )
    history = History(precision=precision)
    bar = None
    if _progress_enabled(progress) and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=epochs, desc="training", unit="epoch")
    step = 0
    for epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        order = torch.randperm(len(images), generator=generator, device=data_device)
        for batch in order.split(batch_size):
            x = images[batch].to(device, non_blocking=True)  # (b, C, H, W)
            y = labels[batch].to(device, non_blocking=True)  # (b,)
            if augment is not None:
                x = augment(x, augment_generator)
            targets = y
            if mix is not None:
                x, targets = mix(x, y, augment_generator)  # targets (b, n_cls), soft
            if world > 1:  # every process drew the same global batch; each takes its share
                x, y, targets = (t.tensor_split(world)[rank] for t in (x, y, targets))
            with _autocast(device, precision):
                logits = net(x)  # (b, n_cls)
            if step == 0:
                _checks.logits(logits, labels)
            logits = logits if precision == "fp32" else logits.float()  # the loss in fp32
            loss = F.cross_entropy(logits, targets, label_smoothing=label_smoothing)
            optim.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            # The one host sync of the step: stop before a non-finite loss or gradient reaches
            # the weights, which stay as they were, and say where training went wrong.
            where = f"epoch {epoch + 1}, step {step + 1} of {total}"
            _check_step(optim, params, loss, scaler, clip_grad_norm, world, where, lr)
            scaler.step(optim)
            scaler.update()
            scheduler.step()
            step += 1
            loss_sum += loss.detach().double() * len(y)
            correct += (logits.argmax(dim=1) == y).sum()
        if world > 1:  # the sums over every process's share
            torch.distributed.all_reduce(loss_sum)
            torch.distributed.all_reduce(correct)
        history.train_loss.append(loss_sum.item() / len(images))
        history.train_accuracy.append(correct.item() / len(images))
        if eval_data is not None:
            history.eval_accuracy.append(
                _accuracy(model, eval_data, batch_size=max(256, batch_size), device=device,
                          precision=precision)
            )
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
    optim: torch.optim.Optimizer,
    params: list[nn.Parameter],
    loss: torch.Tensor,
    scaler: torch.amp.GradScaler,
    clip_grad_norm: float | None,
    world: int,
    where: str,
    lr: float,
) -> None:
    """Clip if asked; raise, before the update, if the loss or the gradients are not finite."""
    grads = [p.grad for p in params if p.grad is not None]
    finite = loss.isfinite()
    if grads:
        scaler.unscale_(optim)  # a no-op unless fp16: the gradients' true size, for clipping
        norm = torch.nn.utils.get_total_norm(grads)  # not finite iff a gradient is not
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, clip_grad_norm, norm)
        if not scaler.is_enabled():  # with fp16, the scaler skips overflowing steps itself
            finite = finite & norm.isfinite()
    if world > 1:  # stop every process if one must stop
        finite = finite.to(torch.int32)
        torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
    if bool(finite):
        return
    what = f"loss is {loss.item()}" if not torch.isfinite(loss) else "gradients are not finite"
    raise ValueError(
        f"the training {what} at {where}; training stopped before this step, so the model "
        "keeps the weights it had after the step before. "
        f"Lower lr (now {lr:g}), check the data and the model, or use fewer epochs."
    )


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

    The model is switched to eval mode (dropout off) and stays there. ``precision`` as in
    :func:`fit` (``"auto"`` for mixed precision on a GPU); the probabilities are float32.

    Raises:
        TypeError / ValueError: images that are not a floating-point tensor or hold NaN or inf,
            ``batch_size`` not a positive int, an unknown device or precision.

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
    precision = resolve_precision(precision, device)
    return _probabilities(model, images, batch_size, device, precision).cpu()


def _probabilities(
    model: nn.Module, images: torch.Tensor, batch_size: int, device: torch.device, precision: str
) -> torch.Tensor:
    """(B, n_cls) float32 probabilities on ``device``, unchecked: the callers check."""
    model.eval()
    chunks = []
    with torch.no_grad(), _autocast(device, precision):
        for chunk in images.split(batch_size):
            logits = model(chunk.to(device))  # (b, n_cls)
            chunks.append((logits if precision == "fp32" else logits.float()).softmax(dim=1))
    return torch.cat(chunks)  # (B, n_cls)


def _accuracy(
    model: nn.Module, data: Data, *, batch_size: int, device: torch.device, precision: str
) -> float:
    images, labels = data
    predicted = _probabilities(model, images, batch_size, device, precision).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def evaluate(
    model: nn.Module,
    data: Data,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> float:
    """Accuracy of ``model`` on ``data = (images (B, C, H, W), labels (B,))``, in [0, 1].

    A prediction is the class of the largest logit; the model is left in eval mode.
    ``precision`` as in :func:`predict`.

    Raises:
        TypeError / ValueError: as :func:`predict`, and labels that are not a (B,) int64 tensor
            of class indices ``0 .. n_cls-1`` (n_cls from the model's config or its logits).

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
    probabilities = predict(
        model, images, batch_size=batch_size, device=device, precision=precision
    )  # (B, n_cls)
    _checks.labels("data labels", labels, probabilities.shape[1])
    predicted = probabilities.argmax(dim=1)
    return (predicted == labels).float().mean().item()
