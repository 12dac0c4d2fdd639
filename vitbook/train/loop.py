"""Train an image classifier: one small, seeded loop for any ``nn.Module``.

``fit`` runs AdamW (or SGD) with a linear warm-up and a cosine decay, the recipe of ViT and DeiT
scaled down, on plain tensors ``(images (B, C, H, W), labels (B,))`` that it moves to the model's
device. :mod:`vitbook.train.optim` builds the optimizer and schedule, :mod:`vitbook.train.step`
runs one step, :mod:`vitbook.train.checks` checks the inputs, :mod:`vitbook.train.evaluation`
holds ``evaluate`` and ``predict``, :mod:`vitbook.train.resume` a run's state.

On a GPU the training images move there once if they take under half its free memory, order and
augmentation are drawn there, the forward pass runs in the recipe's ``precision``, and each
step's finiteness checks stay on the GPU until the epoch's read (or every ``sync_every`` steps).

Under ``torchrun`` (a process group set up by the caller) every process draws the same order and
augmentation for the global batch and trains its share in ``DistributedDataParallel``; each
share's loss is weighted by its size, so uneven shares give the global batch's gradient.

The ``tqdm.auto`` bar is off with ``progress=False`` or ``VITBOOK_PROGRESS=0``.

See chapter: Training and classification.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from vitbook import _checks
from vitbook.train import checks
from vitbook.train import resume as training_state
from vitbook.train._shared import as_module, device_of, num_classes_of, resolve_precision
from vitbook.train.evaluation import Evaluator
from vitbook.train.optim import lr_factor, make_optimizer, param_groups
from vitbook.train.recipe import Recipe
from vitbook.train.step import TrainStep

__all__ = ["History", "fit"]

Data = tuple[torch.Tensor, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Mix = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
Criterion = Callable[[object, torch.Tensor, torch.Tensor], torch.Tensor]
AfterEpoch = Callable[[int, Callable[[], dict]], object]


@dataclass
class History:
    """What ``fit`` measured, one entry per epoch.

    Fields:
        train_loss: mean training loss of the epoch (fp16 steps the scaler skipped left out).
        train_accuracy: fraction classified right during the epoch (augmentation, dropout on).
        eval_accuracy: accuracy on ``eval_data`` after the epoch; empty without it.
        seconds: wall-clock seconds of each epoch, evaluation included.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``, what the forward passes computed in.

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

    Each epoch visits every image once in a fresh order; the learning rate rises linearly over the
    warm-up, then follows a cosine to 0. ``seed`` seeds the order, the augmentation and torch's
    global generator (dropout, stochastic depth), so a run repeats on the same machine. On a GPU
    and under ``torchrun``, see :mod:`vitbook.train.loop`.

    Args:
        model: (B, C, H, W) images to (B, n_cls) logits (in train mode perhaps a tuple, for
            ``criterion``); trained in place (its ``requires_grad`` parameters), left in train mode.
        train_data: ``(images (B, C, H, W) float, labels (B,) int64)``.
        recipe: a :class:`vitbook.train.recipe.Recipe`, what decides the run's numbers.
        **fields: the recipe's fields (``epochs``, ``lr``, ``weight_decay``, ``batch_size``,
            ``seed``, ``warmup_epochs``, ``warmup_steps``, ``label_smoothing``, ``optimizer``,
            ``weight_decay_rule``, ``clip_grad_norm``, ``accumulate``,
            ``repeated_augmentation``, ``precision``) as keywords instead, or changes to
            ``recipe`` (``fit(model, data, recipe, seed=3)``).
        augment: ``augment(images, generator) -> images`` on each batch, on the training device
            (e.g. ``random_shift(1)``); a ``value_range`` attribute is checked once.
        mix: ``mix(images, labels, generator) -> (images, targets (B, n_cls))`` after
            ``augment`` (MixUp, CutMix); a ``num_classes`` attribute is checked once. Labels
            are smoothed once: by the mix, or by the loss (the recipe's or the criterion's).
        criterion: ``criterion(outputs, targets, images) -> loss`` in place of cross-entropy
            (DeiT's distillation), run in autocast; the recipe's ``label_smoothing`` must be 0.
        eval_data: evaluated after every epoch, if given.
        device: where to train; by default the device of the model's parameters.
        compile: ``torch.compile`` the forward pass and the loss; not under ``torchrun``.
        sync_every: steps between reads of the finiteness verdict; ``None``: every step on the
            CPU, once an epoch on a GPU. The numbers never depend on it.
        resume: a state ``after_epoch`` was handed (or :func:`vitbook.train.resume.load_state`
            read), continued after its epochs. The call must repeat what decides the numbers
            (recipe, data, augment, mix, criterion); ``compile``, ``sync_every``, ``progress``
            may change.
        after_epoch: ``after_epoch(epochs_done, state)`` after every epoch, ``state()`` giving
            that epoch's state (:func:`vitbook.train.resume.capture`); a true result stops
            training. Under ``torchrun`` it must answer alike everywhere.
        progress: show a ``tqdm.auto`` bar.

    Returns:
        A :class:`History`.

    Raises:
        TypeError, ValueError: data, arguments or a model that do not fit, before the first step
            (the model untouched); outputs of the wrong shape, at the first step.
            ``DivergenceError`` (a ValueError): the first non-finite step, by epoch and step, at
            the read after it; the model keeps the step before's state.
            ``TrainingStateError``: a ``resume`` state of other arguments or model.

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
    device = device_of(model, device)
    num_classes = num_classes_of(as_module(model))
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
    smoothing = checks.loss_smoothing(recipe, criterion)
    if mix is not None:  # a mix that says it smooths: refused before anything is touched
        checks.smoothed_once(mix, None, *smoothing)
    arguments = None  # what a saved or resumed run must repeat, read before anything is touched
    if resume is not None or after_epoch is not None:
        arguments = _deciding(recipe, world, len(images), eval_data, data,
                              augment=augment, mix=mix, criterion=criterion)  # fmt: skip
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
                if first:
                    checks.smoothed_once(mix, targets, *smoothing)
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

            now = [True]  # state() is this epoch's only while after_epoch runs

            def snapshot(done: int = done, now: list[bool] = now) -> dict:
                if not now[0]:
                    raise RuntimeError(
                        f"state() of epoch {done} was called after fit went on (to the next "
                        "epoch, or returned), so it would hold later weights; call it inside "
                        "after_epoch and keep what it returns (saved = state())."
                    )
                return training_state.capture(
                    arguments=arguments, epoch=done, step=train_step.state_dict(),
                    history=asdict(history), **parts,
                )  # fmt: skip

            try:
                stop = after_epoch(done, snapshot)
            finally:
                now[0] = False
            if stop:
                break
    if bar is not None:
        bar.close()
    return history


def _sync_every(sync_every: int | None, device: torch.device) -> int:
    """Steps between reads of the verdict: 1 on the CPU, else more than an epoch has."""
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
    """What a resumed call must repeat: recipe, processes, data sizes and checksums, functions."""
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
    """An epoch's order of n images: a permutation, or with ``repeats`` r > 1 its first
    ceil(n / r) images r times each, cut to n (DeiT's ``RASampler``)."""
    order = torch.randperm(n, generator=generator, device=device)  # (n,)
    if repeats == 1:
        return order
    return order[: math.ceil(n / repeats)].repeat_interleave(repeats)[:n]  # (n,)


