"""vitbook.studies.ladder: the shipped recording and its summary, the next ladder's rows, a
read-out."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from vitbook._files import ResultsFileError
from vitbook.studies.comparison import paired_difference
from vitbook.studies.ladder import (
    BASE,
    DEIT_ROWS,
    FIRST_ROWS,
    H100_SECONDS_PER_EPOCH,
    PLAN,
    RECORDED_ROWS,
    RESULTS_PATH,
    ROWS,
    changes,
    describe,
    describe_change,
    group_provenance,
    load_progress,
    load_results,
    plan_cost,
    planned_recipe,
    projected_minutes,
    recipes,
    recording_order,
    recording_progress,
    summarize,
)

# The shared recording (H100, JPEG copy of CIFAR-10, commit f5734a8), copied byte for byte.
SHIPPED_SHA256 = "1d911bf86112bd67f41e607ffeebeafd911a0c0fa31c163669a1dfc24586ddeb"
# row: (seeds, test mean, test sd, validation mean, validation sd), as recorded (4 decimals).
RECORDED = {
    "vit-crop-flip": (3, 0.7826, 0.0024, 0.7771, 0.0027),
    "vit-randaugment": (3, 0.7839, 0.0033, 0.7791, 0.0037),
    "vit-regularised-100": (1, 0.8315, None, 0.8240, None),
    "vit-mix-200": (3, 0.8737, 0.0047, 0.8712, 0.0067),
    "resnet18": (3, 0.8929, 0.0025, 0.8961, 0.0030),
}


def runs(row, accuracies):
    return [
        {"row": row, "seed": seed, "final_val_accuracy": val, "test_accuracy": test,
         "minutes": 1.0 + seed, "epochs": 3, "recipe": {}}
        for seed, (val, test) in enumerate(accuracies)
    ]  # fmt: skip


def test_the_shipped_recording_is_the_one_the_gpu_wrote():
    assert hashlib.sha256(RESULTS_PATH.read_bytes()).hexdigest() == SHIPPED_SHA256
    results = load_results()
    table = summarize(results)
    assert list(table) == list(RECORDED)
    for row, (n, test, test_sd, val, val_sd) in RECORDED.items():
        got = table[row]
        assert got["n"] == n
        assert round(got["test_mean"], 4) == test and round(got["val_mean"], 4) == val
        if n == 1:
            assert got["test_std"] is None and got["val_std"] is None
        else:
            assert round(got["test_std"], 4) == test_sd and round(got["val_std"], 4) == val_sd
    assert describe(table["vit-regularised-100"]) == "0.8315 (one seed)"
    assert describe(table["vit-mix-200"]) == "0.8737 ± 0.0047"


def test_the_recording_names_its_gpu_data_and_the_model_looked_inside():
    results = load_results()
    (group,) = group_provenance(results)  # 13 processes, identical but for command and seeds
    assert group["entries"] == len(results["runs"]) == 13 and group["seeds"] == [0, 1, 2]
    assert group["device"] == "NVIDIA H100 80GB HBM3" and group["git_commit"][:7] == "f5734a8"
    assert group["data"]["note"] == "CIFAR-10, JPEG copy, quality 75"
    assert (group["data"]["train"], group["data"]["val"], group["data"]["test"]) == (
        45_000, 5_000, 10_000)  # fmt: skip
    inside = [(run["row"], run["seed"]) for run in results["runs"] if "inside" in run]
    assert inside == [("vit-mix-200", 0)]
    (run,) = [run for run in results["runs"] if "inside" in run]
    assert torch.tensor(run["inside"]["rollout_maps"]).shape == (8, 8, 8)
    assert torch.tensor(run["inside"]["mean_attention_distance"]).shape == (6, 8)
    for run in results["runs"]:  # the recorded recipes are the ones the script reproduces
        expected = {**BASE, **RECORDED_ROWS[run["row"]]}
        if expected.get("mix"):
            expected.pop("label_smoothing")
        assert run["recipe"] == {k: v for k, v in expected.items() if k != "epochs"}
        assert run["epochs"] == RECORDED_ROWS[run["row"]]["epochs"]


def test_summarize_gives_mean_spread_and_range_per_row_in_order():
    results = {"runs": runs("b", [(0.5, 0.4), (0.7, 0.6), (0.6, 0.5)]) + runs("a", [(0.9, 0.8)])}
    table = summarize(results)
    assert list(table) == ["b", "a"]
    assert table["b"]["n"] == 3 and table["b"]["test_mean"] == pytest.approx(0.5)
    assert table["b"]["test_std"] == pytest.approx(0.1)
    assert (table["b"]["test_min"], table["b"]["test_max"]) == (0.4, 0.6)
    assert table["b"]["wall_clock_minutes"] == pytest.approx(2.0)
    assert table["a"]["test_std"] is None  # one seed has no spread, not a spread of 0
    newer = [{**run, "wall_clock_minutes": run.pop("minutes")} for run in runs("c", [(1, 1)])]
    assert summarize({"runs": newer})["c"]["wall_clock_minutes"] == 1.0


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"test_accuracy": 79}, ValueError,
         r"run 1 \(row 'b' seed 1\) has test_accuracy=79; accuracies here are fractions in "
         r"\[0, 1\] \(79 % is 0\.79\): divide percentages by 100"),
        ({"final_val_accuracy": -0.1}, ValueError, r"has final_val_accuracy=-0\.1; accuracies"),
        ({"test_accuracy": float("nan")}, ValueError, r"has test_accuracy=nan; accuracies"),
        ({"test_accuracy": "0.8"}, TypeError, r"has test_accuracy='0\.8', not a number"),
        ({"test_accuracy": True}, TypeError, r"has test_accuracy=True, not a number"),
        ({"seed": "0"}, TypeError, r"run 1 \(row 'b' seed '0'\) has a seed of type str; seeds "
         r"are integers"),
        ({"seed": 0}, ValueError, r"row 'b' seed 0 comes twice \(runs 0 and 1\): one run would "
         r"count as two seeds\. Keep one of them"),
    ],
)  # fmt: skip
def test_summarize_refuses_what_it_would_average_wrongly(change, error, message):
    results = {"runs": runs("b", [(0.5, 0.4), (0.7, 0.6), (0.6, 0.5)])}
    results["runs"][1].update(change)
    with pytest.raises(error, match=message):
        summarize(results)
    del results["runs"][1]["test_accuracy"]
    with pytest.raises(ValueError, match=r"run 1 lacks \['test_accuracy'\]; summarize reads"):
        summarize(results)


def test_load_results_names_a_damaged_file_and_refuses_a_run_twice(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"scripts/train_cifar10.py --data"):
        load_results(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"runs": [], "provenance": []}))
    with pytest.raises(ResultsFileError, match=r"empty\.json holds no runs or no provenance"):
        load_results(empty)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"runs": runs("a", [(0.9, 0.8)]) * 2, "provenance": [{}]}))
    with pytest.raises(ValueError, match=r"row 'a' seed 0 twice"):
        load_results(twice)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"runs": runs("a", [(0.9, 0.8)]), "provenance": [{"gpu": "x"}]}))
    assert load_results(good)["provenance"] == [{"gpu": "x"}]


def test_every_row_of_the_next_ladder_changes_one_thing():
    names = list(ROWS)
    first = ROWS[names[0]]  # the recorded vit-crop-flip, longer
    recorded = {**BASE, **RECORDED_ROWS["vit-crop-flip"]}
    assert {k: v for k, v in first.items() if k in recorded and recorded[k] != v} == {"epochs": 50}
    assert not any(first[k] for k in ("rand_augment", "mix", "random_erasing", "drop_path_rate"))
    for above, row in zip(names, names[1:], strict=False):
        changed = changes(row, above)
        if ROWS[row]["model"] == "resnet18":  # the CNN: the last ViT row's budget and augment
            assert set(changed) == {"model", "drop_path_rate"}  # its ResNet has no drop path
        else:
            assert len(changed) == 1, (row, changed)
    pairs = list(zip(names, names[1:], strict=False))
    lengths = [row for above, row in pairs if "epochs" in changes(row, above)]
    assert lengths == ["vit-200"]  # training length is a row of its own
    assert ROWS["vit-50-randaugment-m9"]["rand_augment"]["scale"] == "timm"
    with pytest.raises(ValueError, match="not a row of the ladder"):
        changes("vit-300", "vit-200")


def test_the_next_ladder_fits_ninety_h100_minutes_from_measured_epochs():
    assert set(PLAN) == set(ROWS) and all(len(set(s)) == len(s) > 0 for s in PLAN.values())
    assert max(H100_SECONDS_PER_EPOCH["vit-mix-200, all of it"]) == 3.6
    total = sum(projected_minutes(row) or 0 for row in ROWS)
    expected = sum(ROWS[r]["epochs"] * len(PLAN[r]) for r in ROWS if ROWS[r]["model"] == "vit")
    assert total == pytest.approx(expected * 3.6 / 60) and total <= 90
    assert projected_minutes("resnet18-200") is None  # never timed alone on an H100


def test_provenance_groups_keep_what_differs():
    entries = [{"device": "a", "command": "x", "seeds": [0], "date": "1"},
               {"device": "a", "command": "y", "seeds": [1], "date": "2"},
               {"device": "b", "command": "z", "seeds": [0], "date": "3"}]  # fmt: skip
    groups = group_provenance({"provenance": entries})
    assert [(g["device"], g["entries"], g["seeds"]) for g in groups] == [
        ("a", 2, [0, 1]), ("b", 1, [0])]  # fmt: skip
    assert groups[0]["dates"] == ("1", "2") and groups[0]["commands"] == ["x", "y"]


def test_changes_read_from_a_file_are_described_in_words():
    recorded = recipes(load_results())
    step = changes("vit-mix-200", "vit-regularised-100", recorded)
    assert step == {"label_smoothing": (0.1, None), "epochs": (100, 200), "mix": (None, True)}
    assert describe_change(step) == (
        "epochs: 100 → 200; label smoothing in the loss: 0.1 → none; MixUp/CutMix: none → on")
    assert describe_change(changes("vit-50-randaugment-m9", "vit-50-timm-decay")) == (
        "RandAugment: none → 2 ops, m9 ± 0.5 (timm scale)")
    assert describe_change(changes("vit-50-repeated", "vit-50-drop-path")) == (
        "repeated augmentation: 1 → 3")  # a count, not "on"
    assert describe({"val_mean": 0.7771, "val_std": 0.0027}, "val", percent=True) == (
        "77.71 ± 0.27")


# --- the next recording: its order, its cost, and what a partial file holds -------------------


def test_the_recording_answers_the_data_efficient_question_first():
    order = recording_order()
    assert order[:6] == [(row, 0) for row in FIRST_ROWS] == [
        ("resnet18-200", 0), ("vit-200", 0), ("vit-200-deit-hard", 0), ("vit-200-token", 0),
        ("vit-200-mean", 0), ("vit-200-conv-stem", 0)]  # fmt: skip
    fifty = [row for row in ROWS if ROWS[row]["epochs"] == 50]
    assert order[6 : 6 + len(fifty)] == [(row, 0) for row in fifty]  # in ladder order
    later = order[6 + len(fifty) :]
    assert all(seed > 0 for _, seed in later)
    assert [seed for _, seed in later] == sorted(seed for _, seed in later)  # seed by seed
    planned = {(row, seed) for row, seeds in {**PLAN, **{r: (0, 1, 2) for r in DEIT_ROWS}}.items()
               for seed in seeds}  # fmt: skip
    assert len(order) == len(set(order)) == len(planned) and set(order) == planned
    for row, seed in order:  # a student after its teacher of the same seed
        teacher = DEIT_ROWS.get(row, {}).get("teacher")
        if teacher:
            assert order.index((teacher, seed)) < order.index((row, seed))
    assert recording_order({"vit-50": (1, 0), "vit-200": (2,)}) == [
        ("vit-50", 0), ("vit-50", 1), ("vit-200", 2)]  # fmt: skip
    with pytest.raises(ValueError, match=r"\['vit-300'\] are not rows of the next recording"):
        recording_order({"vit-300": (0,)})


def test_the_plan_is_priced_from_the_compiled_epoch_and_unmeasured_rows_stay_unpriced():
    assert H100_SECONDS_PER_EPOCH["fit(compile=True), crop and flip"] == 1.455
    cost = plan_cost()
    assert [(row, seed) for row, seed, _, _ in cost] == recording_order()
    for row, _, epochs, minutes in cost:
        if row in ROWS and ROWS[row]["model"] == "vit":
            assert epochs == ROWS[row]["epochs"] and minutes == pytest.approx(epochs * 1.455 / 60)
        else:  # ResNet-18, the distilled student, the stem: never timed
            assert minutes is None, row
    epochs = sum(ROWS[r]["epochs"] * len(PLAN[r]) for r in ROWS if ROWS[r]["model"] == "vit")
    assert epochs == 1300
    assert sum(m for *_, m in cost if m is not None) == pytest.approx(1300 * 1.455 / 60)
    assert plan_cost(3.0, [("vit-50", 1)]) == [("vit-50", 1, 50, 2.5)]


def fake_run(row, seed):
    """A run as the script records it, with accuracies made up for the test."""
    return {"row": row, "seed": seed, "epochs": {**ROWS, **DEIT_ROWS}[row]["epochs"],
            "recipe": planned_recipe(row), "final_val_accuracy": 0.8 + seed / 100,
            "test_accuracy": 0.79 + len(row) / 1000 + seed / 100,
            "wall_clock_minutes": 1.0}  # fmt: skip


PROVENANCE = [{"device": "NVIDIA H100 80GB HBM3", "data": {"sha256": "ab" * 32}}]


def stages() -> dict[str, int]:
    """Named stages of the plan order: how many runs are recorded at each."""
    order = recording_order()
    first_later = next(k for k, (_, seed) in enumerate(order) if seed > 0)
    return {"empty": 0, "resnet18-200 seed 0": 1, "the first seed-0 rows": len(FIRST_ROWS),
            "every seed 0": first_later, "one later seed": first_later + 1,
            "all but one": len(order) - 1, "all": len(order)}  # fmt: skip


@pytest.mark.parametrize("recorded", range(len(recording_order()) + 1))
def test_a_partial_file_at_every_stage_says_what_is_recorded_and_what_is_missing(recorded):
    order = recording_order()
    runs = [fake_run(row, seed) for row, seed in order[:recorded]]
    progress = recording_progress({"runs": runs[::-1], "provenance": PROVENANCE})  # any order
    assert progress.recorded == tuple(order[:recorded]) and progress.missing == tuple(
        order[recorded:])  # fmt: skip
    assert progress.complete == (recorded == len(order))
    assert progress.next == (order[recorded] if recorded < len(order) else None)
    for row in progress.rows:
        seeds = tuple(sorted(s for r, s in order[:recorded] if r == row))
        assert progress.seeds(row) == seeds
        assert set(progress.seeds(row)) | set(progress.missing_seeds(row)) == set(
            progress.planned_seeds(row))  # fmt: skip
        assert progress.partial(row) == (0 < len(seeds) < len(progress.planned_seeds(row)))
        label = progress.label(row)
        assert label.startswith(row) and ("partial" in label) == progress.partial(row)
        assert ("not recorded" in label) == (not seeds)
        assert progress.values(row) == {s: fake_run(row, s)["test_accuracy"] for s in seeds}
    assert progress.recorded_rows() == tuple(dict.fromkeys(r for r, _ in order[:recorded]))
    # the data-efficient question, paired over the seeds both rows have so far
    student, plain = progress.shared("vit-200-deit-hard", "vit-200")
    both = set(progress.seeds("vit-200-deit-hard")) & set(progress.seeds("vit-200"))
    assert set(student) == set(plain) == both
    if both:
        difference = paired_difference(student, plain)
        assert difference.n == len(both)
    text = progress.describe()
    first = {0: f"Nothing of the plan's {len(order)} runs is recorded yet.",
             len(order): f"Recorded: all {len(order)} runs of the plan."}.get(recorded, (
        f"Recorded so far: {recorded} of {len(order)} runs of the plan (a partial recording)."))
    assert text.splitlines()[0] == first
    assert ("Missing:" in text) == (recorded < len(order))
    assert ("partial" in text) == (0 < recorded < len(order))
    if recorded:  # what a chapter's table reads: one row per recorded row, its seeds counted
        table = summarize(progress.results())
        assert list(table) == list(progress.recorded_rows())
        assert all(table[row]["n"] == len(progress.seeds(row)) for row in table)
    assert progress.results()["provenance"] == PROVENANCE


def test_the_named_stages_of_the_plan():
    at = stages()
    order = recording_order()

    def progress(stage):
        return recording_progress({"runs": [fake_run(r, s) for r, s in order[:at[stage]]],
                                   "provenance": PROVENANCE})  # fmt: skip

    assert progress("empty").recorded_rows() == () and progress("empty").next == (
        "resnet18-200", 0)  # fmt: skip
    one = progress("resnet18-200 seed 0")
    assert one.label("resnet18-200") == "resnet18-200 (seed 0 of 0, 1, 2; partial)"
    assert one.label("vit-200") == "vit-200 (not recorded)" and one.next == ("vit-200", 0)
    four = progress("the first seed-0 rows")
    assert four.recorded_rows() == FIRST_ROWS and all(four.partial(r) for r in FIRST_ROWS)
    every = progress("every seed 0")
    assert all(every.seeds(row) == (0,) for row in every.rows)
    assert every.label("vit-50") == "vit-50 (seed 0 of 0, 1; partial)"
    later = progress("one later seed")
    assert later.seeds("resnet18-200") == (0, 1) and later.next == ("vit-200", 1)
    done = progress("all")
    assert done.complete and done.label("vit-200") == "vit-200 (seeds 0, 1, 2)"
    assert done.describe().splitlines()[0] == f"Recorded: all {len(order)} runs of the plan."


def test_a_file_that_does_not_belong_to_the_plan_is_refused_or_set_apart(tmp_path):
    smoke = {**fake_run("vit-50", 0), "epochs": 1}
    with pytest.raises(ValueError, match=r"row 'vit-50' seed 0 in x\.json was trained for 1 "
                                         r"epochs .*but the plan has 50 epochs.*smoke run"):
        recording_progress({"runs": [smoke]}, source="x.json")
    other_recipe = {**fake_run("vit-50", 0), "recipe": {**planned_recipe("vit-50"), "lr": 2e-3}}
    with pytest.raises(ValueError, match=r"with recipe .*'lr': 0\.002"):
        recording_progress({"runs": [other_recipe]})
    with pytest.raises(ValueError, match=r"row 'vit-200' seed 0 is recorded twice"):
        recording_progress({"runs": [fake_run("vit-200", 0)] * 2})
    with pytest.raises(ResultsFileError, match=r"holds no list of runs"):
        recording_progress({"runs": "none"})
    with pytest.raises(ResultsFileError, match=r"a run without row, seed, epochs or recipe"):
        recording_progress({"runs": [{"row": "vit-50"}]})
    shipped = recording_progress(load_results())  # the recorded ladder: other rows
    assert shipped.recorded == () and len(shipped.other) == 13
    with pytest.raises(ValueError, match=r"'vit-999' is not a row of the plan"):
        shipped.seeds("vit-999")
    nothing = load_progress(tmp_path / "none.json")
    assert nothing.recorded == () and nothing.source.startswith("nothing recorded yet")
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"runs": [fake_run("resnet18-200", 0)], "provenance": PROVENANCE}))
    assert load_progress(path).recorded == (("resnet18-200", 0),)
    path.write_text('{"runs": [')
    with pytest.raises(ResultsFileError, match=r"partial\.json is not valid JSON"):
        load_progress(path)


def test_the_photo_controls_change_one_thing_each_from_vit_200():
    """The digits found a student's gain indistinguishable from the token alone and from mean
    pooling; on photos those two controls are rows of their own, one change from vit-200."""
    from vitbook.studies.ladder import changes

    token, mean = DEIT_ROWS["vit-200-token"], DEIT_ROWS["vit-200-mean"]
    assert {k: v for k, v in token.items() if k not in ("distilled", "distillation")} == (
        ROWS["vit-200"]) and token["distilled"] and "teacher" not in token  # fmt: skip
    assert token["distillation"] == "none"
    assert {k: v for k, v in mean.items() if k not in ("class_token", "pool")} == ROWS["vit-200"]
    assert (mean["class_token"], mean["pool"]) == (False, "mean")
    rows = {**ROWS, **DEIT_ROWS}
    assert changes("vit-200-mean", "vit-200", rows) == {"class_token": (None, False),
                                                        "pool": (None, "mean")}  # fmt: skip
    assert set(FIRST_ROWS) == {"resnet18-200", "vit-200", *DEIT_ROWS}


@pytest.mark.parametrize("stage", list(stages()))
def test_the_data_efficient_rows_pair_only_the_seeds_both_have(stage):
    """What the data-efficient chapter's CIFAR-10 cell relied on (its checks moved here): at
    every stage, a row's recorded and missing seeds make up its plan, and a question is answered
    exactly when the two rows share a seed, over those seeds; one seed never tells."""
    from vitbook.studies.comparison import paired_difference

    order = recording_order()
    progress = recording_progress({"runs": [fake_run(r, s) for r, s in order[:stages()[stage]]],
                                   "provenance": PROVENANCE})  # fmt: skip
    for row in FIRST_ROWS:
        assert set(progress.seeds(row)) | set(progress.missing_seeds(row)) == set(
            progress.planned_seeds(row)) == {0, 1, 2}  # fmt: skip
    for a in ("vit-200-deit-hard", "vit-200-token", "vit-200-mean", "vit-200-conv-stem"):
        for b in ("resnet18-200", "vit-200", "vit-200-token", "vit-200-mean"):
            if a == b:
                continue
            mine, theirs = progress.shared(a, b)
            shared = set(progress.seeds(a)) & set(progress.seeds(b))
            assert set(mine) == set(theirs) == shared
            if shared:
                d = paired_difference(mine, theirs)
                assert d.n == len(shared) and (d.n > 1 or not d.tells)
