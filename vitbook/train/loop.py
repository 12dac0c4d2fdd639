"""Train and evaluate an image classifier: one small, seeded loop for any ``nn.Module``.

``fit`` runs mini-batch AdamW (or SGD) with a linear warm-up and a cosine decay of the learning
rate, the recipe of ViT and DeiT, scaled down; ``evaluate`` and ``predict`` run a model in eval mode
without gradients (``vitbook.plotting.plot_history`` draws the learning curves). Data are plain
tensors, ``(images (B, C, H, W), labels (B,))``; ``fit`` moves them to the model's device (CPU or
CUDA), the model never moves them itself. On a GPU ``fit`` trains in mixed precision, keeps the
data on the GPU when they fit, augments there, and waits for the GPU once per step.
:mod:`vitbook.train.optim` builds the optimizer and the schedule, :mod:`vitbook.train.step` runs one
step, ``vitbook.train.checks`` checks what comes in, and :mod:`vitbook.train.evaluation` holds
``evaluate``, ``predict`` and ``resolve_precision`` (imported here).

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
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks
from vitbook.train import checks
from vitbook.train import resume as training_state
from vitbook.train.evaluation import (
    Evaluator,
    _device,
    _model,
    _num_classes,
    evaluate,
    predict,
    resolve_precision,
)
from vitbook.train.optim import lr_factor, make_optimizer, param_groups
from vitbook.train.recipe import Recipe
from vitbook.train.step import TrainStep

__all__ = ["History", "Recipe", "evaluate", "fit", "predict", "random_shift", "resolve_precision"]

Data = tuple[torch.Tensor, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
Criterion = Callable[[object, torch.Tensor, torch.Tensor], torch.Tensor]
AfterEpoch = Callable[[int, Callable[[], dict]], object]


@dataclass
class History:
    """What ``fit`` measured, one entry per epoch.

    Fields:
        train_loss: mean cross-entropy over the epoch's batches (with label smoothing, if any),
            or the criterion's loss; in fp16, steps the gradient scaler skipped for a
            non-finite loss are left out.
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


