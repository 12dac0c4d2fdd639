"""The distillation miniature: its settings, one run, its records and the script that writes them.

Runs are shortened to one epoch (the recipe is patched), so that each takes a second or two.
"""

from __future__ import annotations

import json

import pytest
import torch

from vitbook.baselines import DigitsCNN
from vitbook.studies import distill_digits, experiments
from vitbook.studies.distill_digits import (
    SETTINGS,
    STUDENT,
    TEACHERS,
    build,
    load_results,
    run_one,
    summary,
)
from vitbook.vit import VisionTransformer


@pytest.fixture
def one_epoch(monkeypatch):
    shortened = experiments.RECIPE.replace(epochs=1, warmup_epochs=0)
    monkeypatch.setattr(experiments, "RECIPE", shortened)  # what distill_digits trains by


def test_settings_build_the_models_they_name():
    assert set(TEACHERS.values()) <= set(SETTINGS)
    assert isinstance(build(SETTINGS["CNN teacher"]), DigitsCNN)
    scratch, student = build(SETTINGS["ViT, scratch"]), build(SETTINGS["hard, CNN teacher"])
    stem = build(SETTINGS["conv stem"])
    assert isinstance(scratch, VisionTransformer) and not scratch.config.distilled
    assert student.config.distilled and student.config.num_prefix_tokens == 2
    assert stem.config.stem == "conv" and not stem.config.distilled
    # Only the named parts differ from the student's architecture.
    for model in (scratch, student, stem):
        fields = {k: getattr(model.config, k) for k in STUDENT if k != "img_size"}
        assert fields == {k: v for k, v in STUDENT.items() if k != "img_size"}
    assert not build(SETTINGS["hard, class token only"]).config.distilled
    mean = build(SETTINGS["ViT, mean-pooled"]).config
    assert (mean.class_token, mean.pool, mean.num_prefix_tokens) == (False, "mean", 0)
    assert build(SETTINGS["token, no teacher"]).config.distilled
    assert "teacher" not in SETTINGS["token, no teacher"]


def test_the_token_without_a_teacher_trains_both_heads_on_the_labels(one_epoch):
    teachers = {}
    model, run = run_one("token, no teacher", seed=1, teachers=teachers)
    assert model.config.distilled and set(teachers) == {"cnn"}  # the CNN only for agreement
    torch.manual_seed(1)
    start = build(SETTINGS["token, no teacher"])
    for head in ("head", "head_dist"):  # both heads moved from their initial weights
        assert not torch.equal(getattr(model, head).weight, getattr(start, head).weight)
    assert 0.0 <= run["distillation_head_accuracy"] <= 1.0


def test_soft_batchmean_weighs_the_kl_ten_times_deits(monkeypatch):
    from vitbook.train.distill import DistillationLoss

    seen = {}

    def spy(teacher, kind, **options):
        seen.update(kind=kind, **options)
        return DistillationLoss(teacher, kind, **options)

    monkeypatch.setattr(distill_digits, "DistillationLoss", spy)
    shortened = experiments.RECIPE.replace(epochs=1, warmup_epochs=0)
    monkeypatch.setattr(experiments, "RECIPE", shortened)  # what distill_digits trains by
    distill_digits.train_setting("soft, CNN teacher, batchmean", seed=0)
    assert seen["kind"] == "soft" and seen["kl_reduction"] == "batchmean"
    distill_digits.train_setting("soft, CNN teacher", seed=0)
    assert seen["kl_reduction"] == "mean"  # DeiT's


def test_one_distilled_run_trains_its_teacher_and_measures_everything(one_epoch):
    teachers = {}
    model, run = run_one("hard, CNN teacher", seed=3, teachers=teachers)
    assert set(teachers) == {"cnn"} and not teachers["cnn"].training
    assert model.config.distilled and not model.training
    for key in ("validation_accuracy", "test_accuracy", "class_head_accuracy",
                "distillation_head_accuracy", "head_agreement", "teacher_agreement"):
        assert 0.0 <= run[key] <= 1.0, key
    assert -1.0 <= run["token_cosine"] <= 1.0 and -1.0 <= run["final_token_cosine"] <= 1.0
    distances = run["attention_distance"]
    assert len(distances) == 2 and all(len(layer) == 4 for layer in distances)
    # Distances in pixels on a 4 x 4 grid of 2-pixel patches: at most the diagonal, 6 sqrt(2).
    assert all(0.0 <= d <= 6 * 2**0.5 for layer in distances for d in layer)
    assert run["parameters"] == sum(p.numel() for p in model.parameters())
    assert run["macs"] > 0 and run["seed"] == 3


