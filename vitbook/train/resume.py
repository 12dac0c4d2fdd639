"""Training that survives the end of a process: ``fit``'s whole state, saved and taken up again.

A run on a GPU lent for ten minutes, on a preemptible machine or in a Colab session that
disconnects ends before its 200 epochs. ``fit(after_epoch=...)`` hands the caller, after every
epoch, a function that returns the run's whole training state; ``fit(resume=state)`` continues
from it, and the finished run is the run an uninterrupted process would have made (on the CPU,
bit for bit: ``tests/test_resume.py``). The state (:func:`capture`) holds

- the model's weights and buffers, the optimizer's state (AdamW's moments and step counts), the
  learning-rate schedule's position and the gradient scaler's scale;
- every random generator the loop draws from: the generator of the order (and of augmentation
  and mixing, or theirs where they live on another device), torch's global CPU generator
  (dropout and stochastic depth on the CPU) and the training GPU's generator (on a GPU); python's
  ``random`` and numpy's generators are not drawn from by ``fit``;
- the epochs done, the history so far, the steps taken, and the arguments of ``fit`` that
  decide the numbers (``epochs``, ``lr``, ``batch_size``, ``seed``, the number of images, a
  checksum of the training and evaluation data, the augmentation and mix with their settings
  (their strengths)...), which a resumed call must repeat: a state made with other ones, or
  whose epochs done are not within ``epochs``, is refused.

:func:`save_state` writes a state atomically (a reader sees the old file or the new one, never
half of one), its ``torch.save`` bytes after a header line that holds their sha256, and
:func:`load_state` reads it back without unpickling code (``torch.load(weights_only=True)``)
once the checksum holds, with errors that name the file and say what to do: a changed byte (a
disk, a copy) is found, not trained on. A :class:`Checkpointer` is an
``after_epoch`` that saves every few minutes and stops a run in time: when SIGTERM or SIGINT ask
(:class:`StopRequest`) or when the next epoch would not end before a deadline, with
:func:`hard_deadline` as a safety net. ``vitbook.studies.session`` builds the recording of the photo
ladder on these (a state folder, budgets of minutes).

See chapter: Real photos.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch

from vitbook import _checks, _files

__all__ = [
    "FORMAT",
    "Checkpointer",
    "OutOfTime",
    "StopRequest",
    "TrainingStateError",
    "capture",
    "hard_deadline",
    "load_state",
    "restore",
    "save_state",
]

FORMAT = 1  # the layout of a saved state; a file of another layout is refused
HEADER = b"vitbook training state, sha256 "  # a state file's first line, then its checksum


class TrainingStateError(ValueError):
    """A saved training state that cannot continue this run; the message says why and what to do.

    See chapter: Real photos.
    """


def _cpu(value: object) -> object:
    """A deep copy with every tensor on the CPU: training may go on after the capture."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu(v) for v in value)
    return copy.deepcopy(value)


def capture(
    *,
    arguments: dict[str, object],
    epoch: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    step: dict[str, object],
    generators: dict[str, torch.Generator],
    history: dict[str, object],
    device: torch.device,
) -> dict[str, object]:
    """``fit``'s whole training state after ``epoch`` epochs, copied to the CPU.

    Args:
        arguments: the arguments of ``fit`` that decide the numbers (checked on resume).
        epoch: epochs done.
        model, optimizer, scheduler, scaler: as ``fit`` built them.
        step: ``TrainStep.state_dict()``.
        generators: name -> every ``torch.Generator`` the loop draws from.
        history: the ``History``'s fields.
        device: the training device (its GPU generator is saved on a GPU).

    See chapter: Real photos.
    """
    state = {
        "format": FORMAT,
        "arguments": dict(arguments),
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "step": dict(step),
        "generators": {name: g.get_state() for name, g in generators.items()},
        "torch_rng": torch.get_rng_state(),
        "history": dict(history),
    }
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    return _cpu(state)


