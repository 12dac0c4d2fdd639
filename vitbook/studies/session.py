"""A recording that spans many short GPU sessions: its state folder, the runs left, the budget.

``scripts/train_cifar10.py --state DIR --minutes M`` records runs ``(row, seed)`` in sessions of
``M`` minutes, on machines that may start bare, as long as ``DIR`` and the data file travel::

    DIR/plan.json                   what every run shares (data checksum, code version, torch,
                                    precision, compiling, model size, overrides)
    DIR/results.json                finished runs, one provenance entry per session; append-only
    DIR/runs/ROW-seedS.pt           an unfinished run's state (vitbook.train.resume), its identity
    DIR/runs/ROW-seedS.json         its progress: epochs done, seconds per epoch, sessions
    DIR/runs/ROW-seedS.done.json    a finished run's record, until results.json holds it
    DIR/runs/ROW-seedS.failed.json  a run that failed (not retried until removed)
    DIR/weights/ROW-seedS.safetensors  the weights of every seed 0 and every teacher
    DIR/cache/                      torch.compile's caches
    DIR/.session.lock               held by the recording session (StateFolder.session_lock)

A folder belongs to one identity (:meth:`StateFolder.claim`); anything that does not fit it is
refused, never mixed. :class:`StopRequest`, :func:`hard_deadline` and :class:`Checkpointer` stop
a run in time with its state saved; runs sharing the GPU: :mod:`vitbook.studies.budgets`.

See chapter: Real photos.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vitbook import _checks, _files
from vitbook.studies import records
from vitbook.train.resume import save_state

__all__ = ["Checkpointer", "OutOfTime", "StateFolder", "StateMismatchError", "StopRequest"]
__all__ += ["code_version", "hard_deadline"]

PACKAGE = Path(__file__).resolve().parents[1]  # vitbook/, every source of the package
LAYOUT = ("plan.json", "results.json", "runs", "weights", "cache")  # a state folder's own names
SESSION = "session"  # StateFolder.session_lock holds .session.lock


class StateMismatchError(ValueError):
    """A state folder, or a run's state in it, that belongs to another plan; says what differs.

    See chapter: Real photos.
    """


def code_version(*extra: str | os.PathLike) -> str:
    """A 16-hex checksum of vitbook's Python sources and of the ``extra`` files (a script).

    Example:
        >>> len(code_version()), code_version() == code_version()
        (16, True)

    See chapter: Real photos.
    """
    digest = hashlib.sha256()
    files = sorted(PACKAGE.rglob("*.py")) + [Path(p).resolve() for p in extra]
    for path in files:
        name = path.relative_to(PACKAGE) if PACKAGE in path.parents else path.name
        digest.update(f"{name}\n".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _differences(saved: dict, now: dict) -> list[str]:
    return [f"{k}: {saved.get(k)!r} there, {now.get(k)!r} here"
            for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]  # fmt: skip


def key_name(row: str, seed: int) -> str:
    """``"ROW-seedS"``, the stem of a run's files."""
    return f"{row}-seed{seed}"


