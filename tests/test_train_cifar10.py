"""scripts/train_cifar10.py: smoke runs on the stand-in, under torchrun, and what it never loses.

Under ``torchrun --nproc_per_node=2`` (gloo on the CPU) each process trains on half of every
global batch inside DistributedDataParallel; the per-epoch losses must equal one process's on the
same global batches, up to the order of floating-point sums. The script's default output is a new
file, an existing one only gains runs that belong with its own, the shipped recording is written
only with --write-assets, every path is checked before training, and a stopped worker ends the
others with a message instead of a hang.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitbook.pretrained.checkpoints import load_model, read_metadata
from vitbook.studies import ladder
from vitbook.studies.ladder import RESULTS_PATH

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_cifar10.py"
ASSETS = ROOT / "vitbook" / "assets"
TINY = ["--standin", "--tiny", "--rows", "vit-crop-flip", "--batch-size", "60"]
SMOKE = [*TINY, "--epochs", "2", "--seeds", "0"]
TIMEOUT_S = 240
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "VITBOOK_PROGRESS": "0", "PYTHONPATH": str(ROOT)}


def shipped_checksums() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ASSETS.iterdir())}


def script_run(args: list[str], cwd: Path = ROOT, command: list[str] | None = None):
    return subprocess.run(
        [*(command or [sys.executable, str(SCRIPT)]), *args], cwd=cwd, env=ENV,
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip


def run(command: list[str], out: Path) -> dict:
    result = script_run([*SMOKE, "--out", str(out)], command=command)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def load_script():
    spec = importlib.util.spec_from_file_location("train_cifar10", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def refusal(script, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as caught:
        script.main(argv)
    assert caught.value.code not in (0, None)
    captured = capsys.readouterr()
    return captured.out + captured.err


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    return run([sys.executable, str(SCRIPT)], tmp_path_factory.mktemp("one") / "results.json")


def test_a_smoke_run_records_the_run_and_its_provenance(one_process):
    (record,) = one_process["runs"]
    assert record["row"] == "vit-crop-flip" and record["seed"] == 0 and record["epochs"] == 2
    assert len(record["train_loss"]) == len(record["val_accuracy"]) == 2
    assert 0 <= record["test_accuracy"] <= 1 and record["precision"] == "fp32"
    assert record["process"] == 0 and record["wall_clock_minutes"] > 0
    assert record["peak_gpu_memory_mb"] is None  # no GPU here
    assert record["recipe"]["batch_size"] == 60  # an override is part of the recipe
    (provenance,) = one_process["provenance"]
    assert provenance["processes"] == 1 and provenance["gpu"] is None
    assert provenance["data"]["source"].startswith("stand-in")
    assert len(provenance["data"]["sha256"]) == 64
    assert "--standin" in provenance["command"] and "wall-clock" in provenance["timing"]


def test_two_processes_under_torchrun_compute_the_losses_of_one(one_process, tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", str(SCRIPT)]  # fmt: skip
    two = run(torchrun, tmp_path / "results.json")
    assert two["provenance"][0]["processes"] == 2
    (one_run,), (two_run,) = one_process["runs"], two["runs"]
    assert two_run["train_loss"] == pytest.approx(one_run["train_loss"], rel=1e-5)
    assert two_run["val_accuracy"] == pytest.approx(one_run["val_accuracy"], abs=1e-6)


def test_the_smoke_command_of_the_issue_leaves_the_shipped_files_alone(tmp_path, monkeypatch):
    """The command that once replaced the shipped ladder, with the training itself stubbed."""
    script = load_script()
    trained = []

    def fake_run(name, seed, splits, args, device, rank):
        trained.append((name, seed, args.epochs))
        return {"row": name, "seed": seed, "epochs": 1, "recipe": ladder.recipe(name, None),
                "final_val_accuracy": 0.5, "test_accuracy": 0.5,
                "wall_clock_minutes": 0.1}, None  # fmt: skip

    monkeypatch.setattr(script.runs, "run", fake_run)
    monkeypatch.chdir(tmp_path)
    before = shipped_checksums()
    smoke = ["--standin", "--tiny", "--epochs", "1", "--rows", "resnet18", "--seeds", "0"]
    assert script.main(smoke) == 0 and trained == [("resnet18", 0, 1)]
    (written,) = (tmp_path / "runs").iterdir()
    assert written.name.startswith("cifar10-") and len(json.loads(written.read_text())["runs"]) == 1
    assert shipped_checksums() == before


def test_runs_are_appended_only_where_they_belong(tmp_path):
    before = shipped_checksums()
    first = script_run([*TINY, "--epochs", "1", "--seeds", "1", "0", "--inside",
                        "vit-crop-flip", "--save-dir", "weights"], cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    (out,) = (tmp_path / "runs").iterdir()  # the default: a new file in runs/
    results = json.loads(out.read_text())
    assert [(r["row"], r["seed"]) for r in results["runs"]] == [("vit-crop-flip", 1),
                                                               ("vit-crop-flip", 0)]  # fmt: skip
    # The read-out: seed 0 of the --inside row, though this process's first seed is 1.
    assert ["inside" in r for r in results["runs"]] == [False, True]
    weights = tmp_path / "weights"
    assert sorted(p.name for p in weights.iterdir()) == [
        "vit-crop-flip-seed0-readout.json", "vit-crop-flip-seed0.safetensors",
        "vit-crop-flip-seed1.safetensors"]  # fmt: skip
    model = load_model(weights / "vit-crop-flip-seed0.safetensors")
    assert model.config.embed_dim == 32 and model.config.num_classes == 3
    assert read_metadata(weights / "vit-crop-flip-seed0.safetensors")["row"] == "vit-crop-flip"
    readout = json.loads((weights / "vit-crop-flip-seed0-readout.json").read_text())
    assert readout == results["runs"][1]["inside"]

    again = script_run([*TINY, "--epochs", "1", "--seeds", "2", "--out", str(out)],
                       cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    appended = json.loads(out.read_text())
    assert [r["seed"] for r in appended["runs"]] == [1, 0, 2]  # nothing erased
    assert [r["process"] for r in appended["runs"]] == [0, 0, 1]
    assert len(appended["provenance"]) == 2

    kept = out.read_bytes()
    for args, message in [
        (["--epochs", "1", "--seeds", "2"], "row 'vit-crop-flip' seed 2 twice"),
        (["--epochs", "2", "--seeds", "3"], "row 'vit-crop-flip' has 2 epochs or recipes"),
    ]:
        refused = script_run([*TINY, *args, "--out", str(out)], cwd=tmp_path)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr[-3000:]
        assert "nothing trained" in refused.stderr
    assert out.read_bytes() == kept and shipped_checksums() == before
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary left


def test_bad_arguments_and_paths_are_refused_before_anything_trains(tmp_path, capsys):
    script = load_script()
    for argv, message in [
        (["--seeds", "0", "0"], "--seeds 0 0 names a seed twice"),
        (["--epochs", "0"], "--epochs: 0 is not a positive number"),
        (["--batch-size", "0"], "--batch-size: 0 is not a positive number"),
        (["--rows", "vit-crop-flip", "vit-crop-flip"], "names a row twice"),
        (["--out", str(RESULTS_PATH)], "ships with vitbook (vitbook/assets)"),
        (["--out", str(tmp_path)], "is a folder"),
        (["--out", str(tmp_path / "w.json"), "--save-dir", str(ASSETS / "w")], "--write-assets"),
    ]:
        text = refusal(script, ["--standin", "--rows", "vit-crop-flip", *argv], capsys)
        assert message in text, (argv, text)
    broken = tmp_path / "broken.json"
    broken.write_text('{"runs": [')
    text = refusal(script, ["--standin", "--rows", "vit-crop-flip", "--out", str(broken)], capsys)
    assert "broken.json is not valid JSON" in text and "nothing trained" in text


def halves(tmp_path) -> list[Path]:
    shipped = json.loads(RESULTS_PATH.read_text())
    paths = []
    for k in range(2):
        part = {"runs": shipped["runs"][k::2], "provenance": shipped["provenance"][k::2]}
        paths.append(tmp_path / f"half{k}.json")
        paths[-1].write_text(json.dumps(part))
    return paths


def test_merge_joins_what_belongs_and_refuses_the_rest(tmp_path, capsys, monkeypatch):
    script = load_script()
    monkeypatch.chdir(tmp_path)
    parts = halves(tmp_path)
    assert script.main(["--merge", *map(str, parts), "--out", "ladder.json"]) == 0
    merged = json.loads((tmp_path / "ladder.json").read_text())
    assert len(merged["runs"]) == 13 and len(merged["provenance"]) == 13
    assert merged["joins"][0]["files"] == [str(p) for p in parts]
    standin = tmp_path / "standin.json"
    run = {**merged["runs"][0], "seed": 7, "epochs": 1, "test_accuracy": 0.3}
    provenance = {**merged["provenance"][0], "device": "CPU (x86_64)",
                  "data": {**merged["provenance"][0]["data"], "sha256": "0123abcd"}}  # fmt: skip
    standin.write_text(json.dumps({"runs": [run], "provenance": [provenance]}))
    text = refusal(script, ["--merge", "ladder.json", str(standin), "--out", "m.json"], capsys)
    for message in ("data checksums differ", "devices differ", "2 epochs or recipes",
                    "--allow-mixed"):  # fmt: skip
        assert message in text, text
    text = refusal(script, ["--merge", *map(str, parts), str(parts[0]), "--out", "m.json"], capsys)
    assert "seed 0 twice" in text
    text = refusal(script, ["--merge", str(parts[0]), "--out", "ladder.json"], capsys)
    assert "ladder.json exists and is not among the files to merge" in text
    assert not (tmp_path / "m.json").exists()
    assert script.main(["--merge", "ladder.json", str(standin), "--allow-mixed"]) == 0
    (mixed,) = (tmp_path / "runs").iterdir()  # the default: a new file
    mixed = json.loads(mixed.read_text())
    assert len(mixed["runs"]) == 14 and len(mixed["provenance"]) == 14

    assert mixed["joins"][-1]["allow_mixed"] is True


@pytest.mark.parametrize("extra", [["--rows", "vit-50"], ["--seeds", "0"], ["--epochs", "1"],
                                   ["--save-dir", "weights"], ["--batch-size", "64"], ["--tiny"],
                                   ["--teacher-dir", "weights"], ["--standin"]])  # fmt: skip
def test_merge_refuses_the_options_of_a_training_command(tmp_path, capsys, monkeypatch, extra):
    """A merge keeps every run of its files: a --rows, --seeds or --epochs would be ignored."""
    script = load_script()
    monkeypatch.chdir(tmp_path)
    parts = halves(tmp_path)
    text = refusal(script, ["--merge", *map(str, parts), "--out", "m.json", *extra], capsys)
    assert f"--merge joins result files and trains nothing, so {extra[0]} would be ignored" in (
        " ".join(text.split())), text
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "weights").exists()


@pytest.mark.parametrize("flag", ["--out", "--save-dir", "--teacher-dir"])
def test_plan_only_refuses_an_output_it_would_not_write(tmp_path, capsys, monkeypatch, flag):
    script = load_script()
    monkeypatch.chdir(tmp_path)
    text = refusal(script, ["--plan-only", flag, "plan.json"], capsys)
    assert f"--plan-only prints the plan and writes nothing, so {flag} would be ignored" in (
        " ".join(text.split())), text
    assert not (tmp_path / "plan.json").exists()


FAKE_WORKER = """
import datetime, time, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
time.sleep(600)  # joins, then never answers: a stopped worker
"""


def test_a_stopped_worker_ends_the_others_with_a_message(tmp_path):
    port = str(29500 + os.getpid() % 1000)
    env = {**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2"}
    worker = subprocess.Popen([sys.executable, "-c", FAKE_WORKER], env={
        **env, "RANK": "1", "LOCAL_RANK": "1"})  # fmt: skip
    try:
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *SMOKE, "--out", str(tmp_path / "r.json"),
             "--dist-timeout", "5"],
            env={**env, "RANK": "0", "LOCAL_RANK": "0"}, capture_output=True, text=True,
            timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    finally:
        worker.kill()
        worker.wait()
    assert result.returncode == 1, result.stderr[-3000:]
    assert "process 0 of 2 stopped" in result.stderr
    assert "It waited for the other workers (at a step's gradient average" in result.stderr
    assert "did not answer within --dist-timeout=5 s" in result.stderr
    assert time.monotonic() - start < TIMEOUT_S
    assert not (tmp_path / "r.json").exists()  # no run finished, nothing written


def test_every_row_of_the_next_ladder_trains_on_the_standin(tmp_path):
    """The smoke run of the next ladder: each ViT row one epoch on the stand-in (ResNet-18, slow
    on a CPU, shares their augmentation and is built by the same code)."""
    from vitbook.studies.ladder import ROWS

    rows = [name for name, row in ROWS.items() if row["model"] == "vit"]
    result = script_run(["--standin", "--tiny", "--epochs", "1", "--seeds", "0", "--batch-size",
                         "60", "--rows", *rows, "--out", "next.json"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads((tmp_path / "next.json").read_text())["runs"]
    assert [run["row"] for run in runs] == rows
    for run in runs:
        expected = {k: v for k, v in ROWS[run["row"]].items() if k != "epochs"}
        assert run["recipe"] == {**expected, "batch_size": 60}
        assert len(run["train_loss"]) == 1 and 0 <= run["test_accuracy"] <= 1
    assert [run["row"] for run in runs if "inside" in run] == ["vit-200"]  # the best row


def test_each_row_gets_its_augmentation_and_fit_arguments(monkeypatch):
    script = load_script()
    from vitbook.studies.ladder import ROWS

    made = []
    for name in ("rand_augment", "random_erasing", "random_crop_flip"):
        real = getattr(ladder.augment, name)
        monkeypatch.setattr(ladder.augment, name, lambda *a, _real=real, _name=name, **k: (
            made.append((_name, a, k)) or _real(*a, **k)))  # fmt: skip
    ladder.augmentation(ROWS["vit-200"])
    assert made == [("random_crop_flip", (), {"padding": 4}),
                    ("rand_augment", (), {"num_ops": 2, "magnitude": 9, "scale": "timm",
                                          "magnitude_std": 0.5}),
                    ("random_erasing", (), {"p": 0.25})]  # fmt: skip
    made.clear()
    ladder.augmentation(ladder.RECORDED_ROWS["vit-randaugment"])  # torchvision's bin 9 of 31
    assert made == [("random_crop_flip", (), {"padding": 4}), ("rand_augment", (2, 9), {})]
    seen = {}

    def fake_fit(model, data, recipe, **kwargs):
        seen.update(kwargs, recipe=recipe)
        raise RuntimeError("stop after the call")

    monkeypatch.setattr(script.runs, "fit", fake_fit)
    args = script.parse(["--standin", "--tiny", "--rows", "vit-200"])[0]
    splits = script.runs.cifar10_standin(n_train=30, n_val=30, n_test=30)
    with pytest.raises(RuntimeError, match="stop after the call"):
        script.runs.run("vit-200", 0, splits, args, script.torch.device("cpu"), 0)
    recipe = seen["recipe"]
    assert recipe.weight_decay_rule == "timm" and recipe.repeated_augmentation == 3
    assert recipe.label_smoothing == 0.0 and seen["mix"] is not None  # smoothing in the mix
    assert recipe.epochs == 200 and recipe.batch_size == 256 and recipe.warmup_epochs == 3
    assert recipe.seed == 0
    seen.clear()
    with pytest.raises(RuntimeError):
        script.runs.run("vit-crop-flip", 0, splits, args, script.torch.device("cpu"), 0)
    recipe = seen["recipe"]  # the recorded rows name no rule: they train with fit's default
    assert "weight_decay_rule" not in script.recipe("vit-crop-flip", None)
    assert recipe.weight_decay_rule == "all"
    assert recipe.label_smoothing == 0.1  # as recorded


# --- the rows of "Can a ViT beat the CNN that taught it?" ------------------------------------


class SmallTeacher(__import__("torch").nn.Module):
    """Stands in for ResNet-18 in the in-process runs: the same interface, a tiny cost."""

    def __init__(self, num_classes: int = 10) -> None:
        import torch

        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 4, stride=4)
        self.head = torch.nn.Linear(4, num_classes)

    def forward(self, images):
        return self.head(self.conv(images).mean(dim=(2, 3)))


def test_the_stem_row_trains_one_block_fewer_on_the_stand_in(tmp_path):
    out = tmp_path / "stem.json"
    result = script_run(["--standin", "--tiny", "--epochs", "1", "--rows", "vit-200-conv-stem",
                         "--seeds", "0", "--batch-size", "60", "--out", str(out)])  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = json.loads(out.read_text())["runs"]
    assert record["recipe"]["stem"] == "conv" and record["recipe"]["blocks_removed"] == 1
    model = ladder.build(ladder.ALL_ROWS["vit-200-conv-stem"], 3, tiny=True)
    assert model[1].config.depth == ladder.TINY_VIT.depth - 1 and model[1].config.stem == "conv"
    assert record["parameters"] == sum(p.numel() for p in model.parameters())


def test_the_distilled_row_learns_from_its_teacher_trained_first_or_saved(tmp_path, capsys,
                                                                         monkeypatch):
    script = load_script()
    monkeypatch.setattr(ladder, "CifarResNet18", SmallTeacher)
    seen = []
    real_loss = ladder.DistillationLoss

    def recording_loss(teacher, *args, **kwargs):
        seen.append(teacher)
        return real_loss(teacher, *args, **kwargs)

    monkeypatch.setattr(ladder, "DistillationLoss", recording_loss)
    weights, first = tmp_path / "weights", tmp_path / "first.json"
    smoke = ["--standin", "--tiny", "--epochs", "1", "--seeds", "0", "--batch-size", "60"]
    # The student's row is named first; the teacher's row still trains first.
    assert script.main([*smoke, "--rows", "vit-200-deit-hard", "resnet18-200", "--save-dir",
                        str(weights), "--out", str(first)]) == 0  # fmt: skip
    runs = json.loads(first.read_text())["runs"]
    assert [run["row"] for run in runs] == ["resnet18-200", "vit-200-deit-hard"]
    assert runs[1]["recipe"]["teacher"] == "resnet18-200" and runs[1]["recipe"]["distilled"]
    assert isinstance(seen[0][1], SmallTeacher) and not seen[0].training
    assert (weights / "resnet18-200-seed0.safetensors").is_file()
    # Later, on its own: the teacher comes from --teacher-dir, with the trained weights.
    second = tmp_path / "second.json"
    assert script.main([*smoke, "--rows", "vit-200-deit-hard", "--teacher-dir", str(weights),
                        "--out", str(second)]) == 0  # fmt: skip
    import torch

    for a, b in zip(seen[0].state_dict().values(), seen[1].state_dict().values(), strict=True):
        assert torch.equal(a.cpu(), b.cpu())
    # Neither trained here nor saved: refused before anything trains.
    text = refusal(script, [*smoke, "--rows", "vit-200-deit-hard", "--teacher-dir",
                            str(tmp_path / "empty"), "--out", str(tmp_path / "no.json")], capsys)
    assert "learns from resnet18-200, which is neither in --rows" in text
    assert not (tmp_path / "no.json").exists()


# --- a damaged or wrong teacher file; the torchrun wait ---------------------------------------


def teacher_args(script, folder):
    args = script.parse(["--standin", "--tiny", "--rows", "vit-200-deit-hard", "--seeds", "0",
                         "--teacher-dir", str(folder)])[0]  # fmt: skip
    return args


def test_a_damaged_or_wrong_teacher_file_is_named_with_the_fix(tmp_path, capsys):
    import torch
    from safetensors.torch import save_file

    script = load_script()
    path = tmp_path / "resnet18-200-seed0.safetensors"
    teacher = ladder.build(ladder.ALL_ROWS["resnet18-200"], 3, tiny=True)[1]
    good = {k: v.contiguous() for k, v in teacher.state_dict().items()}
    save_file(good, str(path), metadata={"row": "resnet18-200", "seed": "0"})
    args = teacher_args(script, tmp_path)
    loaded = script.runs.load_teacher(args, "vit-200-deit-hard", 0, 3, torch.device("cpu"))
    assert torch.equal(loaded[1].state_dict()["head.weight"], good["head.weight"])
    whole = path.read_bytes()
    vit = ladder.build(ladder.ALL_ROWS["vit-200"], 3, tiny=True)[1]
    wrong_vit = {k: v.contiguous() for k, v in vit.state_dict().items()}
    ten_classes = ladder.build(ladder.ALL_ROWS["resnet18-200"], 10, tiny=True)[1]
    nan = {**good, "head.bias": torch.full_like(good["head.bias"], float("nan"))}
    fix = r"Train the teacher again \(--rows resnet18-200 --seeds 0 --save-dir DIR\)"
    for label, write, message in [
        ("cut short", lambda: path.write_bytes(whole[: len(whole) // 3]),
         r"teacher file .*resnet18-200-seed0\.safetensors for vit-200-deit-hard seed 0 cannot "
         r"be read \(.*\): it is damaged, cut short or not safetensors"),
        ("not safetensors", lambda: path.write_bytes(b"\x00" * 64),
         r"cannot be read \(.*\): it is damaged, cut short or not safetensors"),
        ("another model", lambda: save_file(wrong_vit, str(path)),
         r"resnet18-200-seed0\.safetensors does not hold a resnet18-200 of 3 classes: \d+ of "
         r"\d+ tensors missing \(stem\.0\.weight, .* and \d+ more\); \d+ tensors too many "
         r"\(.* and \d+ more\)"),
        ("another number of classes", lambda: save_file(
            {k: v.contiguous() for k, v in ten_classes.state_dict().items()}, str(path)),
         r"other shapes: head\.weight \(10, 512\) \(needs \(3, 512\)\), head\.bias"),
        ("another seed", lambda: save_file(good, str(path), metadata={
            "row": "resnet18-200", "seed": "1"}),
         r"resnet18-200-seed0\.safetensors holds resnet18-200 seed 1, not resnet18-200 seed 0"),
        ("NaN weights", lambda: save_file(nan, str(path)),
         r"seed 0 holds NaN or inf in \[.head\.bias.\]; it should hold"),
    ]:  # fmt: skip
        write()
        with pytest.raises(ValueError, match=message) as caught:
            script.runs.load_teacher(args, "vit-200-deit-hard", 0, 3, torch.device("cpu"))
        text = str(caught.value)
        assert type(caught.value) is ValueError and re.search(fix, text), (label, text)
        assert len(text) < 900, (label, len(text))  # never a dump of every key
        # the command refuses it before anything trains, and writes nothing
        out = tmp_path / f"{label}.json"
        text = refusal(script, ["--standin", "--tiny", "--rows", "vit-200-deit-hard", "--seeds",
                                "0", "--epochs", "1", "--teacher-dir", str(tmp_path), "--out",
                                str(out)], capsys)  # fmt: skip
        assert "nothing trained: teacher file" in text and not out.exists(), (label, text)


def test_the_torchrun_wait_is_bounded_and_says_what_it_waits_for(monkeypatch, capsys):
    import datetime

    script = load_script()
    args, parser = script.parse(["--standin"])
    assert args.dist_timeout == script.DIST_TIMEOUT_S == 300  # five minutes, not half an hour
    assert "to start and at each step's gradient average" in " ".join(parser.format_help().split())
    seen = {}

    def init_process_group(backend, timeout):
        seen.update(backend=backend, timeout=timeout)

    monkeypatch.setattr(script.torch.distributed, "init_process_group", init_process_group)
    monkeypatch.setattr(script.torch.distributed, "get_rank", lambda: 0)
    monkeypatch.setattr(script.torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert script.world(args.dist_timeout) == (0, 0, 2)
    assert seen == {"backend": "gloo", "timeout": datetime.timedelta(seconds=300)}
    assert ("each of 2 workers waits at most 300 s for the others, to start and at every "
            "step's gradient average") in capsys.readouterr().out  # fmt: skip


def test_an_out_file_it_could_not_write_back_is_refused_before_training(tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """A results file with a NaN literal (an older write_json wrote them): once the run had
    trained, the file could not be written again and the run was saved nowhere."""
    script = load_script()
    trained = []

    def fake_run(name, seed, splits, args, device, rank):
        trained.append((name, seed))
        return {"row": name, "seed": seed, "epochs": 1, "recipe": ladder.recipe(name, 60),
                "final_val_accuracy": 0.5, "test_accuracy": 0.5,
                "wall_clock_minutes": 0.1}, None  # fmt: skip

    monkeypatch.setattr(script.runs, "run", fake_run)
    out = tmp_path / "old.json"
    earlier = {"row": "vit-crop-flip", "seed": 1, "epochs": 1,
               "recipe": ladder.recipe("vit-crop-flip", 60), "train_loss": [float("nan")]}
    out.write_text(json.dumps({"runs": [earlier], "provenance": [{"device": "CPU"}]}))
    kept = out.read_bytes()
    assert b"NaN" in kept
    text = refusal(script, [*TINY, "--epochs", "1", "--seeds", "0", "--allow-mixed", "--out",
                            str(out)], capsys)  # fmt: skip
    assert "old.json holds nan at runs[0].train_loss[0]: JSON has no NaN" in text, text
    assert "Nothing trained. Write null there" in text and "or choose another --out" in text
    assert trained == [] and out.read_bytes() == kept


def test_the_controls_of_the_distilled_row_train_what_they_name(tmp_path, monkeypatch):
    """vit-200-token trains the distillation token with no teacher (both heads on the labels);
    vit-200-mean has no class token and a mean-pooled readout."""
    script = load_script()
    mean = ladder.build(ladder.ALL_ROWS["vit-200-mean"], 3, tiny=True)[1].config
    assert (mean.class_token, mean.pool, mean.num_prefix_tokens) == (False, "mean", 0)
    token = ladder.build(ladder.ALL_ROWS["vit-200-token"], 3, tiny=True)[1].config
    assert token.distilled and token.class_token
    seen = []
    real_loss = ladder.DistillationLoss

    def recording_loss(teacher, kind, **kwargs):
        seen.append((teacher, kind))
        return real_loss(teacher, kind, **kwargs)

    monkeypatch.setattr(ladder, "DistillationLoss", recording_loss)
    out = tmp_path / "controls.json"
    assert script.main(["--standin", "--tiny", "--epochs", "1", "--seeds", "0", "--batch-size",
                        "60", "--rows", "vit-200-token", "vit-200-mean", "--out",
                        str(out)]) == 0  # fmt: skip
    assert seen == [(None, "none")]  # the token's row only, with no teacher
    runs = {run["row"]: run for run in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"vit-200-token", "vit-200-mean"}
    assert runs["vit-200-mean"]["recipe"]["pool"] == "mean"
