"""Sessions of any length for ``train_cifar10.py --state DIR``: a state folder, a budget, runs
side by side.

The script's own module. :func:`record` is one session: it claims the folder
(``vitbook.studies.session.StateFolder``) and trains the runs left within ``--minutes``, here
(:func:`record_run`) or side by side in processes of their own (:func:`side_by_side`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _cifar10_runs as runs
import torch

from vitbook import _files
from vitbook.data.cifar import ImageSplits
from vitbook.studies.budgets import Concurrency, budgets_left
from vitbook.studies.ladder import ALL_ROWS, H100_SECONDS_PER_EPOCH, plan_cost, recipe
from vitbook.studies.session import (
    Checkpointer,
    OutOfTime,
    StateFolder,
    StateMismatchError,
    StopRequest,
    code_version,
    hard_deadline,
)
from vitbook.train import resolve_precision
from vitbook.train import resume as training_state
from vitbook.train.step import DivergenceError

SCRIPT = Path(__file__).resolve().with_name("train_cifar10.py")  # a worker runs it again
SESSION_NOTE = ("wall_clock_minutes: the sum of the run's epochs over the sessions that trained "
                "it (validation, and compiling at each session's first epoch, included), longer "
                "than a run alone when runs share the GPU")  # fmt: skip
EXIT_MARGIN_S = 10.0  # a session's runs stop this much before its budget (at most 5% of it)
# fit(compile=True)'s epoch of the photo ViT on an H100, as measured (crop and flip, batch 256)
H100_COMPILED = H100_SECONDS_PER_EPOCH["fit(compile=True), crop and flip"]


def print_plan(args) -> None:
    """The plan in recording order, priced from fit(compile=True)'s measured H100 epoch."""
    if args.plan_name == "cpu":  # priced by the machine it runs on: its sessions measure it
        print(f"The CPU plan: {len(args.order)} run(s), each priced by the epochs a session "
              "measures on its own machine:")
        for row, seed in args.order:
            print(f"  {row} seed {seed}: {args.epochs or ALL_ROWS[row]['epochs']} epochs")
        return
    seconds = H100_COMPILED
    cost = plan_cost(seconds, args.order)
    print(f"The plan: {len(cost)} runs in recording order; minutes at {seconds} s an epoch, "
          "fit(compile=True) on an H100 (crop and flip, no validation; measured at 38c1719):")
    for row, seed, epochs, minutes in cost:
        epochs = args.epochs or epochs
        shown = "not measured" if minutes is None else f"{epochs * seconds / 60:.1f} min"
        print(f"  {row} seed {seed}: {epochs} epochs, {shown}")
    timed = [(args.epochs or e) * seconds / 60 for *_, e, m in cost if m is not None]
    untimed = sorted({row for row, _, _, m in cost if m is None})
    print(f"Timed runs: {len(timed)}, at least {sum(timed):.1f} H100-minutes (their RandAugment, "
          "mixing, erasing and validation add to the measured epoch); never timed on a GPU: "
          f"{len(cost) - len(timed)} runs of {', '.join(untimed) or 'no row'}.")  # fmt: skip
    budget = args.minutes or 10.0
    if not timed:
        print(f"In budgets of {budget:g} minutes: none of these runs has a measured epoch, so no "
              "count; a session of them measures its own (the report after it counts the "
              "budgets left).")  # fmt: skip
        return
    print(f"In budgets of {budget:g} minutes: at least {math.ceil(sum(timed) / budget)} for the "
          "timed runs alone, before each session's start and compiling (51 s cold, on the H100 "
          "above) and the untimed runs.")  # fmt: skip


def folder_identity(args, splits: ImageSplits, device: torch.device) -> dict:
    """What every run of a state folder shares (vitbook.studies.session.StateFolder.claim)."""
    return {
        "data_sha256": splits.sha256,
        "data_photos": [len(splits.train[1]), len(splits.val[1]), len(splits.test[1])],
        "code_version": code_version(SCRIPT, runs.__file__, __file__),  # the script and its modules
        "torch": str(torch.__version__),
        "precision": resolve_precision("auto", device),
        "compile": runs.compiles(args, device),
        "model": "tiny" if args.tiny
        else "photo ViT" if args.plan_name == "next" else "CPU photo ViT",
        "epochs_override": args.epochs,
        "batch_size_override": args.batch_size,
    }


