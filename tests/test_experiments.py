"""vitbook.studies.experiments: the shipped results file, its spread over seeds, and a re-run
slice."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from machines import made_here

from vitbook.studies.experiments import (
    BASE_VIT,
    CNN_CHANNELS,
    EXPERIMENTS,
    RECIPE,
    RESULTS_PATH,
    build_model,
    load_results,
    recorded_recipe,
    reproduce,
    summary,
    training_subset,
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_experiments.py"
PROVENANCE_FIELDS = {
    "command", "date", "seeds", "python", "torch", "numpy", "cpu", "torch_threads",
    "deterministic_algorithms", "wall_seconds", "git_commit", "load_average_start_end",
}  # fmt: skip
ACCURACIES = ("validation_accuracy", "moved_validation_accuracy", "test_accuracy")

# The slices re-run here take a few seconds each: 10 % of the training split, 100 epochs.
SLICES = [("data_size", "CNN 10%", 0), ("data_size", "ViT 10%", 0)]


@pytest.fixture(scope="module")
def results():
    return load_results()


def test_file_is_small_json_with_every_experiment_setting_and_seed(results):
    assert RESULTS_PATH.stat().st_size < 100_000
    assert json.loads(RESULTS_PATH.read_text(encoding="utf-8")) == results
    assert set(results["experiments"]) == set(EXPERIMENTS)
    assert results["recipe"] == recorded_recipe() and results["base_vit"] == BASE_VIT
    assert tuple(results["cnn_channels"]) == CNN_CHANNELS
    for name, experiment in results["experiments"].items():
        assert experiment["settings"] == EXPERIMENTS[name]["settings"], name
        assert list(experiment["runs"]) == list(EXPERIMENTS[name]["settings"]), name
        seeds = experiment["seeds"]
        assert len(seeds) >= 3 and len(set(seeds)) == len(seeds), name
        for label, runs in experiment["runs"].items():
            assert [run["seed"] for run in runs] == seeds, (name, label)
            for run in runs:
                assert all(0.0 <= run[metric] <= 1.0 for metric in ACCURACIES)
                assert run["train_loss"] > 0
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
    assert sizes["ViT 100%"] == sizes["CNN 100%"] == 1077  # the training part, no validation
    assert sizes["ViT 10%"] == sizes["CNN 10%"] == 109  # round(0.1 * count) for each digit
    assert sizes["ViT 25%"] < sizes["ViT 50%"] < sizes["ViT 100%"]
    for name in ("positions", "patch_size", "augmentation"):
        assert {run["train_images"] for runs in experiments[name]["runs"].values()
                for run in runs} == {1077}, name  # fmt: skip

    # The base ViT on the whole training part is one setting in all four experiments, and the
    # CNN with shifts in two: the same numbers.
    def measured(runs):
        return {run["seed"]: tuple(run[m] for m in (*ACCURACIES, "train_loss")) for run in runs}

    for reference, others in (
        (("positions", "sincos2d, mean"),
         [("patch_size", "P=2"), ("data_size", "ViT 100%"), ("augmentation", "ViT, shifts")]),
        (("data_size", "CNN 100%"), [("augmentation", "CNN, shifts")]),
    ):  # fmt: skip
        base = measured(experiments[reference[0]]["runs"][reference[1]])
        for name, label in others:
            other = measured(experiments[name]["runs"][label])
            common = base.keys() & other.keys()
            assert len(common) >= 3
            assert {seed: other[seed] for seed in common} == {s: base[s] for s in common}
    # Without the shifts the runs differ, so they were trained, not copied.
    shifted = measured(experiments["augmentation"]["runs"]["ViT, shifts"])
    plain = measured(experiments["augmentation"]["runs"]["ViT, no shifts"])
    assert all(shifted[seed] != plain[seed] for seed in shifted)


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

    return load_digits_split(validation=True)[1]  # the training part the runs train on


@pytest.mark.parametrize("metric", [None, *ACCURACIES, "train_loss", "seconds"])
def test_summary_is_the_spread_of_the_runs(results, metric):
    read = metric or "validation_accuracy"  # the default: what settings are compared by
    for name, experiment in results["experiments"].items():
        table = summary(results, name) if metric is None else summary(results, name, metric)
        assert list(table) == list(experiment["runs"])
        for label, runs in experiment["runs"].items():
            values = [run[read] for run in runs]
            row = table[label]
            assert row["n"] == len(values) >= 3
            assert math.isclose(row["mean"], sum(values) / len(values), rel_tol=1e-12)
            deviations = sum((v - row["mean"]) ** 2 for v in values) / (len(values) - 1)
            assert math.isclose(row["std"], math.sqrt(deviations), rel_tol=1e-9, abs_tol=1e-12)
            assert (row["min"], row["max"]) == (min(values), max(values))
    with pytest.raises(ValueError, match="unknown experiment 'table8'"):
        summary(results, "table8")


def same_machine(results) -> bool:
    """Whether the file was written here (tests/machines.py, made_here)."""
    return made_here(provenances(results["experiments"]["data_size"]["provenance"]))


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
        for metric in (*ACCURACIES, "train_loss"):
            assert rerun[metric] == stored[metric], metric
    else:
        for metric in ACCURACIES:
            spread = summary(results, experiment, metric)[label]["std"]
            assert abs(rerun[metric] - stored[metric]) <= max(0.02, 3 * spread), metric


def test_a_run_trains_on_the_training_part_and_measures_the_held_out_parts(monkeypatch):
    """What run_one hands to fit and to evaluate, recorded instead of a 100-epoch training."""
    from vitbook.data import load_digits_split
    from vitbook.studies import experiments
    from vitbook.train import History

    calls = {"fit": [], "evaluate": []}

    def fake_fit(model, train_data, recipe, **kwargs):
        calls["fit"].append((train_data, recipe, kwargs))
        return History([1.5], [0.5], [], [0.1])

    def fake_evaluate(model, data):
        calls["evaluate"].append(data)
        return len(calls["evaluate"]) / 10  # 0.1, 0.2, 0.3: tells the three apart

    monkeypatch.setattr(experiments, "fit", fake_fit)
    monkeypatch.setattr(experiments, "evaluate", fake_evaluate)
    x_train, y_train, x_val, y_val, x_test, y_test = load_digits_split(validation=True)
    settings = EXPERIMENTS["augmentation"]["settings"]
    shifted = experiments.run_one(settings["CNN, shifts"], seed=0)
    (images, labels), recipe, kwargs = calls["fit"][0]
    assert torch.equal(images, x_train) and torch.equal(labels, y_train)
    assert callable(kwargs["augment"]) and recipe.epochs == RECIPE.epochs == 100
    assert {k: getattr(recipe, k) for k in ("lr", "batch_size", "warmup_epochs",
                                              "label_smoothing", "seed")} == {
        "lr": 5e-3, "batch_size": 64, "warmup_epochs": 5, "label_smoothing": 0.1, "seed": 0,
    }  # fmt: skip
    validation, moved, test = calls["evaluate"]
    assert torch.equal(validation[0], x_val) and torch.equal(validation[1], y_val)
    assert torch.equal(moved[1], y_val) and torch.equal(moved[0][..., 1:], x_val[..., :-1])
    assert moved[0][..., 0].abs().sum() == 0  # zeros entered on the left
    assert torch.equal(test[0], x_test) and torch.equal(test[1], y_test)
    assert (shifted["validation_accuracy"], shifted["moved_validation_accuracy"],
            shifted["test_accuracy"]) == (0.1, 0.2, 0.3)  # fmt: skip
    experiments.run_one(settings["CNN, no shifts"], seed=0)
    assert calls["fit"][1][2]["augment"] is None
    experiments.run_one(EXPERIMENTS["data_size"]["settings"]["ViT 10%"], seed=0)
    (images, labels), _, _ = calls["fit"][2]
    keep = training_subset(y_train, 0.1)
    assert torch.equal(images, x_train[keep]) and torch.equal(labels, y_train[keep])


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
    tampered["experiments"]["data_size"]["runs"]["CNN 10%"][0]["validation_accuracy"] += 1 / 270
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


def test_figures_draw_the_validation_accuracy_of_every_seed(results):
    from vitbook import plotting

    def drawn(ax, axis):
        return [list(getattr(line, f"get_{axis}data")()) for line in ax.lines]

    experiments = results["experiments"]
    ax = plotting.plot_position_experiment(results).axes[0]
    for label, runs in experiments["positions"]["runs"].items():
        assert [run["validation_accuracy"] for run in runs] in drawn(ax, "x"), label
    assert ax.get_xlabel() == "validation accuracy on the digits"
    ax = plotting.plot_patch_size_experiment(results).axes[0]
    for label, runs in experiments["patch_size"]["runs"].items():
        assert [run["validation_accuracy"] for run in runs] in drawn(ax, "y"), label
    ax = plotting.plot_data_hunger(results).axes[0]
    for label, runs in experiments["data_size"]["runs"].items():
        assert [run["validation_accuracy"] for run in runs] in drawn(ax, "y"), label
    assert ax.get_ylabel() == "validation accuracy"
