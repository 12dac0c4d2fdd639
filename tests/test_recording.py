"""scripts/train_cifar10.py --state DIR --minutes M: a small plan (the stand-in, a tiny ViT)
recorded over budgets of a few seconds gives the results one uninterrupted session gives (the
same runs, the same numbers, the same weights); runs side by side in processes of their own
give them too; SIGTERM saves and the next session goes on; a folder or a run's state that does
not belong to the plan is refused; --plan-only prices the plan."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vitbook._files import ResultsFileError
from vitbook.pretrained.checkpoints import load_model
from vitbook.studies.progress import progress_of
from vitbook.train.resume import load_state, save_state

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_cifar10.py"
ROWS = ["vit-50", "vit-50-timm-decay"]
PLAN = ["--standin", "--tiny", "--rows", *ROWS, "--seeds", "0", "--batch-size", "60"]
ENV = {"OMP_NUM_THREADS": "1", "VITBOOK_PROGRESS": "0", "PYTHONPATH": str(ROOT)}
COMPARED = ("row", "seed", "epochs", "recipe", "parameters", "precision", "train_loss",
            "val_accuracy", "final_val_accuracy", "test_accuracy")  # fmt: skip


def load_script():
    spec = importlib.util.spec_from_file_location("train_cifar10", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="module")
def script():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV.items():
            patch.setenv(name, value)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the threads of the sessions' own processes
        try:
            yield load_script()
        finally:
            torch.set_num_threads(threads)


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def by_run(folder: Path) -> dict:
    return {(r["row"], r["seed"]): {k: r[k] for k in COMPARED} for r in results(folder)["runs"]}


@pytest.fixture(scope="module")
def plan(script, tmp_path_factory):
    """A budget of a few seconds and the epochs that make the plan about six such budgets on
    this machine, and the uninterrupted session that records it.

    The epoch is the fastest of the calibration's (the first, with its set-up, aside): the
    machine's load changes while the tests run (another worker executes notebooks beside this
    one), and a plan sized by a median epoch of a busy moment fitted in two budgets once its
    epochs ran three times faster. Sized by the fastest epoch seen, the plan needs about six
    budgets when every epoch is that fast, and more when they are slower."""
    root = tmp_path_factory.mktemp("recording")
    assert script.main([*PLAN, "--rows", "vit-50", "--epochs", "6", "--state",
                        str(root / "calibration")]) == 0  # fmt: skip
    timing = json.loads((root / "calibration" / "runs" / "vit-50-seed0.json").read_text())
    epoch = min(timing["timing"][0]["seconds"][1:])
    budget_s = min(12.0, max(4.0, 4 * epoch + 2))
    per_budget = max(1.0, (budget_s - 1.5) / epoch - 1.25)  # set-up, the margin, the safety
    epochs = min(40, max(4, math.ceil(6 * per_budget / len(ROWS))))
    whole = root / "whole"
    assert script.main([*PLAN, "--epochs", str(epochs), "--state", str(whole)]) == 0
    return {"epochs": epochs, "whole": whole, "root": root, "minutes": f"{budget_s / 60:.4f}"}


def test_a_plan_split_over_budgets_is_recorded_as_one_session_records_it(script, plan, capsys):
    split = plan["root"] / "split"
    minutes = float(plan["minutes"])
    args = [*PLAN, "--epochs", str(plan["epochs"]), "--state", str(split), "--minutes",
            plan["minutes"]]  # fmt: skip
    sessions = []
    while not (split / "results.json").exists() or len(results(split)["runs"]) < len(ROWS):
        assert len(sessions) < 30, "the plan never ended"
        start = time.monotonic()
        assert script.main(args) == 0
        sessions.append(time.monotonic() - start)
        out = capsys.readouterr().out
        assert f"of {minutes:g}" in out and "Done:" in out
    assert len(sessions) >= 3, sessions  # split over three budgets at least
    assert max(sessions) <= 60 * minutes + 1.5, sessions  # each within its budget
    assert "All recorded" in out and "needs" not in out
    assert by_run(split) == by_run(plan["whole"])  # the same runs, the same numbers
    recorded = results(split)
    assert any(len(run["sessions"]) > 1 for run in recorded["runs"])  # resumed mid-run
    assert [p["session"] for p in recorded["provenance"]] == list(range(len(sessions)))
    for entry in recorded["provenance"]:
        assert entry["budget_minutes"] == minutes and entry["minutes"] > 0
        assert {"gpu", "torch", "cuda", "git_commit", "device", "data"} <= set(entry)
    for run in recorded["runs"]:
        assert run["process"] == run["sessions"][-1]
        whole = load_model(plan["whole"] / "weights" / f"{run['row']}-seed0.safetensors")
        parts = load_model(split / "weights" / f"{run['row']}-seed0.safetensors")
        for name, tensor in whole.state_dict().items():
            assert torch.equal(parts.state_dict()[name], tensor), name
    assert not list((split / "runs").glob("*.pt"))  # finished: no state left
    kept = json.dumps(recorded["runs"])
    assert script.main(args) == 0  # one more session: nothing to do, nothing replaced
    assert json.dumps(results(split)["runs"]) == kept
    assert "All recorded" in capsys.readouterr().out


def test_runs_side_by_side_in_processes_of_their_own_record_the_same_numbers(script, plan,
                                                                           capsys):
    folder = plan["root"] / "side-by-side"
    assert script.main([*PLAN, "--epochs", str(plan["epochs"]), "--state", str(folder),
                        "--processes", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "runs side by side: 2 at a time" in out
    assert by_run(folder) == by_run(plan["whole"])
    assert results(folder)["provenance"][0]["side_by_side"] == 2
    logs = sorted(p.name for p in (folder / "runs").glob("*.log"))
    assert logs == ["vit-50-seed0.log", "vit-50-timm-decay-seed0.log"]


def test_the_count_side_by_side_is_measured_and_the_numbers_stay(script, plan, capsys):
    """auto:2 measures on the CPU too: the first run alone, then with a second beside it."""
    folder = plan["root"] / "measured"
    assert script.main([*PLAN, "--epochs", str(plan["epochs"]), "--state", str(folder),
                        "--processes", "auto:2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "runs side by side: " in out and "measured (1 at a time: " in out, out
    assert by_run(folder) == by_run(plan["whole"])
    entry = results(folder)["provenance"][0]
    assert entry["side_by_side"] in (1, 2) and entry["concurrency"].startswith(
        f"{entry['side_by_side']} at a time, measured")  # fmt: skip


def test_sigterm_saves_the_run_and_the_next_session_goes_on(script, plan, capsys):
    folder = plan["root"] / "signal"
    command = [sys.executable, str(SCRIPT), *PLAN, "--epochs", str(plan["epochs"]), "--state",
               str(folder)]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, **ENV}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    progress = folder / "runs" / "vit-50-seed0.json"
    try:
        deadline = time.monotonic() + 120
        while not (progress.exists() and json.loads(progress.read_text())["epochs"] >= 1):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err[-3000:]
    assert "vit-50 seed 0: stopped: asked to stop (SIGTERM)" in out
    stopped_at = load_state(folder / "runs" / "vit-50-seed0.pt")["epoch"]
    assert 1 <= stopped_at < plan["epochs"]
    assert json.loads(progress.read_text())["epochs"] == stopped_at
    assert script.main(command[2:]) == 0  # the next session, here
    assert by_run(folder) == by_run(plan["whole"])
    assert results(folder)["runs"][0]["sessions"] == [0, 1]


def test_a_folder_or_a_run_state_of_another_plan_is_refused(script, plan, tmp_path, capsys):
    folder = tmp_path / "state"
    shutil.copytree(plan["whole"], folder)
    before = (folder / "results.json").read_bytes()
    args = [*PLAN, "--epochs", str(plan["epochs"]), "--state", str(folder)]
    for field, value in (("data_sha256", "0" * 64), ("code_version", "an older one")):
        identity = json.loads((folder / "plan.json").read_text())
        (folder / "plan.json").write_text(json.dumps({**identity, field: value}))
        with pytest.raises(SystemExit) as stopped:
            script.main(args)
        assert stopped.value.code == 2
        text = capsys.readouterr().err
        assert f"records another setting ({field}: '{value}' there" in text
        assert "Nothing trained" in text and "--state a new folder" in text
        (folder / "plan.json").write_text(json.dumps(identity))
    with pytest.raises(SystemExit):
        script.main([*PLAN, "--epochs", str(plan["epochs"] + 1), "--state", str(folder)])
    assert f"epochs_override: {plan['epochs']} there, {plan['epochs'] + 1} here" in (
        capsys.readouterr().err)  # fmt: skip
    assert (folder / "results.json").read_bytes() == before

    # A run's state with another identity (a seed not its own): refused, named, kept.
    fresh = tmp_path / "fresh"
    one = [*PLAN, "--rows", "vit-50", "--epochs", str(plan["epochs"]), "--state", str(fresh)]
    assert script.main([*one, "--minutes", "0.05"]) == 0
    state_path = fresh / "runs" / "vit-50-seed0.pt"
    if not state_path.exists():
        pytest.skip("the machine was too slow to finish an epoch in three seconds")
    state = load_state(state_path)
    save_state(state_path, {**state, "identity": {**state["identity"], "seed": 1}})
    with pytest.raises(SystemExit) as stopped:
        script.main(one)
    assert stopped.value.code == 2
    text = capsys.readouterr().err
    assert "vit-50-seed0.pt holds another run (seed: 1 there, 0 here)" in text
    assert "delete" in text and state_path.exists()
    entry = results(fresh)["provenance"][-1]
    assert "holds another run" in entry["error"]  # the session says why it stopped


@pytest.mark.parametrize("argv, message", [
    (["--minutes", "5"], "--minutes 5 needs --state DIR"),
    (["--state", "s", "--out", "r.json"], "--out with --state: the state folder keeps"),
    (["--state", "s", "--teacher-dir", "w"], "--teacher-dir with --state"),
    (["--state", "s", "--rows", "vit-crop-flip"], "are not rows of --plan next"),
    (["--state", "s", "--minutes", "0"], "--minutes: 0 is not a positive number of minutes"),
    (["--state", "s", "--processes", "0"], "--processes: 0 is not a positive number"),
    (["--state", "s", "--processes", "auto:0"], "--processes: 0 is not a positive number"),
])  # fmt: skip
def test_sessions_refuse_what_they_cannot_keep(script, argv, message, tmp_path, capsys,
                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        script.main(["--standin", *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_no_state_under_torchrun(script, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit):
        script.main(["--standin", "--state", str(tmp_path / "s")])
    assert "--state records side by side on one GPU, not under torchrun" in (
        capsys.readouterr().err)  # fmt: skip


def test_plan_only_prices_the_plan_from_the_compiled_epoch(script, capsys):
    from vitbook.studies.ladder import recording_order

    assert script.main(["--plan-only", "--minutes", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    order = recording_order()
    listed = lines[1 : 1 + len(order)]
    assert [line.split(":")[0].strip() for line in listed] == [
        f"{row} seed {seed}" for row, seed in order]  # fmt: skip
    assert listed[0] == "  resnet18-200 seed 0: 200 epochs, not measured"
    assert listed[1] == "  vit-200 seed 0: 200 epochs, 4.8 min"  # 200 x 1.455 s
    assert "1.455 s an epoch, fit(compile=True) on an H100" in lines[0]
    assert "Timed runs: 17, at least 31.5 H100-minutes" in lines[-2]
    assert ("15 runs of resnet18-200, vit-200-conv-stem, vit-200-deit-hard, vit-200-mean, "
            "vit-200-token") in lines[-2]
    assert lines[-1].startswith("In budgets of 10 minutes: at least 4 for the timed runs")


def test_progress_of_refuses_a_seed_written_as_text():
    run = {"row": "a", "seed": 0, "epochs": 2, "recipe": {}}
    for seed in ("0", 0.0, True, None):
        with pytest.raises(ResultsFileError, match=rf"run 1 of x\.json has row 'a' and seed "
                           rf"{re.escape(repr(seed))} .*write the seed as a number"):  # fmt: skip
            progress_of({"runs": [run, {**run, "seed": seed}]}, [("a", 0)], {"a": (2, {})},
                        source="x.json")  # fmt: skip
    with pytest.raises(ResultsFileError, match=r"run 0 of the results has row 3 .*a row is a name"):
        progress_of({"runs": [{**run, "row": 3}]}, [("a", 0)], {"a": (2, {})})
    assert progress_of({"runs": [run]}, [("a", 0)], {"a": (2, {})}).complete


SMALL = [*PLAN, "--rows", "vit-50", "--epochs", "1"]


@pytest.fixture(scope="module")
def small(script, tmp_path_factory) -> Path:
    """A state folder of one recorded run (vit-50 seed 0, one epoch)."""
    folder = tmp_path_factory.mktemp("small") / "state"
    assert script.main([*SMALL, "--state", str(folder)]) == 0
    return folder


def refused(script, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        script.main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_a_folder_that_lost_its_plan_or_holds_other_runs_is_refused(script, small, tmp_path,
                                                                    capsys):  # fmt: skip
    folder = tmp_path / "state"
    shutil.copytree(small, folder)
    before = (folder / "results.json").read_bytes()
    (folder / "plan.json").unlink()
    text = refused(script, [*SMALL, "--epochs", "3", "--state", str(folder)], capsys)
    assert "holds results.json and runs/ but no plan.json" in text and "Nothing trained" in text
    assert not (folder / "plan.json").exists()  # not claimed as a new folder
    shutil.copy(small / "plan.json", folder / "plan.json")
    (run,) = results(folder)["runs"]
    for seed, epochs, message in ((5, 7, "vit-50-seed5.done.json holds vit-50 seed 5 trained for "
                                         "7 epochs"),
                                  ("0", 1, "holds row 'vit-50' seed '0' (str)")):  # fmt: skip
        done = folder / "runs" / f"vit-50-seed{seed}.done.json"
        done.write_text(json.dumps({**run, "seed": seed, "epochs": epochs}))
        text = refused(script, [*SMALL, "--state", str(folder)], capsys)
        assert message in text and "Nothing joined" in text, text
        assert done.exists() and (folder / "results.json").read_bytes() == before
        done.unlink()
    # a run of the same recipe recorded with other --seeds joins, and counts apart from the plan
    (folder / "runs" / "vit-50-seed5.done.json").write_text(json.dumps({**run, "seed": 5}))
    assert script.main([*SMALL, "--state", str(folder)]) == 0
    assert "(continued): 1 of 1 runs recorded, 0 to go" in capsys.readouterr().out
    assert [r["seed"] for r in results(folder)["runs"]] == [0, 5]
    outs = tmp_path / "outs"  # a folder of --out results files
    outs.mkdir()
    shutil.copy(small / "results.json", outs / "cifar10-20250101T000000Z.json")
    text = refused(script, [*SMALL, "--state", str(outs)], capsys)
    assert "holds cifar10-20250101T000000Z.json, which is not part of a state folder" in text
    assert sorted(p.name for p in outs.iterdir()) == ["cifar10-20250101T000000Z.json"]


def test_a_session_that_fails_still_ends_its_provenance_entry(script, small, tmp_path,
                                                             monkeypatch):  # fmt: skip
    folder = tmp_path / "state"
    shutil.copytree(small, folder)

    def broken(*args):
        raise RuntimeError("the GPU fell off the bus")

    monkeypatch.setattr(script.sessions, "one_session", broken)
    with pytest.raises(RuntimeError, match="fell off the bus"):
        script.main([*SMALL, "--state", str(folder)])
    entry = results(folder)["provenance"][-1]
    assert entry["session"] == 1 and entry["error"] == "RuntimeError: the GPU fell off the bus"
    assert "ended" in entry and entry["minutes"] >= 0


def test_a_failed_run_is_named_with_its_error_and_how_to_train_it_again(script, small, tmp_path,
                                                                        capsys):  # fmt: skip
    folder = tmp_path / "state"
    shutil.copytree(small, folder)
    failed = folder / "runs" / "vit-50-seed1.failed.json"
    failed.write_text(json.dumps({"row": "vit-50", "seed": 1,
                                  "error": "the loss is nan at epoch 1, step 3"}))  # fmt: skip
    assert script.main([*SMALL, "--seeds", "0", "1", "--state", str(folder), "--minutes",
                        "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert (f"Failed, not retried: vit-50 seed 1: the loss is nan at epoch 1, step 3; delete "
            f"{failed} to train it again") in out, out
    assert "Go on with the same command" not in out and "epochs left" not in out
    assert "more budgets" not in out  # a failed run waits for no budget


def test_a_missing_or_damaged_teacher_under_state_gets_a_remedy_that_fits(script, small,
                                                                         tmp_path, capsys):
    distilled = [*PLAN, "--rows", "vit-200-deit-hard", "--epochs", "1"]
    text = refused(script, [*distilled, "--state", str(tmp_path / "new")], capsys)
    text = text.splitlines()[-1]  # the error, without the usage that lists every option
    assert "vit-200-deit-hard learns from resnet18-200" in text
    assert f"add resnet18-200 to --rows (the session trains it first and keeps its weights in " \
           f"{tmp_path / 'new' / 'weights'})" in text  # fmt: skip
    assert "--save-dir" not in text and "--teacher-dir" not in text, text
    folder = tmp_path / "state"
    shutil.copytree(small, folder)
    (folder / "weights" / "resnet18-200-seed0.safetensors").write_bytes(b"\x00" * 64)
    assert script.main([*distilled, "--state", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "vit-200-deit-hard seed 0 stopped with an error: teacher file" in out
    assert "Replace it with a good copy" in out
    assert "--save-dir" not in out and "--teacher-dir" not in out, out


QUICK = ["--standin", "--tiny", "--rows", "vit-50", "--seeds", "0", "--epochs", "1",
         "--batch-size", "60"]  # fmt: skip


@pytest.mark.parametrize("argv, message", [
    (["--save-every", "5"], "--save-every 5 needs --state DIR"),
    (["--merge", "a.json", "--state", "s"], "--merge joins result files and trains nothing, so "
                                            "--state would be ignored"),
    (["--merge", "a.json", "--minutes", "5"], "so --minutes would be ignored"),
    (["--state", "s", "--minutes", "1e9"], "--minutes: 1e9 is more than 10080 minutes (a week)"),
    (["--state", "s", "--minutes", "1e308"], "--minutes: 1e308 is more than 10080 minutes"),
    (["--state", "s", "--save-every", "1e9"], "--save-every: 1e9 is more than 10080 minutes"),
    (["--state", ""], "--state: an empty name is the current folder"),
    (["--plan-only", "--rows", "vit-200-deit-hard"], "vit-200-deit-hard learns from "
                                                     "resnet18-200, which is not in --rows"),
])  # fmt: skip
def test_options_that_would_be_ignored_or_break_a_session_are_refused(script, argv, message,
                                                                      tmp_path, capsys,
                                                                      monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    text = refused(script, [*QUICK, *argv], capsys)
    assert message in text, text
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing trained


def test_plan_only_counts_no_budgets_for_runs_never_timed(script, capsys):
    assert script.main(["--plan-only", "--rows", "resnet18-200", "vit-200-deit-hard",
                        "--minutes", "10"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "-0" not in out and "Timed runs: 0" in out
    assert out.splitlines()[-1].startswith("In budgets of 10 minutes: none of these runs has a "
                                           "measured epoch, so no count")  # fmt: skip


def test_a_second_session_on_a_held_folder_trains_nothing_and_names_the_holder(script, tmp_path,
                                                                               capsys):  # fmt: skip
    """Another process holds the folder's session lock: a session started meanwhile is refused
    before it trains, naming that process; once the holder is gone, a session records."""
    folder = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from vitbook.studies.session import "
         "StateFolder\nwith StateFolder(sys.argv[1]).session_lock():\n    print('held', "
         "flush=True); time.sleep(120)", str(folder)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, **ENV})  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        err = refused(script, [*SMALL, "--state", str(folder)], capsys)
        assert "another session records into the state folder" in err and str(folder) in err
        assert f"process {holder.pid} " in err and "Nothing trained" in err
        assert not (folder / "results.json").exists() and not (folder / "plan.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert script.main([*SMALL, "--state", str(folder)]) == 0  # a killed holder blocks nothing
    assert [(r["row"], r["seed"]) for r in results(folder)["runs"]] == [("vit-50", 0)]


def test_two_sessions_started_together_on_one_folder_train_each_run_once(tmp_path):
    """Two processes of the script on one new folder at the same moment: one records the plan,
    the other is refused or finds nothing left; no run is trained twice."""
    folder = tmp_path / "state"
    command = [sys.executable, str(SCRIPT), *SMALL, "--state", str(folder)]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **ENV}) for _ in range(2)]  # fmt: skip
    outputs = [process.communicate(timeout=300) for process in both]
    codes = sorted(process.returncode for process in both)
    assert codes in ([0, 0], [0, 2]), outputs
    assert [(r["row"], r["seed"]) for r in results(folder)["runs"]] == [("vit-50", 0)]
    assert len(results(folder)["provenance"]) == 2 - codes.count(2), outputs
    trained = [out for out, _ in outputs if "vit-50 seed 0: finished" in out]
    assert len(trained) == 1, outputs  # one session trained it; the other did not
    if codes == [0, 2]:
        assert any("another session records into the state folder" in e for _, e in outputs)
