"""vitbook.studies.session and the stopping parts of vitbook.train.resume: the state folder (claimed
once, appended to, never losing a run), how many runs share a GPU, how many budgets are left, and a
run that stops in time (a deadline, a signal, a hard deadline)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch
from torch import nn

from vitbook import _files
from vitbook.studies import records
from vitbook.studies.budgets import Concurrency, budgets_left
from vitbook.studies.session import (
    Checkpointer,
    OutOfTime,
    StateFolder,
    StateMismatchError,
    StopRequest,
    code_version,
    hard_deadline,
)
from vitbook.train import fit
from vitbook.train.resume import load_state

IDENTITY = {"data_sha256": "ab" * 32, "code_version": "0123", "torch": "2.13.0",
            "precision": "bf16", "compile": True, "model": "photo ViT"}  # fmt: skip


def test_a_folder_belongs_to_one_identity(tmp_path):
    folder = StateFolder(tmp_path / "state")
    assert folder.claim(IDENTITY) is True and folder.claim(IDENTITY) is False
    assert {p.name for p in folder.root.iterdir()} == {"plan.json", "runs", "weights", "cache"}
    for field, value in (("data_sha256", "cd" * 32), ("code_version", "4567"),
                         ("torch", "2.14.0"), ("precision", "fp16")):  # fmt: skip
        with pytest.raises(StateMismatchError, match=rf"records another setting \({field}: "
                                                     rf".* there, .* here\).*Nothing trained"):
            folder.claim({**IDENTITY, field: value})
    assert json.loads(folder.plan_path.read_text()) == IDENTITY  # unchanged by the refusals
    with pytest.raises(_files.ShippedFileError, match=r"lies in vitbook/assets"):
        StateFolder(_files.ASSETS / "state")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"is a file; name a folder"):
        StateFolder(tmp_path / "file")


def test_results_are_appended_with_a_provenance_entry_per_session(tmp_path):
    folder = StateFolder(tmp_path)
    folder.claim(IDENTITY)
    first = folder.begin_session({"gpu": "NVIDIA H100 80GB HBM3", "budget_minutes": 10})
    run = {"row": "vit-50", "seed": 0, "epochs": 50, "recipe": {}, "test_accuracy": 0.8}
    _files.write_json(folder.path("vit-50", 0, ".done.json"), run)
    state = folder.path("vit-50", 0, ".pt")
    state.write_bytes(b"state")
    assert folder.join_finished() == [run] and folder.join_finished() == []
    assert not state.exists() and not folder.path("vit-50", 0, ".done.json").exists()
    folder.end_session(first, minutes=9.8)
    second = folder.begin_session({"gpu": "NVIDIA H200"})
    results = folder.results()
    assert (first, second) == (0, 1) and results["runs"] == [run]
    assert results["provenance"] == [
        {"gpu": "NVIDIA H100 80GB HBM3", "budget_minutes": 10, "session": 0, "minutes": 9.8},
        {"gpu": "NVIDIA H200", "session": 1}]  # fmt: skip
    records.check_together([("state", results)], allow_mixed=True)  # a ladder results file
    before = folder.results_path.read_bytes()
    with pytest.raises(RuntimeError, match=r"it would lose runs"):
        folder._write_results({**results, "runs": []}, results)
    assert folder.results_path.read_bytes() == before
    _files.write_json(folder.path("vit-50", 1, ".failed.json"),
                       {"row": "vit-50", "seed": 1, "error": "loss is nan"})  # fmt: skip
    assert folder.failed() == {("vit-50", 1): "loss is nan"}
    assert folder.recorded() == {("vit-50", 0)}


def test_concurrency_adds_runs_while_the_gpu_does_more():
    chooser = Concurrency(most=8)
    for processes, seconds in ((1, 2.0), (2, 2.2), (3, 2.6), (4, 3.0)):
        assert chooser.target == processes
        chooser.observe(processes, seconds)
    # 4 / 1.5 = 2.67 is more than 1.1 x 3 / 1.3 = 2.54: keep going; 5 runs gain nothing
    assert chooser.target == 5 and not chooser.settled
    chooser.observe(5, 3.9)  # 5 / 1.95 = 2.56 < 1.1 x 2.67
    assert (chooser.target, chooser.settled) == (4, True)
    chooser.observe(4, 1.0)  # settled: later measurements change nothing
    assert chooser.target == 4
    assert chooser.describe().startswith("4 at a time, measured (1 at a time: 2.00 s")
    assert "2 at a time: 2.20 s an epoch of the first run, 1.82x one run's work" in (
        chooser.describe())  # fmt: skip
    capped = Concurrency(most=2)
    capped.observe(1, 1.0)
    capped.observe(2, 1.0)
    assert (capped.target, capped.settled) == (2, True)
    assert Concurrency(most=1).settled and Concurrency(most=1).describe() == (
        "1 at a time (not measured)")  # fmt: skip


def test_budgets_left_follow_the_measured_rate():
    left = [("vit-200", 0, 100), ("vit-50", 1, 50), ("vit-200-conv-stem", 0, 200)]
    times = {"vit-200": 2.0, "vit-50": 1.5}
    budgets, words = budgets_left(left, times, processes=2, budget_s=600, overhead_s=100)
    # (200 + 75 + 200 x 2.0 (the slowest vit row)) / 2 = 337.5 s in 500 s usable
    assert budgets == 1 and "338 s of training (350 epochs, 2 side by side)" in words
    assert "vit-200-conv-stem at the slowest timed row of their model" in words
    budgets, _ = budgets_left(left, times, processes=1, budget_s=600, overhead_s=100)
    assert budgets == 2  # 675 s in 500 s
    assert budgets_left([("resnet18-200", 0, 5)], times, processes=1, budget_s=600,
                        overhead_s=0) == (None, "rows never timed: resnet18-200")  # fmt: skip
    assert budgets_left([], {}, processes=1, budget_s=60, overhead_s=0) == (0, "nothing left")
    assert budgets_left(left, times, processes=1, budget_s=60, overhead_s=90)[0] is None


def test_the_code_version_follows_the_sources(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("print(1)\n")
    before = code_version(script)
    assert before == code_version(script) and before != code_version()
    script.write_text("print(2)\n")
    assert code_version(script) != before


def problem(n=40):
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(n, 1, 4, 4, generator=generator)
    return images, (images.mean(dim=(1, 2, 3)) > 0).long()


def linear():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 2))


class FakeClock:
    """A clock that moves only when told (saving takes no time on it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpointer_stops_before_the_deadline_and_saves(tmp_path):
    clock = FakeClock()
    path = tmp_path / "run.pt"
    saved_at = []

    def tick(checkpointer):
        saved_at.append(path.exists() and load_state(path)["epoch"])

    checkpointer = Checkpointer(path, extra={"identity": {"row": "a"}}, deadline=5.5,
                                save_every_s=100.0, epochs=10, on_epoch=tick,
                                clock=clock)  # fmt: skip

    def after_epoch(done, state):
        clock.now += 1.0  # each epoch: one second on the checkpointer's clock
        return checkpointer(done, state)

    history = fit(linear(), problem(), epochs=10, batch_size=8, progress=False,
                  after_epoch=after_epoch)  # fmt: skip
    # at t = 4 the next epoch (1.25 s) would end at 5.25 < 5.5: go on; at t = 5 it would not
    assert history.epochs == 5 and checkpointer.stopped.startswith("the next epoch would not")
    assert checkpointer.epoch_seconds == [1.0] * 5
    state = load_state(path)
    assert state["epoch"] == 5 and state["identity"] == {"row": "a"}
    # saved once the deadline is within 3 epochs (3 x 1.25 s: from t = 2) and at the stop
    assert saved_at == [False, 2, 3, 4, 5]


def test_a_stop_request_saves_at_the_epochs_end(tmp_path):
    stop = StopRequest()
    path = tmp_path / "run.pt"
    checkpointer = Checkpointer(path, stop=stop, save_every_s=1e9, epochs=6)

    def after_epoch(done, state):
        if done == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # handled: a request, not an exit
        return checkpointer(done, state)

    with stop:
        history = fit(linear(), problem(), epochs=6, batch_size=8, progress=False,
                      after_epoch=after_epoch)  # fmt: skip
    assert history.epochs == 2 and checkpointer.stopped == "asked to stop (SIGTERM)"
    assert load_state(path)["epoch"] == 2
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # handlers put back
    with stop, pytest.raises(KeyboardInterrupt, match=r"a second Ctrl-C"):
        stop._handle(signal.SIGINT, None)  # already requested: Ctrl-C again stops at once
    nothing = Checkpointer(tmp_path / "none.pt", save_every_s=1e9, epochs=3)
    fit(linear(), problem(), epochs=2, batch_size=8, progress=False, after_epoch=nothing)
    assert not (tmp_path / "none.pt").exists()  # no deadline, no request, not the last epoch


def test_a_hard_deadline_stops_an_epoch_that_runs_over():
    start = time.monotonic()
    with pytest.raises(OutOfTime, match=r"the deadline passed"), hard_deadline(start + 0.3):
        while True:
            time.sleep(0.01)
    assert 0.25 < time.monotonic() - start < 5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is off again
    with hard_deadline(None):
        time.sleep(0.01)


def test_numbers_that_are_no_seconds_or_counts_are_refused(tmp_path):
    nan = float("nan")
    for kwargs, message in (
        ({"save_every_s": nan}, r"save_every_s=nan must be a number of seconds > 0"),
        ({"save_every_s": -1.0}, r"save_every_s=-1\.0 must be a number of seconds > 0"),
        ({"deadline": nan}, r"deadline=nan must be a finite number; pass a clock\(\) time"),
        ({"typical": -2.0}, r"typical=-2\.0 must be a finite number >= 0"),
        ({"epochs": 0}, r"epochs=0 must be an int >= 1"),
    ):
        with pytest.raises(ValueError, match=message):
            Checkpointer(tmp_path / "run.pt", **kwargs)
    with pytest.raises(TypeError, match=r"save_every_s must be a number, got '60'"):
        Checkpointer(tmp_path / "run.pt", save_every_s="60")
    assert Checkpointer(tmp_path / "run.pt", save_every_s=float("inf")).save_every_s > 1e9
    chooser = Concurrency(most=4)
    for seconds in (nan, -2.0, 0.0, float("inf")):
        with pytest.raises(ValueError, match=rf"seconds={seconds!r} must be a finite number > 0; "
                           r"pass the reference run's epoch time"):  # fmt: skip
            chooser.observe(1, seconds)
    with pytest.raises(ValueError, match=r"processes=0 must be an int >= 1"):
        chooser.observe(0, 2.0)
    assert chooser.seconds == {} and chooser.target == 1  # nothing taken in
    with pytest.raises(ValueError, match=r"most=0 must be an int >= 1"):
        Concurrency(most=0)
    left, times = [("vit-50", 0, 10)], {"vit-50": 2.0}
    for kwargs, message in (
        ({"processes": -1}, r"processes=-1 must be an int >= 1"),
        ({"budget_s": nan}, r"budget_s=nan must be a finite number > 0"),
        ({"overhead_s": -5.0}, r"overhead_s=-5\.0 must be a finite number >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            budgets_left(left, times, **{"processes": 1, "budget_s": 600, "overhead_s": 0,
                                         **kwargs})  # fmt: skip
    with pytest.raises(ValueError, match=r"vit-50 seed 0 has -3 epochs left; epochs left are an "
                       r"int >= 0"):  # fmt: skip
        budgets_left([("vit-50", 0, -3)], times, processes=1, budget_s=600, overhead_s=0)
    with pytest.raises(ValueError, match=r"epoch_seconds\['vit-50'\]=nan must be a finite"):
        budgets_left(left, {"vit-50": nan}, processes=1, budget_s=600, overhead_s=0)


PLANNED = {"vit-50": (50, {"lr": 1e-3}), "vit-200": (200, {"lr": 5e-4})}
RUN = {"row": "vit-50", "seed": 0, "epochs": 50, "recipe": {"lr": 1e-3}, "test_accuracy": 0.8}


def test_a_folder_without_its_plan_or_with_what_is_not_a_state_folders_is_refused(tmp_path):
    folder = StateFolder(tmp_path / "state")
    folder.claim(IDENTITY, planned=PLANNED)
    folder.begin_session({"gpu": None})
    folder.plan_path.unlink()  # the runs stay; what they share is no longer written down
    for kept in ("results.json", "runs/"):
        with pytest.raises(StateMismatchError, match=rf"holds {kept}.* but no plan\.json.*"
                           r"Nothing trained\. Restore plan\.json from a copy"):  # fmt: skip
            folder.claim({**IDENTITY, "epochs_override": 3}, planned=PLANNED)
        assert not folder.plan_path.exists()  # not claimed as a new folder
        folder.results_path.unlink(missing_ok=True)
        (folder.runs / "vit-50-seed0.json").write_text("{}")
    plain = tmp_path / "runs"  # a folder of --out results files
    plain.mkdir()
    (plain / "cifar10-20250101T000000Z.json").write_text('{"runs": [], "provenance": []}')
    with pytest.raises(StateMismatchError, match=r"holds cifar10-20250101T000000Z\.json, which "
                       r"is not part of a state folder \(plan\.json, results\.json, runs/, "
                       r"weights/, cache/\).*Nothing trained"):  # fmt: skip
        StateFolder(plain).claim(IDENTITY, planned=PLANNED)
    assert sorted(p.name for p in plain.iterdir()) == ["cifar10-20250101T000000Z.json"]
    with pytest.raises(ValueError, match=r"an empty name is the current folder; name the state "
                       r"folder"):  # fmt: skip
        StateFolder("")
    teachers = StateFolder(tmp_path / "teachers")  # weights copied in before the first session
    teachers.weights.mkdir(parents=True)
    (teachers.weights / "resnet18-200-seed0.safetensors").write_bytes(b"weights")
    (teachers.root / ".results.json.x1y2.tmp").write_bytes(b"")  # a write cut by a kill
    assert teachers.claim(IDENTITY, planned=PLANNED) is True


def test_results_and_finished_runs_are_checked_against_the_plan(tmp_path):
    folder = StateFolder(tmp_path)
    folder.claim(IDENTITY, planned=PLANNED)
    folder.begin_session({"gpu": None})
    for name, run, message in [
        ("vit-50-seed5", {**RUN, "seed": 5, "epochs": 7},
         r"vit-50-seed5\.done\.json holds vit-50 seed 5 trained for 7 epochs with recipe "
         r"\{'lr': 0\.001\}, but this folder's plan has 50 epochs and \{'lr': 0\.001\}"),
        ("vit-50-seed0", {**RUN, "seed": "0"}, r"vit-50-seed0\.done\.json holds row 'vit-50' "
         r"seed '0' \(str\); a row is a name and a seed an int"),
        ("vit-50-seed0", {**RUN, "recipe": {"lr": 0.1}}, r"with recipe \{'lr': 0\.1\}, but"),
        ("resnet18-seed0", {**RUN, "row": "resnet18"}, r"holds a run of 'resnet18', a row this "
         r"folder's plan does not record \(vit-50, vit-200\)"),
        ("vit-50-seed0", {**RUN, "seed": 1}, r"vit-50-seed0\.done\.json holds vit-50 seed 1, not "
         r"the run its name says"),
    ]:  # fmt: skip
        path = folder.runs / f"{name}.done.json"
        _files.write_json(path, run)
        with pytest.raises(StateMismatchError, match=message + r".*Nothing joined.*move it out"):
            folder.join_finished()
        assert path.exists() and folder.results()["runs"] == []  # kept, and not joined
        path.unlink()
    _files.write_json(folder.path("vit-50", 0, ".done.json"), RUN)
    assert folder.join_finished() == [RUN]
    with pytest.raises(StateMismatchError, match=r"results\.json holds vit-50 seed 0 trained for "
                       r"50 epochs .*but this folder's plan has 60 epochs.*Nothing trained"):
        folder.claim(IDENTITY, planned={**PLANNED, "vit-50": (60, {"lr": 1e-3})})
    text = folder.results_path.read_text()
    folder.results_path.write_text(text.replace('"test_accuracy": 0.8', '"test_accuracy": NaN'))
    with pytest.raises(_files.ResultsFileError, match=r"results\.json holds nan at runs\[0\]\."
                       r"test_accuracy: JSON has no NaN.*Nothing trained.*null"):  # fmt: skip
        folder.claim(IDENTITY, planned=PLANNED)