def fit(
    model: nn.Module,
    train_data: Data,
    recipe: Recipe | None = None,
    *,
    augment: Augment | None = None,
    mix: Mix | None = None,
    criterion: Criterion | None = None,
    eval_data: Data | None = None,
    device: str | torch.device | None = None,
    compile: bool = False,
    sync_every: int | None = None,
    resume: dict | None = None,
    after_epoch: AfterEpoch | None = None,
    progress: bool = True,
    **fields: object,
) -> History:
    """Train ``model`` in place with AdamW, warm-up and cosine decay; return the learning curves.

    Each epoch visits every training image once, in a fresh random order. The learning rate rises
    linearly over the warm-up and then follows a cosine to 0 at the last step, per optimizer
    step. ``seed`` seeds the order, the augmentation and torch's global generator (for dropout
    and stochastic depth), so the same model initialisation and the same seed give the same
    history on the same machine.

    On a GPU the loop does what a fast hand-written loop does: the training images move to the
    GPU once when they take less than half its free memory (else each batch moves), the order
    and the augmentation are drawn there, the forward pass runs in mixed precision (the recipe's
    ``precision``), and the steps do not wait for the host: the loss, the gradients and the
    updated weights are checked for finiteness on the GPU at every step, and what it found is
    read at the epoch's end (or every ``sync_every`` steps), together with the epoch's summed
    loss and accuracy. ``vitbook.train.step`` holds the step itself.

    A run can stop and go on in another process: ``after_epoch`` gets, after every epoch, a
    function that returns the whole training state (see :mod:`vitbook.train.resume`), and
    ``resume=state`` continues from it to the run an uninterrupted call would have made (on the
    CPU, bit for bit).

    Under ``torchrun`` (a ``torch.distributed`` process group set up by the caller), every
    process draws the same order and augmentation for the global batch of ``batch_size`` images
    and trains on its share of it inside PyTorch's ``DistributedDataParallel``, which averages
    the gradients; each share's loss is weighted by its size, so uneven shares (the last batch)
    give the gradient of the global batch, as one process with the whole batch (dropout and
    stochastic depth draw their own masks in each process).

    Args:
        model: maps (B, C, H, W) images to (B, n_cls) logits; trained in place, left in train
            mode. Only parameters with ``requires_grad`` are trained (freeze the rest for a
            linear probe). In train mode it may return a tuple of logits (a distilled ViT's two
            heads); then ``criterion`` makes the loss, and the training accuracy counts the
            mean of the tuple's logits.
        train_data: ``(images (B, C, H, W) float, labels (B,) int64)``.
        recipe: a :class:`vitbook.train.recipe.Recipe`, what decides the run's numbers (epochs, lr,
            weight decay and its rule, batch size, seed, warm-up, label smoothing, optimizer,
            clipping, accumulation, repeated augmentation, precision).
        **fields: the recipe's fields as keywords instead (``fit(model, data, epochs=20,
            lr=0.1)``), or changes to ``recipe`` (``fit(model, data, recipe, seed=3)``).
            ``label_smoothing`` is not for a ``criterion``, which owns its loss; under
            ``torchrun`` ``batch_size`` is the global batch.
        augment: ``augment(images, generator) -> images``, applied to each training batch on the
            training device with a generator there, e.g. :func:`random_shift`. An augmentation
            whose ``value_range`` attribute is ``(0.0, 1.0)`` (RandAugment's) gets the training
            images checked to lie in [0, 1], once.
        mix: ``mix(images, labels, generator) -> (images, targets (B, n_cls))``, after
            ``augment``: MixUp or CutMix with soft targets (see :mod:`vitbook.data.augment`). A
            ``num_classes`` attribute is checked against the labels, once.
        criterion: ``criterion(outputs, targets, images) -> loss``, a scalar, the mean over the
            images, in place of cross-entropy: for losses that need more than logits and labels
            (DeiT's distillation). ``outputs`` is what the model returned, ``targets`` the labels
            (B,) or the mix's soft targets (B, n_cls), ``images`` the augmented, mixed batch the
            model saw (so a teacher sees the same). It runs in the forward pass's autocast (a
            teacher's forward runs in the same precision); its loss is taken in fp32.
        eval_data: evaluated after every epoch, if given (the validation split).
        device: where to train; by default the device of the model's parameters.
        compile: ``torch.compile`` the forward pass and the loss (CUDA graphs on a GPU; see
            :mod:`vitbook.train.step`); the first call compiles for a while. Not under
            ``torchrun``.
        sync_every: read the device's finiteness verdict every this many steps (1: after every
            step), besides the read at each epoch's end. ``None`` (the default): every step on
            the CPU, where a read waits for nothing, and only at the epoch's end on a GPU. A
            failure found late is reported with the step it happened at, and the weights are
            those after the step before it, as with a read after every step; only the steps run
            in between are wasted. The numbers never depend on it.
        resume: a training state that ``after_epoch`` was handed (or
            :func:`vitbook.train.resume.load_state` read): training continues after its epochs, with
            its weights, optimizer, schedule, generators and history. The call must repeat the
            arguments that decide the numbers (``epochs``, ``lr``, ``seed``, the data, checked
            by a checksum read once on the host, the augmentation and mix with their settings,
            ...; a state made with others is refused); ``compile``, ``sync_every`` and
            ``progress`` may change.
        after_epoch: ``after_epoch(epochs_done, state)``, called after every epoch (after the
            evaluation) with a function ``state()`` that returns the whole training state,
            copied to the CPU (:func:`vitbook.train.resume.capture`). A true result stops training
            there: ``fit`` returns the history so far (``history.epochs < epochs``). Under
            ``torchrun`` it must answer the same in every process.
        progress: show a ``tqdm.auto`` bar (also off when ``VITBOOK_PROGRESS=0``).

    Returns:
        A :class:`History`.

    Raises:
        TypeError: data that are not ``(float images, int64 labels)`` pairs; an argument of the
            wrong type (a str for ``lr``, a non-callable ``augment``, ...); an augmentation or mix
            whose first output is not a tensor of the images' dtype.
        ValueError: before the first step, an argument out of range, unequal lengths, images
            holding NaN or inf (or outside [0, 1] for an augmentation that needs that range),
            labels outside ``0 .. n_cls-1`` (for eval data: at the first evaluation, from the
            logits' width), a model with nothing to train or with non-finite weights (the model
            is not touched); at the first step, outputs of the wrong shape; during training (at
            the read after it), the first non-finite loss or gradient, or an update that made
            the weights or buffers not finite, named by its epoch and step: the step is undone,
            so the model keeps the weights and buffers it had after the step before (the
            optimizer state is discarded with the error). A ``resume`` state of other arguments
            or another model (:class:`vitbook.train.resume.TrainingStateError`). In fp16 an
            overflowing gradient or a non-finite loss is the gradient scaler's business: that
            step is skipped and the scale lowered, as mixed-precision training does (10 such
            steps in a row stop training: the forward pass overflows fp16).

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
    data = (None, None)  # what a saved or resumed run trains on: read once, here, on the host
    if resume is not None or after_epoch is not None:
        data = (checks.fingerprint(images, labels),
                None if eval_data is None else checks.fingerprint(*eval_data))  # fmt: skip
    rank, world = _world()
    recipe = checks.recipe_of(recipe, fields)
    checks.run(recipe, images, world, augment=augment, mix=mix, criterion=criterion,
                      compile=compile, progress=progress)  # fmt: skip
    sync_every = _sync_every(sync_every, device)
    if after_epoch is not None and not callable(after_epoch):
        raise TypeError(f"after_epoch must be a function after_epoch(epochs_done, state) or "
                        f"None, got {type(after_epoch).__name__}.")  # fmt: skip
    recipe = recipe.replace(precision=resolve_precision(recipe.precision, device))  # once
    checks.data_for(augment, mix, images, labels, num_classes)
    params = [p for p in model.parameters() if p.requires_grad]
    checks.weights(model, params)
    model.to(device)
    net = model if world == 1 else nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None
    )  # DDP averages the gradients of the processes in backward
    data_device = device if _fits_on(device, images, labels) else torch.device("cpu")
    images, labels = images.to(data_device), labels.to(data_device)
    torch.manual_seed(recipe.seed)  # dropout, stochastic depth: torch's global generators
    # Order and augmentation draw from one generator where the data are (the GPU, when they fit).
    generator = torch.Generator(data_device).manual_seed(recipe.seed)
    augment_generator = (
        generator if data_device == device else torch.Generator(device).manual_seed(recipe.seed)
    )
    generators = {"order": generator}
    if augment_generator is not generator:
        generators["augment"] = augment_generator
    groups = param_groups(model, recipe.weight_decay, recipe.weight_decay_rule)
    optim = make_optimizer(recipe.optimizer, groups, recipe.lr, device)
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    steps_per_epoch = math.ceil(len(images) / recipe.batch_size)
    total = recipe.epochs * steps_per_epoch
    warmup = recipe.warmup_steps if recipe.warmup_steps is not None else (
        (1 if recipe.warmup_epochs is None else recipe.warmup_epochs) * steps_per_epoch
    )  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: lr_factor(s, total, warmup))
    train_step = TrainStep(
        model, net, optim, scheduler, scaler, params, recipe=recipe, device=device,
        criterion=criterion, rank=rank, world=world, compile=compile, sync_every=sync_every,
        where=lambda step: f"epoch {(step - 1) // steps_per_epoch + 1}, step {step} of {total}",
    )  # fmt: skip
    evaluator = Evaluator(model, eval_data, max(256, recipe.batch_size), device, recipe.precision)
    history = History(precision=recipe.precision)
    arguments = _deciding(recipe, world, len(images), eval_data, data,
                          augment=augment, mix=mix, criterion=criterion)  # fmt: skip
    parts = {"model": model, "optimizer": optim, "scheduler": scheduler, "scaler": scaler,
             "generators": generators, "device": device}  # fmt: skip
    start_epoch = 0
    if resume is not None:
        state = training_state.restore(resume, arguments=arguments, **parts)
        train_step.load_state_dict(state["step"])
        history = History(**state["history"])
        start_epoch = state["epoch"]
    bar = None
    if _progress_enabled(progress) and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=recipe.epochs, initial=start_epoch, desc="training", unit="epoch")
    for epoch in range(start_epoch, recipe.epochs):
        start = time.perf_counter()
        model.train()
        train_step.new_epoch()
        order = _order(len(images), recipe.repeated_augmentation, generator, data_device)
        for batch in order.split(recipe.batch_size):
            x = images[batch].to(device, non_blocking=True)  # (b, C, H, W)
            y = labels[batch].to(device, non_blocking=True)  # (b,)
            first = train_step.steps == 0
            if augment is not None:
                x = checks.augmented(augment(x, augment_generator), x, "augment", first)
            targets = y
            if mix is not None:
                x, targets = checks.mixed(mix(x, y, augment_generator), x, "mix", first)
            train_step(x, y, targets)
        if world > 1:  # the sums over every process's share
            torch.distributed.all_reduce(train_step.loss_sum)
            torch.distributed.all_reduce(train_step.correct)
        loss_sum, correct, counted = train_step.check(sums=True)  # the epoch's read
        history.train_loss.append(loss_sum / counted if counted else math.nan)
        history.train_accuracy.append(correct / counted if counted else math.nan)
        if eval_data is not None:
            history.eval_accuracy.append(evaluator())
            model.train()
        history.seconds.append(time.perf_counter() - start)
        if bar is not None:
            shown = {"loss": f"{history.train_loss[-1]:.3f}"}
            if history.eval_accuracy:
                shown["eval acc"] = f"{history.eval_accuracy[-1]:.3f}"
            bar.set_postfix(shown)
            bar.update()
        if after_epoch is not None:
            done = epoch + 1

            def snapshot(done: int = done) -> dict:
                return training_state.capture(
                    arguments=arguments, epoch=done, step=train_step.state_dict(),
                    history=asdict(history), **parts,
                )  # fmt: skip

            if after_epoch(done, snapshot):
                break
    if bar is not None:
        bar.close()
    return history


def _sync_every(sync_every: int | None, device: torch.device) -> int:
    """Steps between two reads of the device's verdict: every step on the CPU, where a read
    waits for nothing, else once an epoch (a step count no epoch reaches)."""
    if sync_every is None:
        return 1 if device.type == "cpu" else 2**62
    return _checks.integer("sync_every", sync_every, minimum=1,
                           fix="use 1 to read after every step, or None")  # fmt: skip


def _deciding(
    recipe: Recipe,
    world: int,
    n_images: int,
    eval_data: Data | None,
    data: tuple[str | None, str | None],
    **functions: Callable | None,
) -> dict[str, object]:
    """What a resumed call must repeat: the recipe (its precision resolved), the processes, the
    data's sizes and checksums, and the functions with their settings (an augmentation's
    strength)."""
    deciding = {**recipe.to_dict(), "world": world}
    deciding["images"] = n_images
    deciding["eval_images"] = None if eval_data is None else len(eval_data[1])
    deciding["train_data_sha256"], deciding["eval_data_sha256"] = data
    for name, function in functions.items():
        deciding[name] = None if function is None else checks.configuration(function)
    return deciding


def _order(
    n: int, repeats: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """An epoch's order of the n training images: a permutation, or repeated augmentation.

    With ``repeats`` r > 1, the first ceil(n / r) images of a permutation, each r times in a
    row, cut to n: DeiT's ``RASampler`` (which does it across processes).
    """
    order = torch.randperm(n, generator=generator, device=device)  # (n,)
    if repeats == 1:
        return order
    return order[: math.ceil(n / repeats)].repeat_interleave(repeats)[:n]  # (n,)


