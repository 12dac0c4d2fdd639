"""vitbook.studies.records and the scripts that record results: nothing recorded is lost.

Paths are checked before a run, writes are atomic (a full disk keeps the old file and leaves no
temporary file), damaged results files are named, ladder runs that do not belong together are not
joined; the scripts' default outputs are new files, and the shipped files in vitbook/assets are
written only with --write-assets.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vitbook import _files
from vitbook._files import ResultsFileError, ShippedFileError
from vitbook.studies import experiments, ladder, records, transfer_digits

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "vitbook" / "assets"


def shipped_checksums() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ASSETS.iterdir())}


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


# ----- paths -------------------------------------------------------------------------------------


def test_shipped_files_are_recognised_wherever_the_path_comes_from(tmp_path, monkeypatch):
    assert _files.is_shipped(ASSETS / "transfer.json") and _files.is_shipped(ASSETS)
    monkeypatch.chdir(ASSETS)
    assert _files.is_shipped("experiments.json") and _files.is_shipped("../assets/x.json")
    assert not _files.is_shipped(tmp_path / "assets" / "transfer.json")


def test_a_new_path_never_names_an_existing_file(tmp_path):
    first = _files.new_path(tmp_path, "ladder")
    first.write_text("{}")
    second = _files.new_path(tmp_path, "ladder")
    assert second != first and not second.exists() and second.name.startswith("ladder-")
    assert second.suffix == ".json" and _files.new_path(tmp_path, "m", ".safetensors").suffix \
        == ".safetensors"  # fmt: skip


def test_check_output_refuses_what_a_run_could_not_write(tmp_path, monkeypatch):
    with pytest.raises(ShippedFileError, match=r"transfer\.json ships with .*--write-assets"):
        _files.check_output(ASSETS / "transfer.json")
    with pytest.raises(ShippedFileError, match="--overwrite-it"):
        _files.check_output(ASSETS / "new.json", flag="--overwrite-it")
    assert _files.check_output(ASSETS / "new.json", write_assets=True) == ASSETS / "new.json"
    assert not (ASSETS / "new.json").exists()  # checked, not written
    with pytest.raises(ValueError, match=r"is a folder; name a file in it"):
        _files.check_output(tmp_path)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ValueError, match=r"the folder of .* is a file"):
        _files.check_output(tmp_path / "plain" / "out.json")
    with pytest.raises(FileExistsError, match="does not replace it"):
        _files.check_output(tmp_path / "plain", exists_ok=False)
    assert _files.check_output(tmp_path / "a" / "b" / "out.json").parent.is_dir()
    with pytest.raises(TypeError, match="must be a file path"):
        _files.check_output(3)

    def no_room(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", no_room)
    with pytest.raises(PermissionError, match=r"cannot write in .*choose a writable place"):
        _files.check_output(tmp_path / "out.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "plain"]  # no probe left behind


# ----- atomic writes -----------------------------------------------------------------------------


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    _files.write_json(path, {"runs": [1, 2, 3]})
    path.chmod(0o640)
    _files.write_json(path, {"runs": [4]})
    assert json.loads(path.read_text()) == {"runs": [4]} and path.stat().st_mode & 0o777 == 0o640

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        _files.write_json(path, {"runs": [5, 6]})
    monkeypatch.undo()

    def failing_writer(temporary: Path) -> None:
        temporary.write_bytes(b'{"runs": [')  # half written, then the disk is full
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        _files.write_with(path, failing_writer)
    assert json.loads(path.read_text()) == {"runs": [4]}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_full_disk_names_the_file_the_size_and_what_to_do(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    _files.write_json(path, {"runs": [1]})

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OSError, match=r"^\[Errno 28\] No space left on device: writing .*results"
                       r"\.json \(32 bytes to write\) failed; results\.json is as it was and no "
                       r"temporary file is left\. Free space on that disk \(df -h .*\) or write "
                       r"elsewhere, then run the command again\.$") as caught:  # fmt: skip
        _files.write_json(path, {"runs": [1, 2, 3]})
    assert caught.value.errno == errno.ENOSPC  # still an OSError of a full disk
    monkeypatch.undo()

    def half(temporary: Path) -> None:  # a writer of unknown size: what it wrote is named
        temporary.write_bytes(b"x" * 3000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"writing .*model\.bin \(2\.9 KiB written when the disk "
                       r"filled\) failed; model\.bin"):  # fmt: skip
        _files.write_with(tmp_path / "model.bin", half)
    assert json.loads(path.read_text()) == {"runs": [1]}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_new_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        _files.write_bytes(tmp_path / "a.bin", b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0o600


DISK_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
sys.argv = sys.argv[1:]
exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"), {"__name__": "__main__",
                                                            "__file__": sys.argv[0]})
"""