def test_a_run_repeats_exactly(one_epoch):
    _, first = run_one("ViT, scratch", seed=1)
    _, again = run_one("ViT, scratch", seed=1)
    for key in ("validation_accuracy", "test_accuracy", "teacher_agreement"):
        assert first[key] == again[key], key
    assert first["attention_distance"] == again["attention_distance"]


def test_summary_and_load_results(tmp_path):
    from vitbook._files import ResultsFileError

    results = {"runs": {"a": [{"validation_accuracy": 0.5}, {"validation_accuracy": 0.7}],
                        "b": [{"validation_accuracy": 0.9}]}}  # fmt: skip
    table = summary(results)
    assert table["a"]["mean"] == pytest.approx(0.6) and table["b"]["std"] == 0.0
    assert table["a"]["std"] == pytest.approx(0.1414, abs=1e-4)
    with pytest.raises(FileNotFoundError, match="run_distillation.py --write-assets"):
        load_results(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ResultsFileError, match="is not valid JSON"):
        load_results(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"experiments": {}}))
    with pytest.raises(ResultsFileError, match="holds no 'runs' of settings"):
        load_results(tmp_path / "other.json")


def test_the_teacher_agreement_is_measured_against_the_cnn_teacher(one_epoch):
    teachers = {}
    model, run = run_one("ViT, scratch", seed=2, teachers=teachers)
    from vitbook.data import load_digits_split
    from vitbook.train import predict

    x_val = load_digits_split(validation=True)[2]
    same = predict(model, x_val).argmax(1) == predict(teachers["cnn"], x_val).argmax(1)
    assert run["teacher_agreement"] == pytest.approx(same.float().mean().item(), abs=1e-6)
    assert torch.is_tensor(same)


def test_a_saved_teacher_loads_with_its_weights_and_refuses_another_cnn(tmp_path):
    from safetensors.torch import save_file

    from vitbook.studies.distill_digits import load_teacher, save_teacher

    torch.manual_seed(0)
    teacher = build(SETTINGS["CNN teacher"])
    path = tmp_path / "teacher.safetensors"
    save_teacher(teacher, path, seed="0")
    loaded = load_teacher(path)
    assert not loaded.training
    images = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(loaded(images), teacher.eval()(images), rtol=0, atol=0)
    wide = DigitsCNN()  # the training chapter's widths, not the miniature's
    save_file({k: v.contiguous() for k, v in wide.state_dict().items()},
              str(tmp_path / "wide.safetensors"), metadata={"channels": "[32, 64, 160]"})
    with pytest.raises(ValueError, match=r"channels \[32, 64, 160\], not the miniature's"):
        load_teacher(tmp_path / "wide.safetensors")
    with pytest.raises(TypeError, match="must be a DigitsCNN"):
        save_teacher(torch.nn.Linear(2, 2), path)