class StateFolder:
    """The state folder of a recording (layout: the module's docstring); writes are atomic.

    See chapter: Real photos.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        if isinstance(root, str) and not root.strip():
            raise ValueError("--state '': an empty name is the current folder; name the state "
                             "folder, e.g. runs/state.")  # fmt: skip
        self.root = Path(root).expanduser()
        self.planned: dict[str, tuple[int, dict]] | None = None
        if _files.is_shipped(self.root):
            raise _files.ShippedFileError(
                f"{self.root} lies in vitbook/assets; keep a state folder elsewhere (runs/state, "
                "say) and merge its results.json into the shipped file when it is done."
            )
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"--state {self.root} is a file; name a folder (new or earlier).")
        self.runs, self.weights, self.cache = (self.root / n for n in ("runs", "weights", "cache"))
        self.plan_path, self.results_path = self.root / "plan.json", self.root / "results.json"

    def path(self, row: str, seed: int, suffix: str) -> Path:
        """``runs/ROW-seedS<suffix>`` (``.pt``, ``.json``, ``.done.json``, ``.failed.json``)."""
        return self.runs / f"{key_name(row, seed)}{suffix}"

    def weights_path(self, row: str, seed: int) -> Path:
        return self.weights / f"{key_name(row, seed)}.safetensors"

    def claim(
        self, identity: dict[str, object], *, planned: dict[str, tuple[int, dict]] | None = None
    ) -> bool:
        """Make the folder this identity's, or check that it is; True if it was new.

        Args:
            identity: what every run of the folder shares (its ``plan.json``).
            planned: row -> ``(epochs, recipe)``, which the runs of ``results.json`` and every
                ``.done.json`` must match; ``None``: only rows and seeds are checked.

        Raises:
            StateMismatchError: another identity (named field by field), results or runs but no
                ``plan.json``, files a state folder does not hold, runs of other epochs or recipes.
            vitbook._files.ResultsFileError: a ``results.json`` that is not one, or holds a NaN.
        """
        self.planned = None if planned is None else dict(planned)
        if self.root.is_dir():
            foreign = sorted(f"{p.name}{'/' * p.is_dir()}" for p in self.root.iterdir()
                             if p.name not in LAYOUT and not _temporary(p.name))  # fmt: skip
            if foreign:
                raise StateMismatchError(
                    f"{self.root} holds {', '.join(foreign[:5])}"
                    + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                    + ", which is not part of a state folder (plan.json, results.json, runs/, "
                    "weights/, cache/). Nothing trained. Give --state a new folder, or the "
                    "folder of the earlier sessions."
                )
        if not self.plan_path.exists():
            kept = [name for name, there in (
                ("results.json", self.results_path.exists()),
                ("runs/", self.runs.is_dir() and any(self.runs.iterdir()))) if there]  # fmt: skip
            if kept:
                raise StateMismatchError(
                    f"the state folder {self.root} holds {' and '.join(kept)} but no plan.json, "
                    "so what its runs share (the data, the code, the epochs...) cannot be "
                    "checked, and a new plan would mix other runs into them. Nothing trained. "
                    "Restore plan.json from a copy of the folder, or give --state a new folder."
                )
        for folder in (self.root, self.runs, self.weights, self.cache):
            _files.check_output(folder / ".probe")  # makes it, proves it writable
        if not self.plan_path.exists():
            _files.write_json(self.plan_path, identity)
            return True
        saved = _files.read_json(self.plan_path, remedy="restore the state folder from a copy.")
        differ = _differences(saved, identity)
        if differ:
            raise StateMismatchError(
                f"the state folder {self.root} records another setting ("
                + "; ".join(differ) + "). Nothing trained. Run with what it was started with "
                "(its plan.json: the commit in its sessions, the same data file), or give "
                "--state a new folder."
            )
        if self.results_path.exists():
            results = self.results()
            name = str(self.results_path)
            records.check_together([(name, results)], allow_mixed=True)  # runs, int seeds
            _files.check_finite(name, results, remedy="give --state a new folder.")
            for run in results["runs"]:
                if problem := self._against_plan(run, name):
                    raise StateMismatchError(
                        f"{problem}: the folder was recorded with other settings. Nothing "
                        "trained. Run with what it was started with, or give --state a new "
                        "folder."
                    )
        return False

    def _against_plan(self, run: object, where: str) -> str:
        """What does not fit the plan in a run's record (``""`` if it fits)."""
        if not isinstance(run, dict):
            return f"{where} holds {type(run).__name__}, not a run's record"
        row, seed = run.get("row"), run.get("seed")
        if not isinstance(row, str) or isinstance(seed, bool) or not isinstance(seed, int):
            return (f"{where} holds row {row!r} seed {seed!r} ({type(seed).__name__}); a row is "
                    "a name and a seed an int (seed '0' and 0 would count as two runs)")
        if self.planned is None:
            return ""
        if row not in self.planned:
            return (f"{where} holds a run of {row!r}, a row this folder's plan does not record "
                    f"({', '.join(self.planned)})")  # fmt: skip
        epochs, recipe = self.planned[row]
        if run.get("epochs") != epochs or run.get("recipe") != recipe:
            return (f"{where} holds {row} seed {seed} trained for {run.get('epochs')!r} epochs "
                    f"with recipe {run.get('recipe')!r}, but this folder's plan has {epochs} "
                    f"epochs and {recipe!r}")  # fmt: skip
        return ""

    def results(self) -> dict:
        if not self.results_path.exists():
            return {"runs": [], "provenance": []}
        return _files.read_json(self.results_path, remedy="restore it from a copy of the "
                                 "state folder; the finished runs are in it.")  # fmt: skip

    def recorded(self) -> set[tuple[str, int]]:
        return {(run["row"], run["seed"]) for run in self.results()["runs"]}

    def _write_results(self, results: dict, before: dict) -> None:
        """Write ``results``, refusing if it drops or changes an earlier run or session."""
        kept = results["runs"][: len(before["runs"])] == before["runs"]
        sessions = results["provenance"][: len(before["provenance"])]
        if not kept or [s.get("session") for s in sessions] != [
                s.get("session") for s in before["provenance"]]:  # fmt: skip
            raise RuntimeError(f"refusing to write {self.results_path}: it would lose runs.")
        _files.write_json(self.results_path, results)

    def session_lock(self, *, wait: bool | float = False) -> contextlib.AbstractContextManager:
        """Hold the folder for one session during the ``with`` block (an OS lock on
        ``.session.lock``, released when the process ends, even killed).

        Args:
            wait: ``False`` refuses at once, ``True`` waits, a number waits that many seconds.

        Raises:
            vitbook._files.FileHeldError: another session holds it; names its process.

        Example:
            >>> import tempfile
            >>> folder = StateFolder(tempfile.mkdtemp())
            >>> with folder.session_lock():
            ...     sorted(p.name for p in folder.root.iterdir())
            ['.session.lock']
        """
        return self._session_lock(wait)

    @contextlib.contextmanager
    def _session_lock(self, wait: bool | float) -> Iterator[None]:
        _files.check_output(self.root / ".probe")  # makes the folder, proves it writable
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(_files.hold(self.root / SESSION, wait=wait))
            except _files.FileHeldError as error:
                refused = _files.FileHeldError(
                    errno.EAGAIN,
                    f"another session records into the state folder {self.root}: "
                    f"{error.holder} (lock file {_files.lock_path(self.root / SESSION)}). Two "
                    "sessions at once would train the same runs. Nothing trained. Wait for it "
                    "to end, or give --state another folder; if that process is yours and "
                    "stuck, stop it (kill PID): the system then releases the lock, so never "
                    "delete the lock file by hand.",
                )
                refused.holder = error.holder
                raise refused from None
            yield

    def begin_session(self, entry: dict[str, object]) -> int:
        """Append a session's provenance entry; return its index (runs name it)."""
        with _files.hold(self.results_path, wait=True):
            before = self.results()
            index = len(before["provenance"])
            entry = {**entry, "session": index}
            self._write_results({**before, "provenance": [*before["provenance"], entry]}, before)
        return index

    def end_session(self, index: int, **fields: object) -> None:
        """Add what the session did (minutes used, runs finished) to its own entry.

        Raises:
            ValueError: no session ``index`` in ``results.json``; names those there are.
        """
        with _files.hold(self.results_path, wait=True):
            before = self.results()
            provenance = list(before["provenance"])
            count = len(provenance)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                there = ("holds no session" if not count else "holds session 0" if count == 1
                         else f"holds sessions 0 to {count - 1}")  # fmt: skip
                raise ValueError(
                    f"end_session({index!r}): {self.results_path} {there}; end the index that "
                    "begin_session returned (nothing was written)."
                )
            provenance[index] = {**provenance[index], **fields}
            self._write_results({**before, "provenance": provenance}, before)

    def join_finished(self) -> list[dict]:
        """Move the ``.done.json`` records into ``results.json`` in the order they finished,
        under the results' lock; return the runs joined now.

        Raises:
            StateMismatchError: a record not its file's run, not fitting the plan given to
                :meth:`claim`, or holding a NaN; it is named and kept, nothing is joined.
        """
        with _files.hold(self.results_path, wait=True):
            return self._join_finished()

    def _join_finished(self) -> list[dict]:
        before = self.results()
        have = {(run["row"], run["seed"]) for run in before["runs"]}
        done = []
        for path in sorted(self.runs.glob("*.done.json"), key=lambda p: p.stat().st_mtime):
            run = _files.read_json(path, remedy="train that run again (delete the file).")
            problem = self._against_plan(run, str(path))
            if not problem and path.name != f"{key_name(run['row'], run['seed'])}.done.json":
                problem = f"{path} holds {run['row']} seed {run['seed']}, not the run its name says"
            if not problem and (found := _files._first_non_finite(run)):
                problem = (f"{path} holds {found[1]} at {found[0]}, which JSON (results.json) "
                           "cannot hold; write null there, saying why beside it")  # fmt: skip
            if problem:
                raise StateMismatchError(
                    f"{problem}. Nothing joined: it belongs to another plan or was copied in; "
                    "move it out of runs/ (it is a finished run: keep it, and merge it where it "
                    "belongs), or run with the settings it was trained with."
                )
            if (run["row"], run["seed"]) not in have:
                done.append(run)
        if done:
            self._write_results({**before, "runs": [*before["runs"], *done]}, before)
        for run in [*before["runs"], *done]:  # recorded: the record and the state can go
            for suffix in (".done.json", ".pt"):
                self.path(run["row"], run["seed"], suffix).unlink(missing_ok=True)
        return done

    def failed(self) -> dict[tuple[str, int], str]:
        found = {}
        for path in self.runs.glob("*.failed.json"):
            entry = _files.read_json(path, remedy="delete it to train the run again.")
            found[entry["row"], entry["seed"]] = entry["error"]
        return found

    def progress(self, row: str, seed: int) -> dict | None:
        path = self.path(row, seed, ".json")
        return _files.read_json(path, remedy="delete it.") if path.exists() else None