def run_with_full_disk(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` with files limited to 8 KB: what a disk that fills up does to a write."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    return subprocess.run([sys.executable, "-c", DISK_FULL, str(ROOT / "scripts" / script), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
                          check=False)  # fmt: skip


def test_a_merge_onto_a_full_disk_keeps_the_existing_file(tmp_path):
    shipped = json.loads((ASSETS / "cifar10_results.json").read_text())
    parts = []
    for k in range(2):  # the shipped ladder but its first run, in two parts of over 8 KB
        part = {"runs": shipped["runs"][1 + k :: 2], "provenance": shipped["provenance"]}
        parts.append(tmp_path / f"part{k}.json")
        parts[-1].write_text(json.dumps(part))
    existing = tmp_path / "existing.json"
    existing.write_text(json.dumps({"runs": shipped["runs"][:1],
                                    "provenance": shipped["provenance"][:1]}))  # fmt: skip
    before = existing.read_bytes()
    full = run_with_full_disk("train_cifar10.py", "--merge", str(parts[0]), str(parts[1]),
                              str(existing), "--out", str(existing), cwd=tmp_path)  # fmt: skip
    assert full.returncode != 0 and "File too large" in full.stderr, full.stderr[-2000:]
    assert existing.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json", "part0.json",
                                                          "part1.json"]  # fmt: skip


# ----- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("load", [ladder.load_results, experiments.load_results,
                                  transfer_digits.load_results])  # fmt: skip
def test_damaged_results_files_are_named_with_what_to_do(tmp_path, load):
    cut = tmp_path / "results.json"
    cut.write_text('{"runs": [{"row": "a", "seed"')  # cut short, as by a full disk
    with pytest.raises(ResultsFileError, match=r"results\.json is not valid JSON: .*cut short"):
        load(cut)
    assert issubclass(ResultsFileError, ValueError)
    cut.write_bytes(b"\xff\xfe binary")
    with pytest.raises(ResultsFileError, match="is not valid JSON"):
        load(cut)
    cut.write_text("[1, 2]")
    with pytest.raises(ResultsFileError, match="holds a JSON list, not the object"):
        load(cut)
    with pytest.raises(ResultsFileError, match="is a folder"):
        load(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing\.json does not exist; .*scripts/"):
        load(tmp_path / "missing.json")


def test_a_file_nested_too_deep_to_read_is_named(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"runs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ResultsFileError, match=r"deep\.json nests deeper than a results file "
                       r"does .*it is not a results file; record it again"):  # fmt: skip
        _files.read_json(deep, remedy="record it again")


def test_a_damaged_shipped_file_says_how_to_restore_it(tmp_path, monkeypatch):
    monkeypatch.setattr(_files, "ASSETS", tmp_path)
    (tmp_path / "transfer.json").write_text("{")
    with pytest.raises(ResultsFileError, match=r"git checkout -- .*transfer\.json"):
        _files.read_json(tmp_path / "transfer.json", remedy="record it again")


# ----- joining ladder runs -----------------------------------------------------------------------


def part(rows_seeds, *, device="NVIDIA H100", sha="e00b", epochs=30, recipe=None, process=None):
    runs = [{"row": row, "seed": seed, "epochs": epochs, "recipe": recipe or {"lr": 1e-3},
             "test_accuracy": 0.8} for row, seed in rows_seeds]  # fmt: skip
    if process is not None:
        for run in runs:
            run["process"] = process
    return {"runs": runs, "provenance": [{"device": device, "data": {"sha256": sha}}]}


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (part([("a", 1)], sha="0123"), r"data checksums differ: e00b \(a\.json\); 0123 \(b\.json"),
        (part([("a", 1)], device="CPU (x86_64)"), r"devices differ: .*CPU \(x86_64\) \(b\.json"),
        (part([("a", 1)], epochs=1), r"row 'a' has 2 epochs or recipes: .*\"epochs\": 1"),
        (part([("a", 1)], recipe={"lr": 0.1}), r"row 'a' has 2 epochs or recipes: .*0\.1"),
    ],
)
def test_runs_that_do_not_belong_together_are_refused_unless_told(other, message):
    first = part([("a", 0), ("b", 0)])
    with pytest.raises(ValueError, match=message) as caught:
        records.check_together([("a.json", first), ("b.json", other)])
    assert "--allow-mixed" in str(caught.value)
    joined = records.join([("a.json", first), ("b.json", other)], allow_mixed=True,
                          note={"command": "merge"})  # fmt: skip
    assert len(joined["runs"]) == 3 and len(joined["provenance"]) == 2
    assert joined["joins"] == [{"command": "merge", "allow_mixed": True}]


def test_a_run_twice_is_refused_even_when_told():
    twice = [("a.json", part([("a", 0)])), ("b.json", part([("a", 0)]))]
    for allow in (False, True):
        with pytest.raises(ValueError, match=r"row 'a' seed 0 twice \(a\.json, b\.json\)"):
            records.check_together(twice, allow_mixed=allow)
    with pytest.raises(ResultsFileError, match="not a ladder results file"):
        records.check_together([("c.json", {"runs": [], "provenance": []})])


def test_join_keeps_every_provenance_and_points_runs_at_theirs():
    first, second = part([("a", 0)], process=0), part([("a", 1), ("b", 1)], process=0)
    second["provenance"][0]["command"] = "second"
    earlier = {"runs": [], "provenance": [], "joins": [{"command": "before"}]}
    joined = records.join([("x", {**first, "joins": earlier["joins"]}), ("y", second)],
                          note={"command": "now"})  # fmt: skip
    assert [run["process"] for run in joined["runs"]] == [0, 1, 1]
    assert joined["provenance"][1]["command"] == "second"
    assert [j["command"] for j in joined["joins"]] == ["before", "now"]


def test_a_seed_written_as_text_is_refused_not_counted_twice():
    text = part([("a", 1)])
    text["runs"][0]["seed"] = "0"  # would be a second seed beside the integer 0
    for seed in ("0", 0.0, True, None):
        text["runs"][0]["seed"] = seed
        with pytest.raises(ResultsFileError, match=rf"run 0 of b\.json has row 'a' and seed "
                           rf"{re.escape(repr(seed))} .*write the seed as a number"):  # fmt: skip
            records.join([("a.json", part([("a", 0)])), ("b.json", text)], note={})
    unnamed = part([("a", 1)])
    unnamed["runs"][0]["row"] = 3
    with pytest.raises(ResultsFileError, match=r"run 0 of b\.json has row 3 .*a row is a name"):
        records.check_together([("b.json", unnamed)])


@pytest.mark.parametrize("process", [1, -1, 5, "0", True, 0.0])
def test_a_run_pointing_at_no_provenance_entry_is_refused(process):
    lost = part([("a", 1)], process=process)
    named = re.escape(repr(process))
    message = (rf"run 0 of b\.json \(row 'a' seed 1\) names process {named}, but the file has "
               r"provenance entries 0 \.\. 0 only.*record that run again")  # fmt: skip
    with pytest.raises(ResultsFileError, match=message):
        records.join([("a.json", part([("a", 0)], process=0)), ("b.json", lost)], note={})


@pytest.mark.parametrize("data", ["x.npz", ["e00b"], 7])
def test_a_provenance_whose_data_is_not_an_object_is_named(data):
    odd = part([("a", 1)])
    odd["provenance"][0]["data"] = data
    message = rf"provenance entry 0 of b\.json has data {re.escape(repr(data))} .*record its runs"
    with pytest.raises(ResultsFileError, match=message):
        records.join([("a.json", part([("a", 0)])), ("b.json", odd)], note={})
    odd["provenance"][0]["data"] = None  # no data recorded: still a results file
    assert len(records.join([("a.json", part([("a", 0)])), ("b.json", odd)], allow_mixed=True,
                            note={})["runs"]) == 2  # fmt: skip


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"runs": [{"accuracy": 0.9}, {"accuracy": float("nan")}]}, r"runs\[1\]\.accuracy"),
        ({"loss": [1.0, float("inf")]}, r"loss\[1\]"),
        ([float("-inf")], r"\[0\]"),
        (float("nan"), "the top"),
    ],
)
def test_write_json_refuses_nan_and_keeps_the_old_file(tmp_path, data, where):
    path = tmp_path / "results.json"
    _files.write_json(path, {"runs": [1]})
    with pytest.raises(ValueError, match=rf"(nan|inf) at {where} cannot be written to .*results"
                       r"\.json: JSON has no NaN or infinity.*Write None \(null\)"):  # fmt: skip
        _files.write_json(path, data)
    assert json.loads(path.read_text()) == {"runs": [1]}  # strict JSON, and unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_spread_refuses_what_has_no_number_to_average():
    for values, position in (([float("nan")], 0), ([0.8, float("nan")], 1), ([float("inf")], 0)):
        with pytest.raises(ValueError, match=rf"spread got (nan|inf) at position {position} of "
                           rf"{len(values)}: .*Leave it out and say so"):  # fmt: skip
            records.spread(values)
    for bad in ("0.8", None, True):
        with pytest.raises(TypeError, match=rf"spread takes numbers, got {re.escape(repr(bad))}"):
            records.spread([0.9, bad])
    assert records.spread(iter([0.8, 0.9]))["n"] == 2  # any iterable of numbers, as before


# ----- the scripts' outputs ---------------------------------------------------------------------


def main_of(script, argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [script.__name__ + ".py", *argv])
    monkeypatch.setenv("VITBOOK_PROGRESS", "0")  # main() sets it; undone after the test
    return script.main()


def refusal(script, argv, monkeypatch, capsys) -> str:
    """What the script says when it refuses ``argv`` (it must exit with an error)."""
    with pytest.raises(SystemExit) as caught:
        main_of(script, argv, monkeypatch)
    assert caught.value.code not in (0, None)
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_run_transfer_writes_a_new_file_and_never_a_shipped_one(tmp_path, monkeypatch, capsys):
    script = load_script("run_transfer")
    calls = []
    monkeypatch.setattr(script, "run", lambda *args: calls.append(args))
    monkeypatch.chdir(tmp_path)
    before = shipped_checksums()
    main_of(script, ["--only", "scratch", "--seeds", "0"], monkeypatch)  # the docstring's
    (settings, seeds, out, pretrained), = calls
    assert out.parent == Path("runs") and out.name.startswith("transfer-") and pretrained is None
    refused = [
        (["--out", str(ASSETS / "transfer.json")], "ships with vitbook"),
        (["--out", str(tmp_path)], "is a folder"),
        (["--seeds", "0", "0"], "names a seed twice"),
    ]
    (tmp_path / "old.json").write_text("{}")
    refused.append((["--out", str(tmp_path / "old.json")], "exists, and this script does not"))
    for argv, message in refused:
        assert message in refusal(script, ["--only", "scratch", *argv], monkeypatch, capsys)
    assert len(calls) == 1  # nothing ran
    main_of(script, ["--out", str(tmp_path / "new.json"), "--save-pretrained"], monkeypatch)
    assert calls[-1][3] == tmp_path / "new-pretrained.safetensors"
    main_of(script, ["--out", str(ASSETS / "transfer.json"), "--write-assets"], monkeypatch)
    assert calls[-1][3] == transfer_digits.PRETRAINED_PATH  # a deliberate re-record
    assert shipped_checksums() == before


def test_run_transfer_refuses_a_merge_of_nan_and_shots_without_check(tmp_path, monkeypatch,
                                                                     capsys):  # fmt: skip
    script = load_script("run_transfer")
    calls = []
    monkeypatch.setattr(script, "run", lambda *args: calls.append(args))
    monkeypatch.setattr(script, "merge", lambda *args, **kwargs: calls.append(args))
    monkeypatch.chdir(tmp_path)
    shipped = (ASSETS / "transfer.json").read_text()
    (tmp_path / "good.json").write_text(shipped)
    runs = json.loads(shipped)["settings"]["scratch"]
    shots = next(iter(runs))
    first = json.dumps(runs[shots]["runs"][0]["test_accuracy"])
    # an older writer's literal NaN, where a number was
    damaged = shipped.replace(f'"test_accuracy": {first}', '"test_accuracy": NaN', 1)
    assert damaged != shipped
    (tmp_path / "nan.json").write_text(damaged)
    text = refusal(script, ["--merge", "good.json", "nan.json", "--out", "m.json"], monkeypatch,
                   capsys)  # fmt: skip
    assert "not merged: nan.json holds nan at settings.scratch." in text, text
    assert "leave the file out of --merge" in text
    for argv in (["--only", "scratch", "--shots", "1"], ["--merge", "good.json", "--shots", "1"]):
        text = refusal(script, argv, monkeypatch, capsys)
        assert "--shots 1 is read by --check only" in " ".join(text.split()), text
    assert calls == [] and not (tmp_path / "m.json").exists()


def test_run_experiments_updates_only_when_told(tmp_path, monkeypatch, capsys):
    script = load_script("run_experiments")
    calls = []
    monkeypatch.setattr(script, "run", lambda *args: calls.append(args))
    monkeypatch.setattr(script, "timing", lambda out: calls.append(("timing", out)))
    monkeypatch.chdir(tmp_path)
    before = shipped_checksums()
    main_of(script, ["--only", "positions"], monkeypatch)
    assert calls[-1][2].parent == Path("runs")
    existing = tmp_path / "mine.json"
    existing.write_text(json.dumps({"experiments": {}}))
    for argv, message in [
        (["--out", str(existing)], "pass --update"),
        (["--out", str(ASSETS / "experiments.json"), "--update"], "--write-assets"),
        (["--timing"], "--write-assets"),
        (["--seeds", "1", "1"], "names a seed twice"),
    ]:
        assert message in refusal(script, argv, monkeypatch, capsys), argv
    existing.write_text('{"experiments": {')
    argv = ["--out", str(existing), "--update"]
    assert "mine.json is not valid JSON" in refusal(script, argv, monkeypatch, capsys)
    assert len(calls) == 1
    existing.write_text(json.dumps({"experiments": {}}))
    main_of(script, ["--out", str(existing), "--update", "--only", "positions"], monkeypatch)
    assert calls[-1] == (["positions"], [0, 1, 2], existing)
    assert shipped_checksums() == before


def test_train_digits_vit_checks_its_path_before_reading_a_digit(tmp_path, monkeypatch, capsys):
    script = load_script("train_digits_vit")

    def no_digits(**kwargs):
        raise AssertionError("the digits were read before the output was checked")

    monkeypatch.setattr(script, "load_digits_split", no_digits)
    monkeypatch.chdir(tmp_path)
    before = shipped_checksums()
    (tmp_path / "old.safetensors").write_bytes(b"a model")
    for argv, message in [
        (["--out", str(ASSETS / "digits_vit.safetensors")], "--write-assets"),
        (["--out", str(tmp_path / "old.safetensors")], "does not overwrite a model"),
        (["--out", str(tmp_path)], "is a folder"),
    ]:
        assert message in refusal(script, argv, monkeypatch, capsys), argv
    with pytest.raises(AssertionError, match="digits were read"):  # the default passes the check
        main_of(script, [], monkeypatch)
    # nothing written: only the default name's reservation, freed when the process exits
    (reserved,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"\.digits_vit-\d{8}T\d{6}Z\.safetensors\.new", reserved.name)
    assert shipped_checksums() == before
