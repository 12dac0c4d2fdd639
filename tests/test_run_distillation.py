"""scripts/run_distillation.py: outputs never replaced, seeds once, merges of files that belong.

Runs are shortened to one epoch (the recipe is patched), so that each takes a second or two.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from machines import FAKES, another_machine, pretend

from vitbook._files import ResultsFileError
from vitbook.studies import distill_digits, experiments
from vitbook.studies.distill_digits import RESULTS_PATH, load_results

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run_distillation.py"


@pytest.fixture
def one_epoch(monkeypatch):
    shortened = experiments.RECIPE.replace(epochs=1, warmup_epochs=0)
    monkeypatch.setattr(experiments, "RECIPE", shortened)  # what distill_digits trains by
    monkeypatch.setenv("VITBOOK_PROGRESS", "0")  # main() sets it; undone after the test


@pytest.fixture
def script():
    spec = importlib.util.spec_from_file_location("run_distillation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def recorded(tmp_path, one_epoch, script):
    """A file with the CNN teacher's seed 0 and 1 (one epoch each)."""
    path = tmp_path / "a.json"
    script.run(["CNN teacher"], [0, 1], path)
    return path


def refused(script, capsys, argv: list[str], match: str) -> str:
    """main(argv) stops with exit status 2 and a message matching ``match``."""
    with pytest.raises(SystemExit) as stop:
        script.main(argv)
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert match in message, message
    return message


def test_a_run_records_with_provenance(recorded):
    part = load_results(recorded)
    provenance = part["provenance"][0]
    for key in ("command", "git_commit", "torch", "cpu", "cpu_capability", "kernel_variables",
                "seeds", "wall_seconds"):
        assert key in provenance, key
    assert provenance["wall_seconds"] > 0
    assert part["fraction"] == distill_digits.FRACTION and part["recipe"]["epochs"] == 1
    assert [run["seed"] for run in part["runs"]["CNN teacher"]] == [0, 1]
    assert all("process" not in run for run in part["runs"]["CNN teacher"])  # entry 0
    folder = recorded.parent
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temp files
    umask = os.umask(0)
    os.umask(umask)
    assert recorded.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0o600


def test_out_appends_to_an_existing_file_and_never_replaces_it(recorded, script, capsys):
    before = recorded.read_bytes()
    refused(script, capsys, ["--only", "CNN teacher", "--seeds", "1", "--out", str(recorded)],
            "setting 'CNN teacher' seed 1 twice")  # fmt: skip
    assert recorded.read_bytes() == before  # refused before anything trained
    script.main(["--only", "CNN teacher", "--seeds", "2", "--out", str(recorded)])
    appended = load_results(recorded)
    assert [run["seed"] for run in appended["runs"]["CNN teacher"]] == [0, 1, 2]
    assert len(appended["provenance"]) == 2
    assert [run.get("process", 0) for run in appended["runs"]["CNN teacher"]] == [0, 0, 1]
    first = json.loads(before)["runs"]["CNN teacher"]
    assert appended["runs"]["CNN teacher"][:2] == first  # the recorded runs, unchanged


def test_the_shipped_file_needs_the_flag_and_a_folder_is_no_file(tmp_path, script, capsys):
    refused(script, capsys, ["--out", str(RESULTS_PATH)], "pass --write-assets")
    refused(script, capsys, ["--out", str(tmp_path)], "is a folder")
    refused(script, capsys, ["--write-assets", "--out", str(tmp_path / "x.json")],
            "--write-assets writes the shipped file")  # fmt: skip


def test_seeds_and_settings_are_named_once(script, capsys):
    refused(script, capsys, ["--seeds", "0", "0"], "--seeds names 0 twice")
    refused(script, capsys, ["--only", "conv stem", "conv stem"], "names conv stem twice")
    refused(script, capsys, ["--seeds", "-1"], "seeds are 0 or more")