def _temporary(name: str) -> bool:
    """A write killed midway (``*.tmp``, ``*.probe``) or one of the folder's own lock files."""
    locks = {f".{own}.lock" for own in (*LAYOUT, SESSION)}
    return name.startswith(".") and (name.endswith((".tmp", ".probe")) or name in locks)


# --- Stopping a run in time and saving it as it goes (fit's state: vitbook.train.resume).


class OutOfTime(BaseException):
    """Raised in the main thread when :func:`hard_deadline` passes; a ``BaseException`` so that
    no ``except Exception`` swallows it. The last saved state stands.

    See chapter: Real photos.
    """


class StopRequest:
    """A context manager (main thread) in which SIGTERM or SIGINT sets ``requested`` and
    ``reason``, a stop at the epoch's end; a second SIGINT stops at once.

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
    """Raise :class:`OutOfTime` in the main thread at ``clock() == deadline`` (``None``: never).

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
    """``fit``'s ``after_epoch`` that saves the state (:func:`vitbook.train.resume.save_state`)
    every ``save_every_s`` seconds (inf: never between), at the last epoch, and when it stops
    the run: on a stop request, or when the next epoch would not end before ``deadline``.

    Args:
        extra: added to the saved state (the run's identity).
        epochs: the run's epochs (the last is always saved).
        on_epoch: ``on_epoch(self)`` after every epoch.
        typical: an earlier session's epoch seconds, the estimate until an epoch past the first.

    Raises:
        ValueError / TypeError: ``save_every_s`` not > 0, ``deadline`` or ``typical`` not
            finite, ``epochs`` not >= 1.

    Attributes:
        epoch_seconds: this process's epoch lengths; ``stopped``: why it stopped (or ``""``).

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
        """:attr:`SAFETY` times the slowest of the last three epochs (the first, with its
        set-up, left out once ``typical`` or others stand in), plus the last save's time."""
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
