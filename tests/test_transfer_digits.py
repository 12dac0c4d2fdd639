"""vitbook.studies.transfer_digits: the recorded miniature, its protocol, and a re-run slice."""

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
from machines import made_here

from vitbook.pretrained.checkpoints import read_metadata
from vitbook.studies.experiments import RECORDED_FIELDS
from vitbook.studies.transfer_digits import (
    HIGH_RES,
    HIGH_RES_SETTINGS,
    LONG_STEPS,
    LR_GRID,
    METHODS,
    MODEL,
    PRETRAIN_RECIPE,
    PRETRAINED_PATH,
    RESULTS_PATH,
    SETTINGS,
    SHOTS,
    STEPS,
    VAL_PER_CLASS,
    build,
    labelled_subset,
    load_pretrained_digits,
    load_results,
    load_transfer_data,
    reproduce,
    summary,
)
from vitbook.train import evaluate

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_transfer.py"
PROVENANCE_FIELDS = {
    "command", "date", "seeds", "python", "torch", "numpy", "cpu", "torch_threads",
    "deterministic_algorithms", "wall_seconds", "git_commit", "load_average_start_end",
}  # fmt: skip
# Runs re-trained here: one label per class, 300 steps of 5 digits, a few seconds each.
SLICES = [("scratch", "1", 0), ("linear probe", "1", 0), ("fine-tune", "1", 0)]


@pytest.fixture(scope="module")
def results():
    return load_results()


def provenances(entry) -> list[dict]:
    return entry if isinstance(entry, list) else [entry]


def test_file_holds_every_setting_with_the_modules_constants(results):
    assert RESULTS_PATH.stat().st_size < 200_000
    assert results["model"] == MODEL
    assert results["pretrain_recipe"] == PRETRAIN_RECIPE.to_dict(keys=RECORDED_FIELDS)
    assert results["methods"] == METHODS
    assert results["lr_grid"] == {name: list(grid) for name, grid in LR_GRID.items()}
    assert results["shots"] == list(SHOTS) and results["steps"] == STEPS
    assert results["long_steps"] == LONG_STEPS and results["high_res"] == HIGH_RES
    assert results["val_per_class"] == VAL_PER_CLASS
    assert list(results["settings"]) == list(SETTINGS)
    seeds = [entry["seed"] for entry in results["pretraining"]]
    assert len(seeds) >= 3 and len(set(seeds)) == len(seeds)
    for setting, by_shots in results["settings"].items():
        assert list(by_shots) == list(SETTINGS[setting]), setting
        for shots, entry in by_shots.items():
            assert [run["seed"] for run in entry["runs"]] == seeds, (setting, shots)
            for run in entry["runs"]:
                assert run["lr"] == entry["lr"]
                assert 0.0 <= run["test_accuracy"] <= 1.0 and 0.0 <= run["val_accuracy"] <= 1.0
                expected = LONG_STEPS if setting.endswith(f", {LONG_STEPS} steps") else STEPS
                assert expected <= run["steps"] < expected + 10


def test_learning_rates_were_chosen_on_validation_and_test_read_for_the_chosen_only(results):
    for setting, by_shots in results["sweep"].items():
        grid = LR_GRID[setting.split(",")[0]]
        for shots, sweep in by_shots.items():
            assert all("test_accuracy" not in run for run in sweep), "the sweep read the test"
            seeds = sorted({run["seed"] for run in sweep})
            assert sorted((run["lr"], run["seed"]) for run in sweep) == [
                (lr, seed) for lr in sorted(grid) for seed in seeds
            ]
            values = {lr: [r["val_accuracy"] for r in sweep if r["lr"] == lr] for lr in grid}
            means = {lr: statistics.fmean(v) for lr, v in values.items() if None not in v}
            best = max(means.values())
            chosen = results["settings"][setting][shots]["lr"]
            assert chosen == next(lr for lr in means if means[lr] == best), (setting, shots)
            # inside the grid, or at its top where the next value up diverged
            inside = grid[0] < chosen < grid[-1] or (chosen == grid[-1] and len(means) < len(grid))
            assert inside, f"{setting}, {shots}: lr {chosen} at the edge of {grid}"
            recorded = results["settings"][setting][shots]["runs"]
            for run in recorded:
                swept = next(r for r in sweep if r["lr"] == chosen and r["seed"] == run["seed"])
                assert {k: v for k, v in run.items() if k != "test_accuracy"} == swept
    assert set(results["sweep"]) == set(SETTINGS) - set(HIGH_RES_SETTINGS)
    for setting in HIGH_RES_SETTINGS:  # no sweep: fine-tuning's choice at 8 px
        for shots, entry in results["settings"][setting].items():
            assert entry["lr"] == results["settings"]["fine-tune"][shots]["lr"]


def test_runs_trained_on_the_stated_number_of_labels(results):
    pool = load_transfer_data().pool[1]
    counts = {"1": 5, "5": 25, "20": 100, "all": len(pool)}
    for by_shots in results["settings"].values():
        for shots, entry in by_shots.items():
            assert {run["train_images"] for run in entry["runs"]} == {counts[shots]}


