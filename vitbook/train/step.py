"""One optimizer step of ``fit``: micro-batches, mixed precision, a guard, and the update.

A step takes this process's share of the global batch (under ``torchrun``), splits it into
``accumulate`` micro-batches and weights each loss by its share of the global batch, so the
gradient is the global batch's mean loss's, however the images were divided.

The guard: the trained state (parameters and buffers) is copied on the device before the update,
and the loss, gradients and new state are checked there; :meth:`TrainStep.check` reads the
verdict every ``sync_every`` steps and at each epoch's end. After a failed step the model keeps
the state of the step before (later updates are undone on the device until the read), and a
``DivergenceError`` names the step. The copy costs the trained weights' memory once more. In
fp16 the scaler skips overflowing steps, as mixed-precision training does.

``compile=True`` compiles forward and loss into one static-shape graph (``fullgraph=True``; a
CUDA graph on a GPU); the first step runs eagerly so that its outputs can be checked.

See chapter: Real photos.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitbook import _checks
from vitbook.train._shared import autocast, logits_of
from vitbook.train.recipe import Recipe

__all__ = ["DivergenceError", "TrainStep"]

Criterion = Callable[[object, torch.Tensor, torch.Tensor], torch.Tensor]
FP16_SKIPS_IN_A_ROW = 10  # fp16 steps in a row with a non-finite loss before fit gives up


class DivergenceError(ValueError):
    """Training stopped at a step whose loss, gradients or updated weights were not finite.

    A ``ValueError``; the model keeps the state of the step before, which the message names.

    See chapter: Real photos.
    """


def check_outputs(
    outputs: object, labels: torch.Tensor, targets: torch.Tensor, has_criterion: bool
) -> None:
    """Check the first step's outputs: (B, n_cls) logits (a tuple of them with a criterion)
    fitting the labels and the mix's soft targets."""
    if isinstance(outputs, tuple):
        if not has_criterion:
            raise ValueError(
                f"the model returned a tuple of {len(outputs)} tensors in train mode (a distilled "
                "ViT returns its two heads' logits); pass criterion=criterion(outputs, targets, "
                "images) -> loss to fit, to say how they make one loss."
            )
        shapes = {tuple(getattr(o, "shape", ())) for o in outputs}
        if len(shapes) != 1:
            raise ValueError(
                f"the model returned a tuple of tensors of shapes {sorted(shapes)}; each must be "
                "(B, n_cls) logits of one shape."
            )
        outputs = outputs[0]
    _checks.logits(outputs, labels)
    if targets.ndim == 2 and targets.shape[1] != outputs.shape[1]:
        raise ValueError(
            f"the mix returned soft targets for {targets.shape[1]} classes but the model has "
            f"{outputs.shape[1]}; build the mix with n_cls={outputs.shape[1]}."
        )