def planned_rows(args) -> dict[str, tuple[int, dict]]:
    """Row -> (epochs, recipe) of every row a state folder of this identity records."""
    rows = runs.PLANS[args.plan_name][0]
    return {name: (runs.epochs_of(name, args), recipe(name, args.batch_size)) for name in rows}


def teachers_of(args) -> set[tuple[str, int]]:
    """Runs whose weights a distilled run of the plan needs."""
    return {(ALL_ROWS[name]["teacher"], seed) for name, seed in args.order
            if "teacher" in ALL_ROWS[name]}  # fmt: skip


def record_run(row: str, seed: int, splits: ImageSplits, args, identity: dict,
               device: torch.device, session: int, deadline: float | None,
               stop: StopRequest) -> str:  # fmt: skip
    """Train one run of a state folder from where it stopped, until it ends or must stop.

    Returns what happened: ``"finished"`` (its record is in ``runs/ROW-seedS.done.json``),
    ``"stopped: why"`` (its state is saved) or ``"out of time"`` (the epoch in progress lost).
    """
    folder: StateFolder = args.folder
    state_path = folder.path(row, seed, ".pt")
    run_identity = {**identity, "row": row, "seed": seed, "epochs": runs.epochs_of(row, args),
                    "recipe": recipe(row, args.batch_size)}  # fmt: skip
    resume = None
    if state_path.exists():
        resume = training_state.load_state(state_path)
        saved = resume.get("identity", {})
        differ = [f"{k}: {saved.get(k)!r} there, {run_identity.get(k)!r} here"
                  for k in sorted(set(saved) | set(run_identity))
                  if saved.get(k) != run_identity.get(k)]  # fmt: skip
        if differ:
            raise StateMismatchError(
                f"{state_path} holds another run ({'; '.join(differ)}). Nothing trained. Run "
                f"with what it was started with, or delete {state_path} to train {row} seed "
                f"{seed} again from its start.")  # fmt: skip
    progress = folder.progress(row, seed) or {"row": row, "seed": seed, "timing": []}
    earlier = [t for timing in progress["timing"] for t in timing["seconds"][1:]]
    timing = {"session": session, "side_by_side": args.side_by_side, "seconds": []}
    progress["timing"].append(timing)

    def on_epoch(checkpointer: Checkpointer) -> None:
        timing["seconds"].append(round(checkpointer.epoch_seconds[-1], 4))
        progress["epochs"] = checkpointer.epochs_done
        _files.write_json(folder.path(row, seed, ".json"), progress)

    checkpointer = Checkpointer(
        state_path, extra={"identity": run_identity}, deadline=deadline,
        save_every_s=60 * (args.save_every or 1.0), stop=stop, epochs=runs.epochs_of(row, args),
        on_epoch=on_epoch, typical=max(earlier[-3:], default=None))  # fmt: skip
    try:
        with hard_deadline(deadline):
            result, model = runs.run(row, seed, splits, args, device, 0, resume=resume,
                                after_epoch=checkpointer)  # fmt: skip
            if result is None:
                return f"stopped: {checkpointer.stopped}"
            result.update(process=session, sessions=sorted(
                {t["session"] for t in progress["timing"]}))  # fmt: skip
            if seed == 0 or (row, seed) in teachers_of(args):
                runs.save_weights(model, folder.weights_path(row, seed), result)
                if "inside" in result:
                    _files.write_json(folder.weights / f"{row}-seed{seed}-readout.json",
                                       result["inside"])  # fmt: skip
            _files.write_json(folder.path(row, seed, ".done.json"), result)
    except OutOfTime:
        return "out of time"
    except DivergenceError as error:
        _files.write_json(folder.path(row, seed, ".failed.json"),
                           {"row": row, "seed": seed, "error": str(error)})  # fmt: skip
        return f"failed: {error}"
    return "finished"