def test_the_shipped_recording_is_complete_and_says_how_it_was_made():
    results = load_results()
    assert list(results["runs"]) == list(SETTINGS)
    assert all([run["seed"] for run in runs] == [0, 1, 2, 3, 4]
               for runs in results["runs"].values())  # fmt: skip
    assert results["fraction"] == distill_digits.FRACTION
    assert results["student"] == STUDENT and results["settings"] == SETTINGS
    assert results["teachers"] == TEACHERS
    first, controls, seed0, seeds14, rerun = results["provenance"]
    assert first["command"] == "python scripts/run_distillation.py --write-assets"
    assert controls["settings_run"] == ["ViT, mean-pooled", "token, no teacher",
                                        "soft, CNN teacher, batchmean"]  # fmt: skip
    protocol = ["CNN teacher, mixed", "hard, mixed CNN teacher, mixed",
                "ViT, scratch, 300 epochs", "hard, CNN teacher, 300 epochs",
                "soft, CNN teacher, τ 3, λ 0.1", "weak CNN teacher", "hard, weak CNN teacher"]
    assert seed0["settings_run"] == seeds14["settings_run"] == protocol
    assert (seed0["seeds"], seeds14["seeds"]) == ([0], [1, 2, 3, 4])
    assert rerun["settings_run"] == ["soft, CNN teacher, batchmean, rerun"]
    for entry in results["provenance"]:
        assert len(entry["git_commit"]) == 40 and not entry["uncommitted_changes"]
        assert entry["cpu_capability"] == "AVX2" and entry["torch_threads"] == 1
    # The later recordings ran on the first one's machine type, the controls on another.
    assert first["cpu"] == seed0["cpu"] == seeds14["cpu"] == rerun["cpu"] != controls["cpu"]
    assert controls["kernel_variables"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert results["joins"][-1]["allow_mixed"]  # two machines, said so when joined
    made = {label: index for index, entry in enumerate(results["provenance"])
            for label in entry["settings_run"]}  # fmt: skip
    for label, runs in results["runs"].items():
        made_by = {run.get("process", 0) for run in runs}
        expected = {2, 3} if label in protocol else {made[label]}
        assert made_by == expected, label
        vit = SETTINGS[label]["model"] == "vit"
        assert all(("attention_distance" in run) == vit for run in runs), label
        distilled = SETTINGS[label].get("distilled", False)
        assert all(("head_agreement" in run) == distilled for run in runs), label
        later = min(made_by) >= 2  # these record their teacher's accuracy
        assert all(("teacher_validation_accuracy" in run) == (later and "teacher" in
                   SETTINGS[label]) for run in runs), label  # fmt: skip


def test_what_the_seeds_share_across_settings():
    # The chapter's pairing: seed s starts settings of one architecture from the same weights.
    def weights(label):
        torch.manual_seed(3)
        return dict(build(SETTINGS[label]).named_parameters())

    def same(a, b):
        return sorted(k for k in a if k in b and a[k].shape == b[k].shape
                      and torch.equal(a[k], b[k]) and a[k].std() > 0)  # drawn, and equal

    scratch, distilled = weights("ViT, scratch"), weights("hard, CNN teacher")
    drawn = same(scratch, scratch)
    for label in ("hard, class token only", "ViT, scratch, mixed"):
        assert same(scratch, weights(label)) == drawn, label
    for label in ("soft, CNN teacher", "hard, ViT teacher", "token, no teacher",
                  "soft, CNN teacher, batchmean", "hard, CNN teacher, mixed"):
        assert same(distilled, weights(label)) == same(distilled, distilled), label
    patches = ["patch_embed.proj.bias", "patch_embed.proj.weight"]
    assert same(scratch, distilled) == patches
    assert same(scratch, weights("ViT, mean-pooled")) == patches
    assert same(scratch, weights("conv stem")) == []


def test_deits_protocol_settings_change_one_thing_each():
    mixed_teacher = build(SETTINGS["CNN teacher, mixed"])
    assert isinstance(mixed_teacher, DigitsCNN) and SETTINGS["CNN teacher, mixed"]["mix"]
    assert TEACHERS["cnn-mixed"] == "CNN teacher, mixed"
    assert TEACHERS["cnn-weak"] == "weak CNN teacher"
    student = SETTINGS["hard, mixed CNN teacher, mixed"]
    assert {**student, "teacher": "cnn"} == SETTINGS["hard, CNN teacher, mixed"]
    assert {k: v for k, v in SETTINGS["ViT, scratch, 300 epochs"].items() if k != "epochs"} == (
        SETTINGS["ViT, scratch"])  # fmt: skip
    long = SETTINGS["hard, CNN teacher, 300 epochs"]
    assert long["epochs"] == 300 and {k: v for k, v in long.items() if k != "epochs"} == (
        SETTINGS["hard, CNN teacher"])  # fmt: skip
    paper = SETTINGS["soft, CNN teacher, τ 3, λ 0.1"]
    assert (paper["tau"], paper["alpha"]) == (3.0, 0.1)
    assert {k: v for k, v in paper.items() if k not in ("tau", "alpha")} == (
        SETTINGS["soft, CNN teacher"])  # fmt: skip
    weak = SETTINGS["weak CNN teacher"]
    assert weak == {"model": "cnn", "fraction": distill_digits.WEAK_FRACTION}
    assert {**SETTINGS["hard, weak CNN teacher"], "teacher": "cnn"} == SETTINGS["hard, CNN teacher"]


def test_a_setting_overrides_the_epochs_the_constants_and_the_digits(monkeypatch):
    from vitbook.train.distill import DistillationLoss

    seen = {}

    def spy_loss(teacher, kind, **options):
        seen.update(kind=kind, **options)
        return DistillationLoss(teacher, kind, **options)

    def spy_fit(model, data, recipe, **options):
        seen.setdefault("fits", []).append((type(model).__name__, len(data[1]),
                                            recipe.epochs, options["mix"] is not None))
        return None

    monkeypatch.setattr(distill_digits, "DistillationLoss", spy_loss)
    monkeypatch.setattr(distill_digits, "fit", spy_fit)
    distill_digits.train_setting("soft, CNN teacher, τ 3, λ 0.1", seed=0)
    assert (seen["tau"], seen["alpha"], seen["kl_reduction"]) == (3.0, 0.1, "mean")
    distill_digits.train_setting("soft, CNN teacher", seed=0)
    assert (seen["tau"], seen["alpha"]) == (1.0, 0.5)  # DeiT's code's defaults
    seen["fits"] = []
    distill_digits.train_setting("hard, CNN teacher, 300 epochs", seed=0)
    assert seen["fits"] == [("DigitsCNN", 536, 100, False), ("VisionTransformer", 536, 300, False)]
    seen["fits"] = []
    distill_digits.train_setting("hard, weak CNN teacher", seed=0)
    assert seen["fits"] == [("DigitsCNN", 109, 100, False), ("VisionTransformer", 536, 100, False)]
    seen["fits"] = []
    distill_digits.train_setting("hard, mixed CNN teacher, mixed", seed=0)
    assert seen["fits"] == [("DigitsCNN", 536, 100, True), ("VisionTransformer", 536, 100, True)]


def test_a_run_with_a_teacher_records_that_teachers_accuracy(one_epoch):
    from vitbook.train import evaluate

    teachers = {}
    _, run = run_one("hard, weak CNN teacher", seed=0, teachers=teachers)
    assert set(teachers) == {"cnn-weak", "cnn"}  # its teacher, and the CNN for the agreement
    x_val, y_val = distill_digits._data()["val"]
    assert run["teacher_validation_accuracy"] == round(
        evaluate(teachers["cnn-weak"], (x_val, y_val)), 6)
    _, plain = run_one("ViT, scratch", seed=0, teachers=teachers)
    assert "teacher_validation_accuracy" not in plain


def test_macs_of_a_vit_count_the_attention_products():
    """FlopCounterMode counts no fused attention on a CPU: the count is made on an explicit copy,
    and equals the closed form with QK^T and AV (N^2 D each, per block)."""
    from vitbook.studies.distill_digits import macs_per_image

    for label, tokens in (("ViT, scratch", 17), ("hard, CNN teacher", 18),
                          ("ViT, mean-pooled", 16)):
        model = build(SETTINGS[label])
        assert model.config.attn_impl == "sdpa"
        d, depth, hidden = 32, 2, 64
        patch = 16 * (4 * d)  # 16 patches of 2 x 2 pixels to D
        block = tokens * (3 * d * d + d * d + 2 * d * hidden) + 2 * tokens * tokens * d
        heads = (2 if model.config.distilled else 1) * d * 10
        assert macs_per_image(model) == patch + depth * block + heads, label
        assert model.config.attn_impl == "sdpa"  # the model itself is unchanged


def test_the_weak_teachers_digits_lie_inside_the_students():
    from vitbook.studies.experiments import training_subset

    labels = distill_digits.load_digits_split(validation=True)[1]
    weak = training_subset(labels, distill_digits.WEAK_FRACTION)
    students = training_subset(labels, distill_digits.FRACTION)
    assert (len(weak), len(students)) == (109, 536)
    assert set(weak.tolist()) <= set(students.tolist())


def test_the_rerun_of_a_control_trains_what_the_control_trains(monkeypatch):
    rerun = SETTINGS["soft, CNN teacher, batchmean, rerun"]
    assert SETTINGS[rerun["rerun_of"]] == {k: v for k, v in rerun.items() if k != "rerun_of"}
    seen = []
    monkeypatch.setattr(distill_digits, "fit", lambda model, data, recipe, **options: seen.append(
        (model.state_dict(), options["criterion"].kl_reduction if options.get("criterion")
         else None)))  # fmt: skip
    distill_digits.train_setting("soft, CNN teacher, batchmean", seed=2)
    distill_digits.train_setting("soft, CNN teacher, batchmean, rerun", seed=2)
    (teacher_a, _), (student_a, kl_a), (teacher_b, _), (student_b, kl_b) = seen
    assert kl_a == kl_b == "batchmean"
    for a, b in ((teacher_a, teacher_b), (student_a, student_b)):  # the same initial weights
        assert all(torch.equal(a[k], b[k]) for k in a)