class TrainStep:
    """Runs ``fit``'s optimizer steps and sums the epoch's loss and correct predictions.

    Args:
        model: the model trained (its state guarded); net: what is called (it, or its DDP wrapper).
        params: the trained parameters, in ``model.parameters()`` order.
        recipe: the run's :class:`vitbook.train.recipe.Recipe`, its precision resolved.
        rank, world: this process and the number of processes.
        sync_every: steps between reads of the device's verdict.
        where: ``where(step)`` places step ``step`` (from 1) in words, for the error.

    See chapter: Real photos.
    """

    def __init__(
        self,
        model: nn.Module,
        net: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        scaler: torch.amp.GradScaler,
        params: list[nn.Parameter],
        *,
        recipe: Recipe,
        device: torch.device,
        criterion: Criterion | None,
        rank: int,
        world: int,
        compile: bool,
        sync_every: int = 1,
        where: Callable[[int], str] = lambda step: f"step {step}",
    ) -> None:
        self.model, self.net, self.optimizer = model, net, optimizer
        self.scheduler, self.scaler, self.params = scheduler, scaler, params
        if recipe.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(
                f"TrainStep takes a recipe whose precision is resolved, got "
                f"{recipe.precision!r}; use vitbook.train.resolve_precision(precision, device)."
            )
        self.recipe, self.device, self.criterion = recipe, device, criterion
        self.rank, self.world = rank, world
        self.sync_every, self.where = sync_every, where
        self.fp16 = scaler.is_enabled()
        # The guarded state: what a step changes. Frozen parameters are left out.
        self.state = [*params, *model.buffers()]
        self.backup = [t.detach().clone() for t in self.state]
        self.compiled = self._compiled() if compile else None
        self.steps, self.checked_steps = 0, 0
        # What the device found, read by check(): the steps taken, whether the last step's
        # update stands, fp16's non-finite losses in a row, whether a step failed, and the first
        # failure's step, loss, gradients, state and loss value.
        self.step_count = torch.zeros((), dtype=torch.int64, device=device)
        self.good = torch.ones((), dtype=torch.bool, device=device)
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)
        self.failed = torch.zeros((), dtype=torch.bool, device=device)
        self.failure = torch.zeros(len(FAILURE), dtype=torch.float64, device=device)
        self.new_epoch()

    def new_epoch(self) -> None:
        """Zero the epoch's sums (on the device: read once per epoch)."""
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct = torch.zeros((), dtype=torch.int64, device=self.device)
        self.counted = torch.zeros((), dtype=torch.int64, device=self.device)

    def state_dict(self) -> dict[str, object]:
        """The steps taken and fp16's skips in a row; read after :meth:`check`."""
        return {"steps": self.steps, "skipped": int(self.skipped)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Continue after ``state["steps"]`` steps (the first outputs were checked then)."""
        self.steps = self.checked_steps = int(state["steps"])
        self.step_count.fill_(self.steps)
        self.skipped.fill_(int(state["skipped"]))
        if self.compiled is not None and self.steps > 0:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        with torch.no_grad():
            torch._foreach_copy_(self.backup, self.state)

    def forward(self, x: torch.Tensor) -> object:
        """The model's outputs under autocast: logits (b, n_cls), or a tuple of them."""
        with autocast(self.device, self.recipe.precision):
            return self.net(x)

    def loss(self, outputs: object, targets: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The loss in fp32: cross-entropy, or the criterion in the forward pass's autocast."""
        if self.criterion is not None:  # a teacher's forward runs in the same precision
            with autocast(self.device, self.recipe.precision):
                return self.criterion(outputs, targets, x).float()
        logits = outputs if self.recipe.precision == "fp32" else outputs.float()
        return F.cross_entropy(logits, targets, label_smoothing=self.recipe.label_smoothing)

    def forward_loss(self, x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, object]:
        """``(loss, outputs)``: what ``compile=True`` compiles into one graph."""
        outputs = self.forward(x)
        return self.loss(outputs, targets, x), outputs

    def _compiled(self) -> Callable:
        on_gpu = self.device.type == "cuda"
        mode = "reduce-overhead" if on_gpu else None  # CUDA graphs where the shapes allow
        return torch.compile(self.forward_loss, fullgraph=True, dynamic=False, mode=mode)

    def _share(
        self, x: torch.Tensor, y: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
        """This process's share of the global batch, and whether it is a stand-in: without a
        share, the first image with weight 0 (DDP needs a backward pass in every process)."""
        if self.world == 1:
            return x, y, targets, False
        share = [t.tensor_split(self.world)[self.rank] for t in (x, y, targets)]
        if len(share[1]) == 0:
            return x[:1], y[:1], targets[:1], True
        return share[0], share[1], share[2], False

    def __call__(self, x: torch.Tensor, y: torch.Tensor, targets: torch.Tensor) -> None:
        """One optimizer step on the global batch: images (b, C, H, W), labels (b,), targets.

        Raises:
            ValueError: the first outputs do not fit the labels; at a read, see :meth:`check`.
        """
        n_global = len(y)
        first = self.steps == 0
        x, y, targets, stand_in = self._share(x, y, targets)
        with torch.no_grad():
            torch._foreach_copy_(self.backup, self.state)
        # Compiled, the gradients are summed into buffers of their own: a CUDA graph's outputs
        # are overwritten by its next replay, so .grad must never be one of them.
        self.optimizer.zero_grad(set_to_none=first or self.compiled is None)
        loss_finite = torch.ones((), dtype=torch.bool, device=self.device)
        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        step_correct = torch.zeros((), dtype=torch.int64, device=self.device)
        parts = min(self.recipe.accumulate, len(y))
        pieces = list(zip(*(t.tensor_split(parts) for t in (x, y, targets)), strict=True))
        for k, (xk, yk, tk) in enumerate(pieces):
            count = 0 if stand_in else len(yk)
            last = k == len(pieces) - 1
            no_sync = self.net.no_sync if self.world > 1 and not last else contextlib.nullcontext
            with no_sync():
                if first:  # eager, so that the first outputs can be read and checked
                    outputs = self.forward(xk)
                    if k == 0:
                        check_outputs(outputs, yk, tk, self.criterion is not None)
                    loss = self.loss(outputs, tk, xk)
                elif self.compiled is None:
                    loss, outputs = self.forward_loss(xk, tk)
                else:
                    if self.device.type == "cuda":  # a new step for the CUDA graphs
                        torch.compiler.cudagraph_mark_step_begin()
                    loss, outputs = self.compiled(xk, tk)
                weight = count * self.world / n_global  # the micro-batch's share of the batch
                self.scaler.scale(loss if weight == 1 else loss * weight).backward()
            loss_finite &= loss.isfinite()
            step_loss += loss.detach().double() * count
            hits = (logits_of(outputs).argmax(dim=1) == yk).sum()
            step_correct += hits if count else 0 * hits
        self._update(loss_finite, step_loss, step_correct, n_global)
        if self.steps - self.checked_steps >= self.sync_every:
            self.check()

    def _update(
        self,
        loss_finite: torch.Tensor,
        step_loss: torch.Tensor,
        step_correct: torch.Tensor,
        n_global: int,
    ) -> None:
        """Clip, update, and judge the step on the device: nothing is read to the host."""
        grads = [p.grad for p in self.params if p.grad is not None]
        ok = loss_finite | self.fp16  # in fp16 a non-finite loss is the scaler's to skip
        grads_finite = torch.ones((), dtype=torch.bool, device=self.device)
        if grads:
            if self.fp16:  # make the scaler see it, as it sees an overflowing gradient
                first = grads[0].view(-1)[:1]
                first.copy_(torch.where(loss_finite, first, float("nan")))
            self.scaler.unscale_(self.optimizer)  # a no-op unless fp16: the gradients' size
            norm = torch.nn.utils.get_total_norm(grads)  # not finite if a gradient is not
            if self.recipe.clip_grad_norm is not None:
                torch.nn.utils.clip_grads_with_norm_(self.params, self.recipe.clip_grad_norm, norm)
            grads_finite = norm.isfinite()
            if not self.fp16:  # with fp16, the scaler skips overflowing steps itself
                ok = ok & grads_finite
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.steps += 1
        self.step_count += 1
        floating = [t for t in self.state if t.is_floating_point()]
        # the largest |value|: not finite iff a value is not (a sum of squares could overflow)
        state_finite = torch.nn.utils.get_total_norm(floating, norm_type="inf").isfinite()
        local = ok & state_finite
        flags = torch.stack([local, loss_finite])
        if self.world > 1:  # every process takes the same decision
            flags = flags.to(torch.int32)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MIN)
            flags = flags.bool()
        fine, loss_fine = flags.unbind()
        kept = fine & loss_fine  # the update stands
        if self.fp16:  # a non-finite loss: skipped (the copy undoes the buffers), counted
            skip = ~loss_fine
            self.skipped = torch.where(skip, self.skipped + 1, 0)
            fails = (~kept & ~skip) | (self.skipped >= FP16_SKIPS_IN_A_ROW)
        else:
            fails = ~kept
        first_failure = fails & ~self.failed
        found = torch.stack([self.step_count.double(), *(
            f.double() for f in (loss_finite, grads_finite, state_finite, local)),
            step_loss, self.skipped.double()])  # fmt: skip
        self.failure = torch.where(first_failure, found, self.failure)
        self.failed = self.failed | fails
        self.good = good = kept & ~self.failed
        if self.sync_every > 1:  # the read comes later: the device keeps the last good state
            with torch.no_grad():
                for t, saved in zip(self.state, self.backup, strict=True):
                    torch.where(good, t, saved, out=t)
        self.loss_sum += torch.where(good, step_loss, 0.0)
        self.correct += step_correct * good
        self.counted += good.long() * n_global

    def check(self, sums: bool = False) -> tuple[float, int, int] | None:
        """Read the device's verdict since the last read (with ``sums``, the epoch's sums too).

        Returns:
            With ``sums``, ``(summed loss, correct, counted)`` of the epoch's kept steps.

        Raises:
            DivergenceError: a step's loss, gradients or updated state were not finite (fp16:
                10 non-finite losses in a row); the model keeps the state of the step before.
        """
        parts = [self.good.double()[None], self.failed.double()[None], self.failure]
        if sums:
            parts += [self.loss_sum[None], self.correct.double()[None],
                      self.counted.double()[None]]  # fmt: skip
        values = torch.cat(parts).tolist()  # the read
        self.checked_steps = self.steps
        if self.sync_every == 1 and not values[0]:  # read right after the step: undo it now
            with torch.no_grad():
                torch._foreach_copy_(self.state, self.backup)
        if values[1]:
            failure = dict(zip(FAILURE, values[2:], strict=False))
            raise DivergenceError(self._diagnosis(failure))
        if sums:
            return values[-3], int(values[-2]), int(values[-1])
        return None

    def _diagnosis(self, failure: dict[str, float]) -> str:
        """What went wrong at the failing step, in words."""
        where = self.where(int(failure["step"]))
        kept = (
            "training stopped before this step, so the model keeps the weights (and buffers) it "
            "had after the step before"
        )
        advice = (f"Lower lr (now {self.recipe.lr:g}), check the data and the model, or use "
                  "fewer epochs.")  # fmt: skip
        if failure["skipped"] >= FP16_SKIPS_IN_A_ROW:
            return (
                f"the fp16 training loss was not finite in {int(failure['skipped'])} steps in a "
                f"row, the last at {where}: the forward pass overflows fp16, which the gradient "
                f"scaler cannot fix; {kept}. Train with precision='bf16' or 'fp32'. {advice}"
            )
        if not failure["loss_finite"]:
            what = f"loss is {failure['loss']}"
        elif not failure["grads_finite"]:
            grads = [p.grad for p in self.params if p.grad is not None]
            if int(failure["step"]) != self.steps:  # later steps replaced the gradients
                what = "gradients are not finite, or their norm overflows"
            elif all(bool(g.isfinite().all()) for g in grads):
                what = "gradients' norm overflows (gradients of about 1e19 or more)"
            else:
                what = "gradients are not finite"
        elif not failure["state_finite"]:
            what = "update made the weights or buffers (a BatchNorm's statistics) not finite"
        else:
            what = "loss or gradients of another process are not finite"
        return f"the training {what} at {where}; {kept}. {advice}"


# What check() reads of the first failing step, in this order.
FAILURE = ("step", "loss_finite", "grads_finite", "state_finite", "local", "loss", "skipped")