@pytest.mark.parametrize("faked", [None, *FAKES], ids=["this machine", *FAKES])
def test_runs_of_another_machine_join_only_when_allowed(tmp_path, one_epoch, script, capsys,
                                                        monkeypatch, faked):  # fmt: skip
    """'Another machine' is derived from the one the script sees, so the test means the same on
    an AMD EPYC, an Intel Xeon or any other CPU; it runs as this machine and as both fakes."""
    if faked is not None:
        pretend(monkeypatch, FAKES[faked])
    recorded = tmp_path / "a.json"
    script.run(["CNN teacher"], [0, 1], recorded)
    here = (script.provenance.cpu_model_name(), script.provenance.cpu_capability())
    assert [(e["cpu"], e["cpu_capability"]) for e in load_results(recorded)["provenance"]] == [
        here]  # fmt: skip
    cpu, capability = another_machine(here)
    other = json.loads(recorded.read_text())
    for entry in other["provenance"]:
        entry.update(cpu=cpu, cpu_capability=capability)
    recorded.write_text(json.dumps(other))
    before = recorded.read_bytes()
    argv = ["--only", "CNN teacher", "--seeds", "2", "--out", str(recorded)]
    message = refused(script, capsys, argv, "different machines or software")
    assert f"{cpu}, {capability}" in message and f"{here[0]}, {here[1]}" in message
    assert recorded.read_bytes() == before
    script.main([*argv, "--allow-mixed"])
    joined = load_results(recorded)
    assert [entry["cpu"] for entry in joined["provenance"]] == [cpu, here[0]]
    assert joined["runs"]["CNN teacher"][2]["process"] == 1


def test_merge_joins_files_and_keeps_every_run(recorded, tmp_path, one_epoch, script, capsys):
    second = tmp_path / "b.json"
    script.run(["conv stem"], [0], second)
    merged = tmp_path / "ab.json"
    script.main(["--merge", str(recorded), str(second), "--out", str(merged)])
    joined = load_results(merged)
    assert list(joined["runs"]) == ["CNN teacher", "conv stem"]
    assert len(joined["provenance"]) == 2 and joined["runs"]["conv stem"][0]["process"] == 1
    assert joined["settings"] == {k: distill_digits.SETTINGS[k] for k in joined["runs"]}
    assert joined["joins"][-1]["files"] == [str(recorded), str(second)]
    refused(script, capsys, ["--merge", str(recorded), str(recorded), "--out",
                             str(tmp_path / "twice.json")], "names")  # fmt: skip
    copy = tmp_path / "copy.json"
    copy.write_bytes(recorded.read_bytes())
    refused(script, capsys, ["--merge", str(recorded), str(copy), "--out",
                             str(tmp_path / "c.json")], "seed 0 twice")  # fmt: skip
    # An existing --out that is not merged would lose its runs: refused, unchanged.
    before = second.read_bytes()
    refused(script, capsys, ["--merge", str(recorded), "--out", str(second)],
            "is not among the files to merge")  # fmt: skip
    assert second.read_bytes() == before
    # An existing --out among the inputs is joined with them.
    script.main(["--merge", str(second), str(recorded), "--out", str(second)])
    assert sorted(load_results(second)["runs"]) == ["CNN teacher", "conv stem"]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r["runs"]["CNN teacher"][0].update(validation_accuracy="NaN"),
         "validation_accuracy is 'NaN', not a number in [0, 1]"),
        (lambda r: r["runs"]["CNN teacher"][0].update(test_accuracy=float("nan")),
         "test_accuracy is nan, not a number in [0, 1]"),
        (lambda r: r["runs"]["CNN teacher"][0].update(test_accuracy=97.8),
         "test_accuracy is 97.8, not a number in [0, 1]"),
        (lambda r: r["runs"].update({"ViT, giant": [{"seed": 0}]}),
         "setting 'ViT, giant' is unknown to this code"),
        (lambda r: r["provenance"][0].pop("cpu"), "provenance entry 0 does not name its cpu"),
        (lambda r: r["runs"]["CNN teacher"][1].update(seed="0"), "the seed is not an int"),
        (lambda r: r["runs"]["CNN teacher"][1].update(seed=0), "has seed(s) [0] twice"),
        (lambda r: r["runs"]["CNN teacher"][1].update(process=3), "process 3 names no"),
        (lambda r: r.update(fraction=1.0), "its 'fraction' is 1.0, this code's is 0.5"),
        (lambda r: r["settings"].update({"CNN teacher": {"model": "vit"}}),
         "setting 'CNN teacher' is {'model': 'vit'} in the file"),
    ],
)
def test_merge_refuses_a_file_that_is_not_a_results_file(recorded, tmp_path, script, capsys,
                                                         damage, message):  # fmt: skip
    results = json.loads(recorded.read_text())
    damage(results)
    recorded.write_text(json.dumps(results))
    out = tmp_path / "merged.json"
    text = refused(script, capsys, ["--merge", str(recorded), "--out", str(out)], message)
    assert "not merged" in text and str(recorded) in text and not out.exists()
    with pytest.raises(ResultsFileError, match="not a results file of this miniature"):
        script.validate(results, "x.json")