def restore(
    state: object,
    *,
    arguments: dict[str, object],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    generators: dict[str, torch.Generator],
    device: torch.device,
) -> dict[str, object]:
    """Put a state of :func:`capture` back into what ``fit`` built; return it (``"epoch"``,
    ``"step"``, ``"history"`` are for ``fit``).

    Raises:
        TypeError: ``state`` is not a dict of :func:`capture`.
        TrainingStateError: a state of another layout, or one made with other arguments (named,
            with both values: the data's checksum and the augmentation's settings among them),
            whose epochs done are not an int within ``0 .. epochs``, or of another model (the
            weights do not fit).

    See chapter: Real photos.
    """
    if not isinstance(state, dict) or "arguments" not in state:
        raise TypeError(
            f"resume must be a training state that fit handed to after_epoch (a dict), got "
            f"{type(state).__name__}; load one with vitbook.train.resume.load_state(path)."
        )
    if state.get("format") != FORMAT:
        raise TrainingStateError(
            f"the training state has layout {state.get('format')!r}, this vitbook reads layout "
            f"{FORMAT}; finish the run with the vitbook that saved it, or start it again."
        )
    saved = state["arguments"]
    differ = [f"{k}={saved.get(k)!r} then, {arguments.get(k)!r} now"
              for k in sorted(set(saved) | set(arguments))
              if saved.get(k) != arguments.get(k)]  # fmt: skip
    if differ:
        raise TrainingStateError(
            "the training state was saved by a fit with other arguments (" + "; ".join(differ)
            + "); resume with the arguments it was saved with, or start the run again "
            "without resume."
        )
    epoch, epochs = state.get("epoch"), arguments.get("epochs")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= epochs:
        raise TrainingStateError(
            f"the training state says {epoch!r} epochs are done, but this fit trains {epochs}; "
            "the state is damaged or was edited: start the run again without resume."
        )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise TrainingStateError(
            f"the training state holds the weights of another model ({str(error)[:300]}); "
            "resume the model it was saved from."
        ) from error
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    for name, generator in generators.items():
        generator.set_state(state["generators"][name])
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    return state


