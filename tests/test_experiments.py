"""vitbook.experiments: the shipped results file, its spread over seeds, and a re-run slice."""

import importlib.util
import json
import math
import platform
from pathlib import Path

import pytest
import torch

from vitbook.experiments import (
    BASE_VIT,
    CNN_CHANNELS,
    EXPERIMENTS,
    RECIPE,
    RESULTS_PATH,
    _cpu_model_name,
    build_model,
    load_results,
    reproduce,
    summary,
    training_subset,
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_experiments.py"
PROVENANCE_FIELDS = {
    "command", "date", "seeds", "python", "torch", "numpy", "cpu", "torch_threads",
    "deterministic_algorithms", "wall_seconds", "git_commit", "load_average_start_end",
}  # fmt: skip
METRICS = ("test_accuracy", "train_loss", "seconds", "seconds_per_epoch")

# The slices re-run here take a few seconds each: 10 % of the training split, 100 epochs.
SLICES = [("data_size", "CNN 10%", 0), ("data_size", "ViT 10%", 0)]


@pytest.fixture(scope="module")
def results():
    return load_results()


def test_file_is_small_json_with_every_experiment_setting_and_seed(results):
    assert RESULTS_PATH.stat().st_size < 100_000
    assert json.loads(RESULTS_PATH.read_text(encoding="utf-8")) == results
    assert set(results["experiments"]) == set(EXPERIMENTS)
    assert results["recipe"] == RECIPE and results["base_vit"] == BASE_VIT
    assert tuple(results["cnn_channels"]) == CNN_CHANNELS
    for name, experiment in results["experiments"].items():
        assert experiment["settings"] == EXPERIMENTS[name]["settings"], name
        assert list(experiment["runs"]) == list(EXPERIMENTS[name]["settings"]), name
        seeds = experiment["seeds"]
        assert len(seeds) >= 3 and len(set(seeds)) == len(seeds), name
        for label, runs in experiment["runs"].items():
            assert [run["seed"] for run in runs] == seeds, (name, label)
            for run in runs:
                assert 0.0 <= run["test_accuracy"] <= 1.0 and run["train_loss"] > 0
                assert run["seconds"] > 0 and run["seconds_per_epoch"] > 0


def provenances(entry) -> list[dict]:
    """One provenance per command that made part of the file (several after --merge)."""
    return entry if isinstance(entry, list) else [entry]


def test_provenance_names_the_command_versions_seeds_and_machine(results):
    for provenance in provenances(results["provenance"]) + [
        part
        for experiment in results["experiments"].values()
        for part in provenances(experiment["provenance"])
    ]:
        assert PROVENANCE_FIELDS <= set(provenance)
        assert provenance["command"].startswith("python scripts/run_experiments.py")
        assert provenance["torch_threads"] == 1 and provenance["deterministic_algorithms"]
        assert provenance["torch"].split("+")[0].count(".") == 2  # e.g. 2.13.0
    for experiment in results["experiments"].values():
        parts = provenances(experiment["provenance"])
        assert sorted(seed for part in parts for seed in part["seeds"]) == experiment["seeds"]


def test_runs_describe_the_models_they_trained(results):
    experiments = results["experiments"]
    tokens = {label: runs[0]["tokens"] for label, runs in experiments["patch_size"]["runs"].items()}
    assert tokens == {"P=1": 64, "P=2": 16, "P=4": 4}  # mean pooling, no class token
    for name, experiment in experiments.items():
        for label, runs in experiment["runs"].items():
            model = build_model(EXPERIMENTS[name]["settings"][label])
            assert runs[0]["parameters"] == sum(p.numel() for p in model.parameters())
    data_runs = experiments["data_size"]["runs"]
    sizes = {label: runs[0]["train_images"] for label, runs in data_runs.items()}
    assert sizes["ViT 100%"] == sizes["CNN 100%"] == 1347
    assert sizes["ViT 10%"] == sizes["CNN 10%"] == 136  # round(0.1 * count) for each digit
    assert sizes["ViT 25%"] < sizes["ViT 50%"] < sizes["ViT 100%"]
    # The base ViT on the whole split is one setting in all three experiments: the same numbers.
    def measured(runs):
        return {run["seed"]: (run["test_accuracy"], run["train_loss"]) for run in runs}

    base = measured(experiments["positions"]["runs"]["sincos2d, mean"])
    for other in (experiments["patch_size"]["runs"]["P=2"],
                  experiments["data_size"]["runs"]["ViT 100%"]):  # fmt: skip
        common = base.keys() & measured(other).keys()
        assert len(common) >= 3
        assert {seed: measured(other)[seed] for seed in common} == {s: base[s] for s in common}


def test_training_subset_is_stratified_nested_and_fixed():
    labels = load_digits_labels()
    small, large = training_subset(labels, 0.1), training_subset(labels, 0.25)
    assert set(small.tolist()) < set(large.tolist())
    counts = labels[small].bincount(minlength=10)
    expected = torch.tensor([round(0.1 * c) for c in labels.bincount().tolist()])
    assert torch.equal(counts, expected)
    assert torch.equal(training_subset(labels, 0.1), small)
    with pytest.raises(ValueError, match=r"fraction=0 must be in \(0, 1\]"):
        training_subset(labels, 0)


def load_digits_labels():
    from vitbook.data import load_digits_split

    return load_digits_split()[1]


@pytest.mark.parametrize("metric", ["test_accuracy", "train_loss", "seconds"])
def test_summary_is_the_spread_of_the_runs(results, metric):
    for name, experiment in results["experiments"].items():
        table = summary(results, name, metric)
        assert list(table) == list(experiment["runs"])
        for label, runs in experiment["runs"].items():
            values = [run[metric] for run in runs]
            row = table[label]
            assert row["n"] == len(values) >= 3
            assert math.isclose(row["mean"], sum(values) / len(values), rel_tol=1e-12)
            deviations = sum((v - row["mean"]) ** 2 for v in values) / (len(values) - 1)
            assert math.isclose(row["std"], math.sqrt(deviations), rel_tol=1e-9, abs_tol=1e-12)
            assert (row["min"], row["max"]) == (min(values), max(values))
    with pytest.raises(ValueError, match="unknown experiment 'table8'"):
        summary(results, "table8")


def same_machine(results) -> bool:
    here = (_cpu_model_name(), torch.__version__, platform.python_version())
    parts = provenances(results["experiments"]["data_size"]["provenance"])
    return all((part["cpu"], part["torch"], part["python"]) == here for part in parts)


@pytest.mark.parametrize(("experiment", "label", "seed"), SLICES)
def test_a_slice_of_the_script_reproduces_the_file(results, experiment, label, seed):
    """Seeded, one thread, deterministic algorithms: exact on the machine that wrote the file.

    Elsewhere other float kernels (AVX2 against AVX-512, another torch) round differently, and
    100 epochs of training carry a last-bit difference as far as another seed would: there the
    re-run must lie within the seeds' spread, max(0.02, 3 std) in accuracy.
    """
    stored, rerun = reproduce(results, experiment, label, seed)
    assert rerun["parameters"] == stored["parameters"]
    assert rerun["train_images"] == stored["train_images"]
    if same_machine(results):
        assert rerun["test_accuracy"] == stored["test_accuracy"]
        assert rerun["train_loss"] == stored["train_loss"]
    else:
        spread = summary(results, experiment)[label]["std"]
        assert abs(rerun["test_accuracy"] - stored["test_accuracy"]) <= max(0.02, 3 * spread)


def load_script():
    spec = importlib.util.spec_from_file_location("run_experiments", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_script_merge_joins_seeds_and_keeps_every_provenance(results, tmp_path):
    script = load_script()
    halves = []
    for half, keep in enumerate((lambda i: i % 2 == 0, lambda i: i % 2 == 1)):
        part = json.loads(json.dumps(results))
        for experiment in part["experiments"].values():
            indices = [i for i in range(len(experiment["seeds"])) if keep(i)]
            experiment["seeds"] = [experiment["seeds"][i] for i in indices]
            experiment["runs"] = {
                label: [runs[i] for i in indices] for label, runs in experiment["runs"].items()
            }
            experiment["provenance"] = {
                **provenances(experiment["provenance"])[0], "seeds": experiment["seeds"]
            }
        halves.append(tmp_path / f"half{half}.json")
        halves[-1].write_text(json.dumps(part), encoding="utf-8")
    script.merge(halves[::-1], tmp_path / "merged.json")
    merged = load_results(tmp_path / "merged.json")
    for name, experiment in results["experiments"].items():
        assert merged["experiments"][name]["seeds"] == experiment["seeds"]
        assert merged["experiments"][name]["runs"] == experiment["runs"]
        assert len(merged["experiments"][name]["provenance"]) == 2
    with pytest.raises(SystemExit, match="seeds .* twice"):
        script.merge([halves[0], halves[0]], tmp_path / "twice.json")


def test_script_check_fails_on_a_wrong_number(results, tmp_path):
    script = load_script()
    if not same_machine(results):
        pytest.skip("the script's --check is exact, which holds on the machine of the file only")
    assert script.check(["data_size"], ["CNN 10%"], [0], RESULTS_PATH) == 0
    tampered = json.loads(json.dumps(results))
    tampered["experiments"]["data_size"]["runs"]["CNN 10%"][0]["test_accuracy"] += 1 / 450
    path = tmp_path / "experiments.json"
    path.write_text(json.dumps(tampered), encoding="utf-8")
    assert script.check(["data_size"], ["CNN 10%"], [0], path) == 1


def test_reproduce_names_what_is_missing(results):
    with pytest.raises(ValueError, match=r"no stored run for experiment='data_size', "
                                         r"setting='CNN 10%', seed=99"):  # fmt: skip
        reproduce(results, "data_size", "CNN 10%", 99)


def test_patch_size_has_a_step_time_per_setting_with_provenance(results):
    experiment = results["experiments"]["patch_size"]
    assert list(experiment["step_seconds"]) == list(EXPERIMENTS["patch_size"]["settings"])
    assert all(0 < seconds < 10 for seconds in experiment["step_seconds"].values())
    provenance = experiment["step_seconds_provenance"]
    assert PROVENANCE_FIELDS <= set(provenance)
    assert provenance["command"] == "python scripts/run_experiments.py --timing"