def test_check_reruns_a_slice_and_names_the_machine(recorded, script, capsys):
    assert script.main(["--check", str(recorded), "--only", "CNN teacher", "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "ok  'CNN teacher' seed 0 validation_accuracy" in out and "was made on" in out


def test_a_file_recorded_before_more_teachers_were_named_still_joins(recorded, tmp_path, script,
                                                                     one_epoch):  # fmt: skip
    """The shipped file named two teachers; this code names more. A file whose teachers this
    code's extend is one of this miniature's, and what is written names them all; a teacher
    trained by another setting is refused."""
    results = json.loads(recorded.read_text())
    results["teachers"] = {"cnn": "CNN teacher", "vit": "ViT, scratch"}
    recorded.write_text(json.dumps(results))
    script.validate(results, "earlier.json")
    before = json.loads(recorded.read_text())["runs"]
    script.run(["weak CNN teacher"], [0], recorded)
    appended = load_results(recorded)
    assert appended["teachers"] == distill_digits.TEACHERS
    assert appended["runs"]["CNN teacher"] == before["CNN teacher"]
    provenance = appended["provenance"][-1]
    assert "attn_impl='explicit'" in provenance["macs"]  # how this code counts MACs
    results["teachers"] = {"cnn": "ViT, scratch"}
    with pytest.raises(ResultsFileError, match="its 'teachers' is"):
        script.validate(results, "other.json")


def test_merging_into_the_shipped_file_keeps_every_recorded_run(tmp_path, one_epoch, script,
                                                                monkeypatch):  # fmt: skip
    """What --merge with --write-assets does to the shipped file, on a copy: every recorded
    run, setting and provenance entry is kept as it was; only new ones are added."""
    shipped = tmp_path / "shipped.json"
    shipped.write_bytes(RESULTS_PATH.read_bytes())
    new = tmp_path / "new.json"
    script.run(["weak CNN teacher"], [5], new)  # a seed the file lacks; one epoch, so the
    # file is then given the shipped recipe
    monkeypatch.undo()
    made = json.loads(new.read_text())
    made["recipe"] = experiments.recorded_recipe()
    new.write_text(json.dumps(made))
    script.merge([shipped, new], shipped, allow_mixed=True)
    before, after = json.loads(RESULTS_PATH.read_text()), load_results(shipped)
    for label, runs in before["runs"].items():  # kept, in their order, first
        assert after["runs"][label][: len(runs)] == runs, label
    assert after["provenance"][: len(before["provenance"])] == before["provenance"]
    assert after["joins"][: len(before["joins"])] == before["joins"]
    assert {k: v for k, v in after["settings"].items() if k in before["settings"]} == (
        before["settings"])  # fmt: skip
    assert after["runs"]["weak CNN teacher"][5]["process"] == len(before["provenance"])