def save_state(path: str | os.PathLike, state: dict[str, object]) -> None:
    """Write a training state to ``path`` atomically (into a temporary file that is flushed to
    the disk and then moved into place; see :func:`vitbook._files.write_with`): a header line
    with the sha256 of the ``torch.save`` bytes that follow it.

    See chapter: Real photos.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    _files.write_bytes(path, HEADER + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)


def load_state(path: str | os.PathLike) -> dict[str, object]:
    """A training state saved by :func:`save_state`, on the CPU, read without unpickling code.

    Raises:
        FileNotFoundError: no file at ``path``.
        TrainingStateError: a folder at ``path``, or a file that is not a training state of
            :func:`save_state` (a changed byte, which its checksum finds; cut short; another
            format; a state saved without the checksum), naming it, with what to do.

    See chapter: Real photos.
    """
    path = Path(path)
    remedy = (f"delete {path} to train that run again from its start (its earlier epochs are "
              "lost), or restore the file from a copy of the state folder")  # fmt: skip
    if path.is_dir():
        raise TrainingStateError(f"{path} is a folder, not a training state; move it away (a "
                                 f"run's state is a file), then {remedy}.")  # fmt: skip
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; there is no saved training state there.")
    raw = path.read_bytes()
    head, _, data = raw.partition(b"\n")
    checked = head.startswith(HEADER)
    if checked and head[len(HEADER):] != hashlib.sha256(data).hexdigest().encode():
        raise TrainingStateError(
            f"{path} is not a readable training state (its bytes do not match the sha256 saved "
            f"with them: damaged on the disk or in a copy, or cut short); {remedy}."
        )
    try:
        state = torch.load(io.BytesIO(data if checked else raw), map_location="cpu",
                           weights_only=True)  # fmt: skip
    except Exception as error:  # a damaged zip, a pickle that is not plain data...
        raise TrainingStateError(
            f"{path} is not a readable training state ({type(error).__name__}: "
            f"{str(error)[:200]}); {remedy}."
        ) from error
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise TrainingStateError(f"{path} is not a training state of layout {FORMAT}; {remedy}.")
    if not checked:
        raise TrainingStateError(
            f"{path} holds a training state without a checksum (torch.save's bytes alone, not "
            f"save_state's), so a damaged byte could not be found; {remedy}."
        )
    return state


class OutOfTime(BaseException):
    """Raised in the main thread when a run's hard deadline passes (see :func:`hard_deadline`).

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` on the way
    swallows it. The epoch in progress is lost; the last saved state stands.

    See chapter: Real photos.
    """


class StopRequest:
    """SIGTERM or SIGINT asks a run to stop at its epoch's end (its state is saved then); a
    second SIGINT (Ctrl-C twice) stops at once, losing the epoch in progress.

    Use it as a context manager around training, in the main thread; it puts the previous
    handlers back on exit. ``requested`` says whether a stop was asked for, ``reason`` by what.

    See chapter: Real photos.
    """

    def __init__(self) -> None:
        self.requested, self.reason = False, ""
        self._previous: dict[int, object] = {}

    def ask(self, reason: str) -> None:
        """Ask for a stop at the epoch's end, as a signal does."""
        self.requested, self.reason = True, reason

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt("a second Ctrl-C: stopped at once")
        self.ask(signal.Signals(signum).name)

    def __enter__(self) -> StopRequest:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def hard_deadline(deadline: float | None, clock: Callable[[], float] = time.monotonic):
    """Raise :class:`OutOfTime` in the main thread when ``clock()`` reaches ``deadline``.

    A safety net under :class:`Checkpointer`, which stops before the deadline when its estimate
    of the next epoch holds; this one stops a run whose epoch took longer than estimated.
    ``None``: no deadline.

    See chapter: Real photos.
    """
    if deadline is None:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise OutOfTime(f"the deadline passed {clock() - deadline:.1f} s ago")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - clock(), 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Checkpointer:
    """``fit``'s ``after_epoch`` for a run that must stop in time: it saves the training state
    every ``save_every_s`` seconds, at the last epoch, and whenever it stops the run, which it
    does when a stop is requested or when the next epoch (and its save) would not end before
    ``deadline``.

    Args:
        path: the state file (written with :func:`save_state`).
        extra: added to the saved state (the run's identity, say).
        deadline: a ``clock()`` time to stop by; ``None`` for none.
        save_every_s: seconds between two saves while the run goes on.
        stop: a :class:`StopRequest` (signals), or ``None``.
        epochs: the run's epochs (the last one is always saved).
        on_epoch: ``on_epoch(self)``, called after every epoch (progress files).
        typical: an epoch's seconds measured before (an earlier session), the estimate until
            this process has timed an epoch past its first (which includes compiling).
        clock: the clock of ``deadline``.

    Raises:
        ValueError / TypeError: ``save_every_s`` that is not a number > 0 (NaN included; inf
            saves only at the last epoch and at a stop), a ``deadline`` or ``typical`` that is
            not a finite number (``typical`` >= 0), ``epochs`` that are not an int >= 1.

    Attributes:
        epoch_seconds: this process's epochs, each from the end of the one before (the first
            from the checkpointer's making: it includes set-up and compiling).
        stopped: why it stopped the run (``""`` while it goes on).

    See chapter: Real photos.
    """

    SAFETY = 1.25  # the next epoch is estimated as this times the slowest of the last three

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        extra: dict[str, object] | None = None,
        deadline: float | None = None,
        save_every_s: float = 60.0,
        stop: StopRequest | None = None,
        epochs: int | None = None,
        on_epoch: Callable[[Checkpointer], None] | None = None,
        typical: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(save_every_s, bool) or not isinstance(save_every_s, int | float):
            raise TypeError(f"save_every_s must be a number, got {save_every_s!r} of type "
                            f"{type(save_every_s).__name__}; e.g. 60.0.")  # fmt: skip
        if not save_every_s > 0:  # NaN too
            raise ValueError(f"save_every_s={save_every_s!r} must be a number of seconds > 0; "
                             "e.g. 60.0 (inf: save only at the last epoch and at a stop).")
        if deadline is not None:
            _checks.real("deadline", deadline, fix="pass a clock() time, or None for none")
        if typical is not None:
            _checks.real("typical", typical, low=0, fix="pass an epoch's seconds, or None")
        if epochs is not None:
            _checks.integer("epochs", epochs, minimum=1, fix="pass the run's epochs, or None")
        self.path, self.extra, self.deadline = Path(path), dict(extra or {}), deadline
        self.save_every_s, self.stop, self.epochs = save_every_s, stop, epochs
        self.on_epoch, self.typical, self.clock = on_epoch, typical, clock
        self.last = self.saved_at = clock()
        self.epoch_seconds: list[float] = []
        self.save_seconds, self.epochs_done, self.stopped = 0.0, 0, ""

    def next_epoch_seconds(self) -> float:
        """The next epoch's expected length, saving included: the slowest of the last three
        epochs (leaving out the first, with its set-up, once there are others, or while
        ``typical`` stands in for them) times :attr:`SAFETY`, plus the last save's time."""
        fallback = [self.typical] if self.typical is not None else self.epoch_seconds
        timed = self.epoch_seconds[1:] or fallback
        return self.SAFETY * max(timed[-3:], default=0.0) + self.save_seconds

    def __call__(self, done: int, state: Callable[[], dict]) -> bool:
        now = self.clock()
        self.epoch_seconds.append(now - self.last)
        self.epochs_done = done
        last = self.epochs is not None and done >= self.epochs
        if self.stop is not None and self.stop.requested:
            self.stopped = f"asked to stop ({self.stop.reason})"
        elif not last and self.deadline is not None:
            if now + self.next_epoch_seconds() > self.deadline:
                self.stopped = "the next epoch would not end before the deadline"
        near = self.deadline is not None and self.deadline - now < 3 * self.next_epoch_seconds()
        if self.stopped or last or near or now - self.saved_at >= self.save_every_s:
            start = self.clock()
            save_state(self.path, {**state(), **self.extra})
            self.saved_at = self.clock()
            self.save_seconds = self.saved_at - start
        if self.on_epoch is not None:
            self.on_epoch(self)
        self.last = self.clock()
        return bool(self.stopped)
