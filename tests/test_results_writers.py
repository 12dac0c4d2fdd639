"""Two processes writing one results file at the same moment: every run of both is kept, once.

``vitbook.studies.records.Appender`` adds each run under the file's lock to what the file holds
then; ``scripts/train_cifar10.py`` and ``scripts/run_distillation.py`` write their ``--out``
through it. Each test starts real processes that wait for each other at a barrier (a file each
in a folder), so that their writes interleave, and repeats the race several times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vitbook.studies import records

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "VITBOOK_PROGRESS": "0",
       "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip

BARRIER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path

    def barrier(folder, name, count=2):
        folder = Path(folder)
        (folder / name).touch()
        while len(os.listdir(folder)) < count:
            time.sleep(0.001)
""")

APPEND = BARRIER + textwrap.dedent("""
    from vitbook.studies import records

    path, name, barrier_dir, seeds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

    def add(data, run, process):
        data["runs"].append({**run, "process": process})

    def check(data):
        keys = [(run["row"], run["seed"]) for run in data["runs"]]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            raise ValueError(f"{twice} twice")

    writer = records.Appender(path, {"name": name}, empty={"runs": []}, add=add, check=check,
                              remedy="")
    barrier(barrier_dir, name)
    for seed in map(int, seeds.split(",")):
        try:
            writer.add({"row": "r", "seed": seed, "by": name})
        except records.RefusedRun as error:
            print("refused:", error)
""")