def test_provenance_names_the_command_versions_seeds_and_machine(results):
    parts = provenances(results["provenance"])
    run_settings = [s for part in parts for s in part["settings_run"]]
    replaced = [entry["setting"] for entry in results.get("replaced", [])]
    assert sorted(run_settings) == sorted([*SETTINGS, *replaced])  # every run is accounted for
    commands = [part["command"] for part in parts]
    for entry in results.get("replaced", []):
        assert entry["by"] in commands and entry["replaces"] in commands
    for provenance in parts:
        assert PROVENANCE_FIELDS <= set(provenance)
        assert provenance["command"].startswith("python scripts/run_transfer.py")
        assert provenance["torch_threads"] == 1 and provenance["deterministic_algorithms"]
        assert provenance["seeds"] == [entry["seed"] for entry in results["pretraining"]]


def test_shipped_pretrained_model_is_seed_0s(results):
    assert PRETRAINED_PATH.stat().st_size < 200_000
    metadata = read_metadata(PRETRAINED_PATH)
    first = results["pretraining"][0]
    assert first["seed"] == 0 and metadata["seed"] == "0"
    assert float(metadata["source_test_accuracy"]) == first["source_test_accuracy"]
    assert json.loads(metadata["recipe"]) == PRETRAIN_RECIPE.to_dict(keys=RECORDED_FIELDS)
    model = load_pretrained_digits()
    assert model.config.num_classes == 5 and not model.training
    accuracy = evaluate(model, load_transfer_data().source_test)
    assert abs(accuracy - first["source_test_accuracy"]) <= 2 / 226  # a digit or two elsewhere


def test_split_keeps_tasks_and_parts_apart():
    data = load_transfer_data()
    for part in (data.source, data.source_test):
        assert part[1].unique().tolist() == [0, 1, 2, 3, 4] and part[0].shape[1:] == (1, 8, 8)
    for part in (data.pool, data.val, data.test):
        assert part[1].unique().tolist() == [0, 1, 2, 3, 4]  # the digits 5 to 9, relabelled
    assert data.val[1].bincount().tolist() == [VAL_PER_CLASS] * 5
    assert len(data.pool[1]) + len(data.val[1]) + len(data.source[1]) == 1347
    assert len(data.test[1]) + len(data.source_test[1]) == 450

    def rows(images):
        return {tuple(image.flatten().tolist()) for image in images}

    assert not rows(data.val[0]) & rows(data.pool[0]), "a validation digit is in the pool"
    from vitbook.data import load_digits_split

    x_train, y_train, x_test, y_test = load_digits_split()
    target = rows(x_train[y_train >= 5])  # pool and validation: training digits 5 to 9 only
    assert rows(data.val[0]) <= target and rows(data.pool[0]) <= target
    assert rows(data.test[0]) == rows(x_test[y_test >= 5])
    assert rows(data.source[0]) == rows(x_train[y_train < 5])


def test_labelled_subsets_are_nested_stratified_and_seeded():
    labels = load_transfer_data().pool[1]
    one, five = labelled_subset(labels, "1", 3), labelled_subset(labels, "5", 3)
    assert labels[one].bincount().tolist() == [1] * 5
    assert labels[five].bincount().tolist() == [5] * 5
    assert set(one.tolist()) < set(five.tolist())
    assert torch.equal(labelled_subset(labels, "5", 3), five)
    assert not torch.equal(labelled_subset(labels, "5", 4), five)
    assert len(labelled_subset(labels, "all", 0)) == len(labels)
    with pytest.raises(ValueError, match="shots=3 must be 'all' or a positive number as a str"):
        labelled_subset(labels, 3, 0)


def test_build_starts_each_setting_where_it_should():
    pretrained = load_pretrained_digits()
    scratch = build("scratch", None)
    assert scratch.config.num_classes == 5 and scratch.head.weight.abs().sum() > 0
    probe = build("linear probe", pretrained)
    assert [n for n, p in probe.named_parameters() if p.requires_grad] == ["head.weight",
                                                                            "head.bias"]
    tuned = build("fine-tune", pretrained)
    assert not tuned.head.weight.any() and all(p.requires_grad for p in tuned.parameters())
    assert torch.equal(tuned.blocks[1].mlp.fc2.weight, pretrained.blocks[1].mlp.fc2.weight)
    high = build("fine-tune 12 px", pretrained)
    fresh = build("fine-tune 12 px, new positions", pretrained)
    assert high.model.config.img_size == (HIGH_RES, HIGH_RES)
    assert high.model.pos_embed.shape[1] == 37
    assert not torch.equal(high.model.pos_embed, fresh.model.pos_embed)
    assert pretrained.config.num_classes == 5 and pretrained.head.weight.any()  # not changed
    with pytest.raises(ValueError, match="starts from a pre-trained model"):
        build("fine-tune", None)
    with pytest.raises(ValueError, match="unknown setting 'fine-tune 16 px'"):
        build("fine-tune 16 px", pretrained)


