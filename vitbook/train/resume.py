"""Training that survives the end of a process: ``fit``'s whole state, saved and taken up again.

``fit(after_epoch=...)`` hands the caller, after every epoch, a function returning the run's state
(:func:`capture`); ``fit(resume=state)`` continues it to the run an uninterrupted process makes
(on the CPU bit for bit). The state holds the weights, the optimizer, schedule and scaler, every
generator ``fit`` draws from (its own, torch's global CPU one, the GPU's), the epochs, history and
steps done, and the arguments that decide the numbers (data checksums included), which a resumed
call must repeat.

:func:`save_state` writes a state atomically behind a sha256 header; :func:`load_state` checks it
and reads it without unpickling code. Stopping a run in time: :mod:`vitbook.studies.session`.

See chapter: Real photos.
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
from pathlib import Path

import torch

from vitbook import _files

__all__ = ["FORMAT", "TrainingStateError", "capture", "load_state", "restore", "save_state"]

FORMAT = 1  # the layout of a saved state; a file of another layout is refused
HEADER = b"vitbook training state, sha256 "  # a state file's first line, then its checksum


class TrainingStateError(ValueError):
    """A saved training state that cannot continue this run; the message says why and what to do.

    See chapter: Real photos.
    """


def _cpu(value: object) -> object:
    """A deep copy with every tensor on the CPU (training goes on after a capture)."""
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
        arguments: what decides the numbers (checked on resume).
        step: ``TrainStep.state_dict()``.
        generators: name -> every ``torch.Generator`` the loop draws from.
        history: the ``History``'s fields.

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
        TrainingStateError: another layout, other arguments (named, both values), epochs done
            not within ``0 .. epochs`` or not its history's length, or another model. The
            state is left unchanged.

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
    history = state.get("history")
    counts = {"train_loss": epoch, "train_accuracy": epoch, "seconds": epoch,
              "eval_accuracy": 0 if arguments.get("eval_images") is None else epoch}  # fmt: skip
    for key, count in counts.items():
        held = history.get(key) if isinstance(history, dict) else None
        if not isinstance(held, list) or len(held) != count:
            what = f"holds {len(held)} {key}" if isinstance(held, list) else f"has no {key} list"
            raise TrainingStateError(
                f"the training state says {epoch} epochs are done but its history {what} "
                f"(it should hold {count}); the state is damaged or was edited: start the run "
                "again without resume."
            )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise TrainingStateError(
            f"the training state holds the weights of another model ({str(error)[:300]}); "
            "resume the model it was saved from."
        ) from error
    # Copies: the optimizer updates its moments in place, fit appends to the history, and the
    # state may be resumed again.
    optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    scheduler.load_state_dict(copy.deepcopy(state["scheduler"]))
    scaler.load_state_dict(state["scaler"])
    for name, generator in generators.items():
        generator.set_state(state["generators"][name])
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    return {**state, "history": copy.deepcopy(history)}


def save_state(path: str | os.PathLike, state: dict[str, object]) -> None:
    """Write a state to ``path`` atomically: a header line with the sha256 of the
    ``torch.save`` bytes that follow it.

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
        TrainingStateError: a folder, or a file that is not a :func:`save_state` state (a
            changed byte, cut short, another layout, no checksum); names it and the fix.

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