def race(code: str, tmp_path: Path, round_: int, argvs: list[list[str]]) -> list:
    """Start one process per argv at a barrier; their outputs once all have ended."""
    barrier = tmp_path / f"barrier{round_}"
    barrier.mkdir()
    processes = [subprocess.Popen([sys.executable, "-c", code, *argv, str(barrier)], env=ENV,
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for argv in argvs]  # fmt: skip
    outputs = [process.communicate(timeout=240)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    return outputs


def append(tmp_path, path, round_, seeds):
    barrier = tmp_path / f"barrier{round_}"
    barrier.mkdir()
    processes = [subprocess.Popen([sys.executable, "-c", APPEND, str(path), name, str(barrier),
                                   ",".join(map(str, these))], env=ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for name, these in seeds.items()]  # fmt: skip
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    return dict(zip(seeds, outputs, strict=True))


def test_two_processes_appending_to_one_file_lose_no_run_and_name_their_entries(tmp_path):
    for round_ in range(4):
        path = tmp_path / f"results{round_}.json"
        if round_ % 2:  # an existing file, with a run of an earlier process
            path.write_text(json.dumps({"runs": [{"row": "r", "seed": 99, "process": 0}],
                                        "provenance": [{"name": "earlier"}]}))  # fmt: skip
        append(tmp_path, path, round_, {"a": range(0, 40, 2), "b": range(1, 40, 2)})
        data = json.loads(path.read_text())
        earlier = [{"name": "earlier"}] if round_ % 2 else []
        assert sorted(e["name"] for e in data["provenance"]) == sorted(["a", "b", *[
            e["name"] for e in earlier]])  # fmt: skip
        mine = [run for run in data["runs"] if run["seed"] != 99]
        assert sorted(run["seed"] for run in mine) == list(range(40))  # none lost, none twice
        for run in mine:  # each run names its own process's entry
            assert data["provenance"][run["process"]]["name"] == run["by"]
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_another_process_wrote_meanwhile_is_refused_and_kept_beside(tmp_path):
    path = tmp_path / "results.json"
    said = append(tmp_path, path, 0, {"a": range(10), "b": range(10)})
    data = json.loads(path.read_text())
    assert sorted(run["seed"] for run in data["runs"]) == list(range(10))  # each seed once
    refused = sorted(tmp_path.glob("results-refused-*.json"))
    assert len(refused) == 10  # the other ten: never in the file twice, never lost
    kept = [json.loads(p.read_text()) for p in refused]
    assert sorted(k["run"]["seed"] for k in kept) == list(range(10))
    assert all(k["runs_of"] == str(path) and "twice" in k["refused"] for k in kept)
    assert sum(text.count("refused:") for text in said.values()) == 10
    assert "is kept in" in "".join(said.values())


def test_a_refused_run_leaves_the_file_and_the_entries_as_they_were(tmp_path):
    path = tmp_path / "results.json"

    def add(data, run, process):
        data["runs"].append({**run, "process": process})

    def check(data):
        if any(run["seed"] < 0 for run in data["runs"]):
            raise ValueError("a negative seed")

    writer = records.Appender(path, {"name": "a"}, empty={"runs": []}, add=add, check=check,
                              remedy="")  # fmt: skip
    with pytest.raises(records.RefusedRun, match=r"results\.json does not take this run: a "
                                                 r"negative seed The run is kept in .*refused"):
        writer.add({"seed": -1})
    assert not path.exists() and writer.process is None and writer.added == 0
    writer.add({"seed": 1})
    assert json.loads(path.read_text()) == {"runs": [{"seed": 1, "process": 0}],
                                            "provenance": [{"name": "a"}]}  # fmt: skip


# --- the scripts: two runs on one --out at once, the training itself stubbed ---------------------

TRAIN_CIFAR10 = BARRIER + textwrap.dedent("""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_cifar10", sys.argv[1])
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from vitbook.studies import ladder
    recipe = getattr(ladder, "recipe", None) or script.recipe
    home = getattr(script, "runs", script)  # where the script's run lives

    def fake_run(name, seed, splits, args, device, rank, **kwargs):
        time.sleep(0.05)  # a run trains; the other process writes meanwhile
        return {"row": name, "seed": seed, "epochs": 1, "recipe": recipe(name, None),
                "final_val_accuracy": 0.5, "test_accuracy": 0.5,
                "wall_clock_minutes": 0.1}, None

    home.run = fake_run
    barrier(sys.argv[-1], sys.argv[2])
    sys.exit(script.main(sys.argv[3:-1]))
""")


def test_train_cifar10_two_runs_on_one_out_at_once_keep_every_run(tmp_path):
    script = ROOT / "scripts" / "train_cifar10.py"
    for round_ in range(3):
        out = tmp_path / f"ladder{round_}.json"
        smoke = ["--standin", "--tiny", "--epochs", "1", "--rows", "vit-50", "--out", str(out),
                 "--seeds"]  # fmt: skip
        seeds = {"a": ["0", "1", "2", "3"], "b": ["4", "5", "6", "7"]}
        race(TRAIN_CIFAR10, tmp_path, round_,
             [[str(script), name, *smoke, *these] for name, these in seeds.items()])
        data = json.loads(out.read_text())
        assert sorted(run["seed"] for run in data["runs"]) == list(range(8)), data["runs"]
        assert len(data["provenance"]) == 2
        for run in data["runs"]:  # each run names the entry of the process that trained it
            assert run["seed"] in data["provenance"][run["process"]]["seeds"]


RUN_DISTILLATION = BARRIER + textwrap.dedent("""
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_distillation", sys.argv[1])
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def fake_run_one(label, seed, teachers):
        time.sleep(0.05)  # a run trains; the other process writes meanwhile
        return None, {"seed": seed, "validation_accuracy": 0.5, "test_accuracy": 0.5,
                      "seconds": 0.1}

    script.run_one = fake_run_one
    barrier(sys.argv[-1], sys.argv[2])
    sys.exit(script.main(sys.argv[3:-1]))
""")


def test_run_distillation_two_runs_on_one_out_at_once_keep_every_run(tmp_path):
    script = ROOT / "scripts" / "run_distillation.py"
    for round_ in range(3):
        out = tmp_path / f"distillation{round_}.json"
        seeds = {"a": ["0", "1", "2", "3"], "b": ["4", "5", "6", "7"]}
        race(RUN_DISTILLATION, tmp_path, round_,
             [[str(script), name, "--only", "ViT, scratch", "--out", str(out), "--seeds", *these]
              for name, these in seeds.items()])  # fmt: skip
        data = json.loads(out.read_text())
        runs = data["runs"]["ViT, scratch"]
        assert [run["seed"] for run in runs] == list(range(8)), runs  # ordered, none lost
        assert len(data["provenance"]) == 2
        for run in runs:
            assert run["seed"] in data["provenance"][run.get("process", 0)]["seeds"]
        assert all("wall_seconds" in entry for entry in data["provenance"])