@pytest.mark.parametrize("metric", ["test_accuracy", "val_accuracy"])
def test_summary_is_the_spread_of_the_runs(results, metric):
    table = summary(results, metric)
    for setting, by_shots in results["settings"].items():
        for shots, entry in by_shots.items():
            values = [run[metric] for run in entry["runs"]]
            row = table[setting][shots]
            assert row["n"] == len(values) and row["lr"] == entry["lr"]
            assert math.isclose(row["mean"], sum(values) / len(values), rel_tol=1e-12)
            assert math.isclose(row["std"], statistics.stdev(values), rel_tol=1e-9,
                                abs_tol=1e-12)  # fmt: skip
            assert (row["min"], row["max"]) == (min(values), max(values))


def same_machine(results) -> bool:
    """Whether the file was written here (tests/machines.py, made_here)."""
    return made_here(provenances(results["provenance"]))


@pytest.mark.parametrize(("setting", "shots", "seed"), SLICES)
def test_a_slice_of_the_script_reproduces_the_file(results, setting, shots, seed):
    """Seeded, one thread, deterministic algorithms: exact on the machine that wrote the file;
    elsewhere other float kernels round differently and training carries a last-bit difference
    as far as another seed would, so there the re-run lies within max(0.05, 3 std) of the file."""
    stored, rerun = reproduce(results, setting, shots, seed)
    assert rerun["train_images"] == stored["train_images"] and rerun["steps"] == stored["steps"]
    if same_machine(results):
        for metric in ("val_accuracy", "train_loss", "test_accuracy"):
            assert rerun[metric] == stored[metric], metric
    else:
        spread = summary(results)[setting][shots]["std"]
        assert abs(rerun["test_accuracy"] - stored["test_accuracy"]) <= max(0.05, 3 * spread)


def test_reproduce_names_what_is_missing(results):
    with pytest.raises(ValueError, match=r"setting='fine-tune', shots='3', seed=0"):
        reproduce(results, "fine-tune", "3", 0)


def load_script():
    spec = importlib.util.spec_from_file_location("run_transfer", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_script_merge_joins_settings_and_refuses_repeats(results, tmp_path):
    script = load_script()
    names = list(results["settings"])
    parts = []
    for half, chosen in enumerate((names[:3], names[3:])):
        part = json.loads(json.dumps(results))
        part["settings"] = {k: v for k, v in part["settings"].items() if k in chosen}
        part["sweep"] = {k: v for k, v in part["sweep"].items() if k in chosen}
        part["provenance"] = [{**provenances(results["provenance"])[0], "settings_run": chosen}]
        parts.append(tmp_path / f"part{half}.json")
        parts[-1].write_text(json.dumps(part), encoding="utf-8")
    script.merge(parts[::-1], tmp_path / "merged.json")
    merged = load_results(tmp_path / "merged.json")
    assert merged["settings"] == results["settings"] and merged["sweep"] == results["sweep"]
    assert list(merged["settings"]) == names and len(merged["provenance"]) == 2
    with pytest.raises(SystemExit, match="repeats the settings"):
        script.merge([parts[0], parts[0]], tmp_path / "twice.json")
    rerun = json.loads(parts[0].read_text(encoding="utf-8"))  # the first settings run again
    rerun["provenance"][0]["command"] = "python scripts/run_transfer.py --out rerun.json"
    rerun["settings"]["scratch"]["1"]["runs"][0]["test_accuracy"] = 0.5
    (tmp_path / "rerun.json").write_text(json.dumps(rerun), encoding="utf-8")
    script.merge([*parts, tmp_path / "rerun.json"], tmp_path / "replaced.json", replace=True)
    replaced = load_results(tmp_path / "replaced.json")
    assert replaced["settings"]["scratch"]["1"]["runs"][0]["test_accuracy"] == 0.5
    assert [e["setting"] for e in replaced["replaced"]] == sorted(names[:3])
    assert {e["by"] for e in replaced["replaced"]} == {rerun["provenance"][0]["command"]}
    narrow = json.loads(json.dumps(rerun))
    narrow["lr_grid"]["scratch"] = [0.01]
    narrow["settings"] = {"scratch": narrow["settings"]["scratch"]}
    (tmp_path / "narrow.json").write_text(json.dumps(narrow), encoding="utf-8")
    with pytest.raises(SystemExit, match="another grid than the other 'scratch' settings"):
        script.merge([*parts, tmp_path / "narrow.json"], tmp_path / "bad.json", replace=True)


def test_script_check_fails_on_a_wrong_number(results, tmp_path):
    if not same_machine(results):
        pytest.skip("the script's --check is exact, which holds on the machine of the file only")
    script = load_script()
    assert script.check(["linear probe"], ["1"], [0], RESULTS_PATH) == 0
    tampered = json.loads(json.dumps(results))
    tampered["settings"]["linear probe"]["1"]["runs"][0]["test_accuracy"] += 1 / 224
    path = tmp_path / "transfer.json"
    path.write_text(json.dumps(tampered), encoding="utf-8")
    assert script.check(["linear probe"], ["1"], [0], path) == 1