def ready(args, key: tuple[str, int]) -> bool:
    """A run can start: a distilled run once its teacher's weights are in the folder."""
    teacher = ALL_ROWS[key[0]].get("teacher")
    return teacher is None or args.folder.weights_path(teacher, key[1]).is_file()


def work(args, parser: argparse.ArgumentParser) -> int:
    """One run of a session, in a process of its own (the session started it)."""
    row, seed = args.worker.rsplit(":", 1)
    args.side_by_side = int(args.beside)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    splits = runs.load_splits(args)
    identity = folder_identity(args, splits, device)
    try:
        args.folder.claim(identity, planned=planned_rows(args))
    except (StateMismatchError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    with StopRequest() as stop:
        what = record_run(row, int(seed), splits, args, identity, device, int(args.session),
                          float(args.deadline) if args.deadline else None, stop)  # fmt: skip
    print(f"{row} seed {seed}: {what}", flush=True)
    return 0


def epoch_times(args, session: int) -> dict[str, float]:
    """Row -> the median epoch of this session's runs, first epochs left out where others exist."""
    found: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    for row, seed in args.order:
        progress = args.folder.progress(row, seed) or {"timing": []}
        for timing in progress["timing"]:
            if timing["session"] == session:
                found.setdefault(row, []).extend(timing["seconds"][1:])
                firsts.setdefault(row, []).extend(timing["seconds"][:1])
    return {row: statistics.median(found.get(row) or firsts[row]) for row in firsts}


class Worker:
    """A run trained by a process of its own, side by side with others."""

    def __init__(self, args, key: tuple[str, int], session: int, deadline: float | None,
                 beside: int) -> None:  # fmt: skip
        self.key, self.started = key, time.monotonic()
        command = [sys.executable, str(SCRIPT), *args.argv, "--worker",
                   f"{key[0]}:{key[1]}", "--session", str(session), "--beside", str(beside)]
        if deadline is not None:
            command += ["--deadline", repr(deadline)]
        self.log = args.folder.runs / f"{key[0]}-seed{key[1]}.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def epochs(self, args, session: int) -> list[float]:
        progress = args.folder.progress(*self.key) or {"timing": []}
        return [s for t in progress["timing"] if t["session"] == session for s in t["seconds"]]


def side_by_side(args, todo: list, session: int, deadline: float | None,
                 stop: StopRequest, chooser: Concurrency) -> list[str]:  # fmt: skip
    """Run the plan's unfinished runs in processes of their own, as many at once as measured.

    The first run started is the reference of the measurement (see ``Concurrency``); when it
    ends before it was measured with one more run beside it, the count stays where it is.
    """
    running: list[Worker] = []
    notes: list[str] = []
    reference: Worker | None = None
    measuring: dict[int, int] = {}  # runs at once -> the reference's epochs when measuring began
    while True:
        for worker in [w for w in running if w.process.poll() is not None]:
            running.remove(worker)
            log = worker.log.read_text()
            lines = log.strip().splitlines()
            notes.append(lines[-1] if lines else f"{worker.key}: no output")
            if worker.process.returncode != 0:
                notes.append(f"{worker.key[0]} seed {worker.key[1]} stopped with an error "
                             f"(exit {worker.process.returncode}); see {worker.log}")  # fmt: skip
                if "out of memory" in log:  # too many at once: one fewer, the run goes back
                    chooser.target, chooser.settled = max(1, len(running)), True
                    todo.insert(0, worker.key)
            if worker is reference:
                chooser.settled = True
            args.folder.join_finished()
        left = None if deadline is None else deadline - time.monotonic()
        startable = [key for key in todo if ready(args, key)]
        if stop.requested or (left is not None and left <= 0):
            startable = []
        while len(running) < chooser.target and startable:
            key = startable.pop(0)
            todo.remove(key)
            running.append(Worker(args, key, session, deadline, chooser.target))
            reference = reference or running[0]
        if running and not chooser.settled:
            measure(args, running, session, chooser, measuring)
            while len(running) > chooser.target:  # measured: fewer at once do more
                newest = running.pop()
                newest.process.send_signal(signal.SIGTERM)  # it saves at its epoch's end
                newest.process.wait()
                todo.insert(0, newest.key)
            if chooser.settled:
                print(f"side by side: {chooser.describe()}", flush=True)
        if not running:
            return notes
        if stop.requested:
            for worker in running:
                worker.process.send_signal(signal.SIGTERM)
        if deadline is not None and time.monotonic() > deadline + 2 * EXIT_MARGIN_S:
            for worker in running:  # past its own hard deadline: its last save stands
                worker.process.kill()
        time.sleep(0.2)


def measure(args, running: list[Worker], session: int, chooser: Concurrency,
            measuring: dict[int, int]) -> None:  # fmt: skip
    """Feed the chooser the reference run's epoch time with len(running) runs training."""
    count = len(running)
    if count != chooser.target:
        return
    reference = running[0].epochs(args, session)
    others_train = all(len(w.epochs(args, session)) >= 1 for w in running[1:])
    if count not in measuring:
        if others_train and len(reference) >= 1:  # past compiling, every run in its epochs
            measuring[count] = len(reference)
        return
    since = reference[measuring[count]:]
    if len(since) >= 2:
        chooser.observe(count, statistics.median(since))


def record(args, parser: argparse.ArgumentParser) -> int:
    """One session of a state folder: the runs left, within --minutes, then a report; a second
    session on the folder is refused (StateFolder.session_lock) before it trains."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(args.folder.session_lock())
        except OSError as error:  # FileHeldError: another session holds it; or not writable
            parser.exit(2, f"{parser.prog}: {error}\n")
        return _record(args, parser)


def _record(args, parser: argparse.ArgumentParser) -> int:
    start = args.started
    budget_s = 60 * args.minutes if args.minutes else None
    deadline = None if budget_s is None else start + budget_s - min(EXIT_MARGIN_S, budget_s / 20)
    folder: StateFolder = args.folder
    for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        os.environ.setdefault(name, str(folder.cache / sub))  # no recompiling next session
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    splits = runs.load_splits(args)
    identity = folder_identity(args, splits, device)
    try:
        new = folder.claim(identity, planned=planned_rows(args))
        folder.join_finished()  # runs an earlier session finished but did not record
    except (StateMismatchError, OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    recorded, failed = folder.recorded(), folder.failed()
    todo = [key for key in args.order if key not in recorded and key not in failed]
    gpu = torch.cuda.is_available()
    if str(args.processes).startswith("auto"):
        most = int(args.processes[5:]) if args.processes != "auto" else 8 if gpu else 1
        chooser = Concurrency(most=most)
    else:
        chooser = Concurrency(most=args.processes)
        chooser.target, chooser.settled = args.processes, True
    args.side_by_side = chooser.target
    entry = {**runs.provenance(args, splits, 1, device), "budget_minutes": args.minutes,
             "timing": SESSION_NOTE}  # fmt: skip
    session = folder.begin_session(entry)
    print(f"Session {session} of {folder.root} ({'new' if new else 'continued'}): "
          f"{sum(key in recorded for key in args.order)} of {len(args.order)} runs recorded, "
          f"{len(todo)} to go"
          + (f", {len(failed)} failed earlier" if failed else "")
          + (f"; {args.minutes:g} minutes" if args.minutes else ""), flush=True)  # fmt: skip
    notes = []
    try:
        with StopRequest() as stop:
            one_session(args, todo, splits, identity, device, session, deadline, stop, chooser,
                        notes)  # fmt: skip
        finished = folder.join_finished()
    except (StateMismatchError, training_state.TrainingStateError) as error:
        end_failed(folder, session, start, str(error))
        parser.exit(2, f"{parser.prog}: {error}\n")
    except BaseException as error:  # whatever stopped it, the session's entry says so
        end_failed(folder, session, start, f"{type(error).__name__}: {error}")
        raise
    used = (time.monotonic() - start) / 60
    folder.end_session(session, minutes=round(used, 3), side_by_side=chooser.target,
                       concurrency=concurrency(args, chooser), ended=now_iso())  # fmt: skip
    report(args, session, used, chooser, notes, finished)
    return 0


def end_failed(folder: StateFolder, session: int, start: float, error: str) -> None:
    """End the provenance entry of a session that stopped with an error, with the error."""
    try:
        folder.end_session(session, minutes=round((time.monotonic() - start) / 60, 3),
                           ended=now_iso(), error=error)  # fmt: skip
    except (OSError, ValueError) as failure:  # a full disk, say: the error above still stands
        print(f"could not end session {session} in {folder.results_path} ({failure})",
              file=sys.stderr)


def concurrency(args, chooser: Concurrency) -> str:
    """How many runs shared the device, and how that was chosen."""
    if not str(args.processes).startswith("auto"):
        return f"{chooser.target} at a time, as --processes asked"
    if args.processes == "auto" and not torch.cuda.is_available():
        return "1 at a time (on a CPU, runs side by side would share its cores)"
    return chooser.describe()


def one_session(args, todo, splits, identity, device, session, deadline, stop, chooser,
                notes) -> None:  # fmt: skip
    """The session's runs: one at a time in this process, or side by side in their own."""
    if not (chooser.settled and chooser.target == 1):
        notes += side_by_side(args, todo, session, deadline, stop, chooser)
        return
    for key in list(todo):  # one at a time, in this process
        left = None if deadline is None else deadline - time.monotonic()
        if stop.requested or (left is not None and left <= 0):
            return
        if not ready(args, key):
            continue
        try:
            what = record_run(*key, splits, args, identity, device, session, deadline, stop)
        except (StateMismatchError, training_state.TrainingStateError):
            raise  # the folder's business: the session stops
        except (ValueError, RuntimeError) as error:  # a bad teacher file, out of memory...
            notes.append(f"{key[0]} seed {key[1]} stopped with an error: {error}")
            continue
        notes.append(f"{key[0]} seed {key[1]}: {what}")
        args.folder.join_finished()
        if not what.startswith(("finished", "failed")):
            return


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def report(args, session: int, used: float, chooser: Concurrency, notes: list[str],
           finished: list[dict]) -> None:  # fmt: skip
    """What the session did, what is left, and how many more budgets it needs."""
    folder: StateFolder = args.folder
    recorded = folder.recorded()
    print(f"Session {session}: {used:.2f} minutes"
          + (f" of {args.minutes:g}" if args.minutes else "")
          + f"; runs side by side: {concurrency(args, chooser)}.")  # fmt: skip
    for note in notes:
        print(f"  {note}")
    failed = {key: error for key, error in folder.failed().items() if key in args.order}
    done = [key for key in args.order if key in recorded]
    left = [(row, seed, runs.epochs_of(row, args) - ((folder.progress(row, seed) or {}).get(
        "epochs", 0))) for row, seed in args.order
        if (row, seed) not in recorded and (row, seed) not in failed]  # fmt: skip
    print(f"Done: {len(done)} of {len(args.order)} runs"
          + (f" ({len(finished)} finished in this session)" if finished else "") + ".")
    for (row, seed), error in failed.items():  # skipped by every session until the file goes
        print(f"Failed, not retried: {row} seed {seed}: {error}; delete "
              f"{folder.path(row, seed, '.failed.json')} to train it again (from its last saved "
              f"state, {folder.path(row, seed, '.pt').name}, if there is one).")  # fmt: skip
    if not left:
        if not failed:
            print(f"All recorded: {folder.results_path}.")
        return
    print("Remaining: " + ", ".join(f"{row} seed {seed} ({epochs} epochs left)"
                                    for row, seed, epochs in left) + ".")  # fmt: skip
    if args.minutes:
        times = epoch_times(args, session)
        first = [t["seconds"][0] for row, seed in args.order
                 for t in (folder.progress(row, seed) or {"timing": []})["timing"]
                 if t["session"] == session and t["seconds"]]  # fmt: skip
        overhead = max(first, default=0.0)
        budgets, words = budgets_left(left, times, processes=chooser.target,
                                      budget_s=60 * args.minutes, overhead_s=overhead)  # fmt: skip
        count = "an unknown number of" if budgets is None else str(budgets)
        print(f"The rest needs {count} more budgets of {args.minutes:g} minutes at this "
              f"session's rate ({words}).")  # fmt: skip
    print("Go on with the same command and the same --state folder.")
