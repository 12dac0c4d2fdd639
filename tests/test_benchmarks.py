"""The benchmark scripts at toy sizes (``--quick``): they run, check what they claim, save JSON.

No timing is asserted anywhere: on a shared 2-core machine only the full benchmark, with its
candidates timed side by side in one process, says anything about speed.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from vitbook import VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[1]
# One worker runs them all, so that the quick benchmark run below is taken once.
pytestmark = pytest.mark.xdist_group("benchmarks")
# budget runs notebooks: tested on its own below
QUICK_SECTIONS = ["speed", "limit", "memory", "threads", "photos_cpu", "gpu"]


def import_benchmarks(name: str):
    """Import ``benchmarks.<name>`` from this working tree (it is not an installed package)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"benchmarks.{name}")


@pytest.fixture(scope="session")  # once per run: the tests below share one worker
def report() -> dict:
    threads = torch.get_num_threads()
    try:
        yield import_benchmarks("run").run_benchmarks(QUICK_SECTIONS, quick=True, echo=False)
    finally:
        torch.set_num_threads(threads)


def table(report: dict, key: str):
    (found,) = [t for t in report["tables"] if t.key == key]
    return found


def positive_finite(values) -> bool:
    return all(isinstance(v, float | int) and math.isfinite(v) and v > 0 for v in values)


def tiny_config(**overrides) -> ViTConfig:
    fields = {"img_size": (16, 24), "patch_size": 8, "embed_dim": 12, "depth": 2, "num_heads": 2}
    return ViTConfig(**{**fields, "num_classes": 5, **overrides})


# --- speed ------------------------------------------------------------------------------------


def test_speed_table_has_one_row_per_model_mode_and_batch(report):
    speed = import_benchmarks("speed")
    rows = table(report, "speed")
    expected = [(case.model, case.mode, case.batch) for case in speed.QUICK_CASES]
    assert [tuple(row[:3]) for row in rows.rows] == expected
    assert {model for model, _, _ in expected} == set(speed.QUICK_MODELS)
    for column in ("reference ms", "sdpa ms", "explicit ms", "sdpa / ref", "explicit / ref"):
        assert positive_finite(rows.column(column)), column
    assert all(repeats >= 5 for repeats in rows.column("repeats"))
    full = [(case.model, case.mode, case.batch) for case in speed.FULL_CASES]
    assert full == [
        (model, mode, batch)
        for model in ("ViT-Ti/16", "ViT-B/16")
        for mode, batch in (("inference", 1), ("inference", 8), ("train step", 8))
    ]
    assert all(case.repeats >= 5 for case in speed.FULL_CASES)


def test_speed_checked_outputs_and_the_reference_path(report):
    speed = table(report, "speed")
    for checks in speed.data["checks"].values():
        assert checks["max_abs_diff_sdpa"] <= 1e-4
        assert checks["max_abs_diff_explicit"] <= 1e-4
    # PyTorch's fused encoder-layer kernel needs an even number of heads (tiny-Ti has 3).
    assert speed.data["checks"]["tiny-B"]["reference_fast_path"] is True
    assert speed.data["checks"]["tiny-Ti"]["reference_fast_path"] is False
    paths = {(row[0], row[1]): row[3] for row in speed.rows}
    assert paths[("tiny-B", "inference")] == "fused fast path"
    assert paths[("tiny-B", "train step")] == "regular"


def test_reference_equals_vitbook_with_copied_weights():
    reference = import_benchmarks("reference")
    torch.manual_seed(0)
    vit = VisionTransformer(tiny_config(attn_impl="sdpa"))
    with torch.no_grad():  # non-trivial norms, so a swapped or missing copy cannot hide
        for block in vit.blocks:
            for norm in (block.norm1, block.norm2):
                norm.weight.normal_()
                norm.bias.normal_()
    ref = reference.ReferenceViT(vit)
    images = torch.randn(3, 3, 16, 24)
    assert reference.check_equal(vit, ref, images) <= 1e-4
    assert reference.takes_fast_path(ref, images)
    with torch.no_grad():
        ref.encoder.layers[0].linear1.weight.mul_(1.1)
    with pytest.raises(AssertionError):
        reference.check_equal(vit, ref, images)


def test_reference_refuses_models_it_cannot_mirror():
    reference = import_benchmarks("reference")
    vit = VisionTransformer(tiny_config(class_token=False, pool="mean"))
    with pytest.raises(ValueError, match="class_token=True"):
        reference.ReferenceViT(vit)


# --- distance to the limit ---------------------------------------------------------------------


def test_mac_count_matches_the_closed_form_for_both_impls():
    limit = import_benchmarks("limit")
    cfg = tiny_config()
    b, n, d, h = 3, cfg.num_tokens, cfg.embed_dim, cfg.mlp_hidden_dim
    patches = cfg.num_patches * d * cfg.in_chans * cfg.patch_size**2
    block = n * d * 3 * d + 2 * n * n * d + n * d * d + 2 * n * d * h  # qkv, attention, proj, MLP
    expected = b * (patches + cfg.depth * block + d * cfg.num_classes)
    images = torch.randn(b, 3, 16, 24)
    for impl in ("sdpa", "explicit"):
        model = VisionTransformer(tiny_config(attn_impl=impl)).eval()
        total, per_op = limit.count_macs(model, images)
        assert total == expected, impl
        assert sum(per_op.values()) == total


def test_limit_tables(report):
    fraction = table(report, "limit")
    assert fraction.column("model") == ["vitbook sdpa", "vitbook explicit", "reference"]
    assert positive_finite(fraction.column("fraction of matmul limit"))
    assert positive_finite(fraction.column("GMAC / forward"))
    assert len(set(fraction.column("GMAC / forward"))) == 1
    assert fraction.data["limit_macs_per_s"] > 0
    operators = table(report, "limit_operators")
    assert 1 <= len(operators.rows) <= 8
    assert "`aten::addmm`" in operators.column("operator")
    shares = operators.column("share")
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1 + 1e-9


# --- memory ------------------------------------------------------------------------------------


def test_memory_table(report):
    memory = table(report, "memory")
    assert memory.column("model") == ["vitbook sdpa", "vitbook explicit", "reference"]
    assert all(increase >= 0 for increase in memory.column("peak RSS increase (median)"))
    assert positive_finite(memory.column("torch allocator peak"))
    assert positive_finite(memory.column("peak RSS (process)"))
    model = VisionTransformer(ViTConfig(**import_benchmarks("memory").QUICK_CONFIG))
    weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    assert memory.column("weights") == pytest.approx([weights_mib] * 3)


def test_threads_table_times_one_and_two_threads(report):
    threads = table(report, "threads")
    assert threads.column("machine") == ["idle"]  # --quick: one workload, no busy core
    one, two = threads.column("1 thread ms"), threads.column("2 threads ms")
    assert positive_finite(one + two)
    assert threads.column("2 / 1") == pytest.approx([b / a for a, b in zip(one, two, strict=True)])
    model = import_benchmarks("threads")._digits_vit()
    assert threads.column("parameters") == [sum(p.numel() for p in model.parameters())]


# --- report, JSON, command line -----------------------------------------------------------------


def test_photos_cpu_times_each_change_against_the_plain_step(report):
    tables = {table.key: table for table in report["tables"]}
    speed, parts = tables["photos-cpu"], tables["photos-cpu-parts"]
    assert speed.column("change")[:3] == ["plain", "1 thread", "channels-last"]
    assert speed.column("/ plain")[0] == 1.0
    for column in ("images/s", "/ plain", "GFLOP/s", "epoch min"):
        assert all(v > 0 and math.isfinite(v) for v in speed.column(column)), column
    rates = speed.data["matmul_gflops"]
    assert set(rates) == {"matmul fp32", "matmul bf16"} and min(rates.values()) > 0
    # the work of a step: three forward passes of the explicit path, counted
    photos_cpu = import_benchmarks("photos_cpu")
    assert speed.data["train_mflop_per_photo"] == photos_cpu.train_flops(quick=True) / 1e6
    assert set(speed.data["no_bf16_units"]) == {"plain", "bf16 explicit b256"}
    assert parts.column("part") == ["aug float32", "aug uint8", "validation pass"]
    assert 0 < parts.column("share of an epoch")[-1] < 1


def test_gpu_tables_time_fit_against_a_plain_loop_and_name_the_device(report):
    fit = table(report, "gpu-fit")
    compiled = torch.cuda.is_available()  # the compiled rows run on a GPU only
    both = ["fit", *["fit, compiled"] * compiled]
    floors = ["floor, batch 256", *["floor, batch 1024"] * compiled]  # 1024: compiled only
    loops = ["plain loop", *both, *both, "fit, DeiT hard distillation", *floors]
    assert fit.column("loop") == loops
    assert fit.column("model") == (
        ["photo ViT"] * (2 + compiled) + ["ResNet-18"] * (1 + compiled) + ["distilled photo ViT"]
        + ["photo ViT"] * len(floors)
    )  # the DeiT row prices the teacher's forward pass in every step
    tflops = fit.column("TFLOP/s")
    assert positive_finite(tflops)
    for name, row in zip(fit.data["times"], fit.rows, strict=True):  # counted FLOPs / median
        assert row[-1] == pytest.approx(fit.data["flops"][name] / row[3] / 1e12)
    photo = [fit.data["flops"][name] for name in ("plain loop", "fit", *floors)]
    assert len(set(photo)) == 1  # the same arithmetic, the same count
    assert (fit.data["floor_ratio"] is None) == (not compiled) and fit.data["floor_target"] == 1.2
    seconds = fit.column("epoch s (median)")
    assert positive_finite(seconds)
    assert fit.data["ratio"] == pytest.approx(seconds[1] / seconds[0])
    assert fit.column("/ plain loop") == pytest.approx([s / seconds[0] for s in seconds])
    spreads = fit.column("ratio spread")
    assert spreads[0] is None and all(s >= 0 for s in spreads[1:])
    assert fit.data["ratio_spread"] == spreads[1] and fit.data["spread_target"] == 0.10
    assert (fit.data["compiled_ratio"] is None) == (not compiled)
    assert fit.data["device"] == ("CPU" if not torch.cuda.is_available() else fit.data["device"])
    assert fit.data["precision"] in ("fp32", "bf16", "fp16")
    assert any("Compiled rows" in note or "compile=True" in note for note in fit.notes)
    timm = table(report, "gpu-timm")
    if not timm.rows:  # timm (and torchvision) do not import on the CPU-only test machines
        assert "did not import" in timm.notes[0]
    else:
        assert timm.column("mode") == ["eager", "compiled"]
        assert positive_finite(timm.column("vitbook / timm"))


def test_the_gpu_section_needs_only_torch():
    """A bare GPU machine has torch (and maybe timm), not the book's packages: run.py imports a
    section only when it runs it (it once stopped at budget.py's import nbformat)."""
    import subprocess

    blocked = ["nbformat", "nbclient", "yaml", "matplotlib", "PIL", "scipy", "tqdm", "IPython"]
    probe = (
        f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
        "from benchmarks import run\nrun.section('gpu')\n"
        "import vitbook.train, vitbook.data.augment, vitbook.baselines, vitbook.data.cifar\n"
        "from benchmarks import gpu\ngpu.photo_vit(quick=True)\ngpu.resnet18()\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    blocked_budget = subprocess.run(
        [sys.executable, "-c", probe + "from benchmarks import budget\n"], cwd=ROOT,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert blocked_budget.returncode != 0  # the probe's blocking works: budget needs nbformat
    assert "import of nbformat halted" in blocked_budget.stderr


def test_quartile_spread_ignores_one_slow_round():
    common = import_benchmarks("common")
    assert common.quartile_spread([1.0, 1.0, 1.0, 1.0, 5.0]) == 0.0
    assert common.quartile_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 3)
    assert common.spread([1.0, 1.0, 1.0, 1.0, 5.0]) == 4.0


def test_the_photo_vits_training_flops_are_the_closed_form():
    """One image, forward and backward, as torch.utils.flop_counter counts them on the meta
    device: 2 FLOPs a MAC; the backward pass computes two products per forward product (the
    input's and the weight's gradients) but the images need no gradient."""
    gpu = import_benchmarks("gpu")
    tokens, d, hidden, depth = 65, 256, 512, 6  # 64 patches and the class token
    patch = 64 * (3 * 4 * 4) * d
    block = tokens * d * 3 * d + 2 * tokens * tokens * d + tokens * d * d + 2 * tokens * d * hidden
    macs = patch + depth * block + d * 10  # the head reads the class token only
    flops = gpu.training_flops(lambda: gpu.photo_vit(False, attn_impl="explicit"))
    assert flops == 3 * 2 * macs - 2 * patch == 1_307_870_208
    assert round(flops * 45_000 / 1e12, 2) == 58.85  # an epoch (a fused kernel adds 0.6%)
    with_teacher = gpu.training_flops(lambda: gpu.photo_vit(True, attn_impl="explicit"),
                                      teacher=gpu.resnet18)  # fmt: skip
    alone = gpu.training_flops(lambda: gpu.photo_vit(True, attn_impl="explicit"))
    # the teacher's forward pass: a third of its training step (less its first convolution's
    # input gradient, which the step does not compute)
    assert with_teacher - alone == pytest.approx(gpu.training_flops(gpu.resnet18) / 3, rel=0.01)


def test_the_floor_trains_with_gradients_in_buffers_of_its_own():
    """A CUDA graph's outputs are overwritten by its next replay: the floor's gradients are
    buffers made before the first step, zeroed and summed into in place, never replaced."""
    gpu = import_benchmarks("gpu")
    images, labels = torch.rand(40, 3, 32, 32), torch.randint(0, 10, (40,))
    torch.manual_seed(0)
    model = gpu.photo_vit(quick=True)
    before = [p.detach().clone() for p in model.parameters()]
    epoch = gpu.floor_epoch(model, images, labels, "fp32", seed=0, batch_size=16, compiled=False)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and not g.any() for g in grads)
    epoch()
    assert all(p.grad is g for p, g in zip(model.parameters(), grads, strict=True))
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_plain_loop_of_the_gpu_benchmark_trains_like_fit():
    """The loop raced against fit must do the same work: same model, data, recipe, augmentation."""
    gpu = import_benchmarks("gpu")
    images, labels = torch.rand(64, 3, 32, 32), torch.randint(0, 10, (64,))
    torch.manual_seed(0)
    model = gpu.photo_vit(quick=True)
    before = [p.detach().clone() for p in model.parameters()]
    gpu.plain_epoch(model, images, labels, "fp32", seed=0)()
    moved = [not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True)]
    assert all(moved)


def test_report_round_trips_through_json(report):
    run = import_benchmarks("run")
    assert run.from_json(run.to_json(report)) == report
    assert report["machine"]["torch_threads"] == 2
    markdown = table(report, "speed").to_markdown()
    assert markdown.count("\n| tiny-") == len(table(report, "speed").rows)
    section = run.report_markdown(report)
    assert section.startswith("## Performance")
    assert report["machine"]["cpu_model"] in section
    assert all(t.title in section for t in report["tables"])


def test_command_line_writes_json(tmp_path, capsys):
    run = import_benchmarks("run")
    threads = torch.get_num_threads()
    try:
        assert run.main(["--quick", "--only", "threads", "--json", str(tmp_path / "r.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [t["key"] for t in saved["tables"]] == ["threads"]
    assert saved["quick"] is True
    assert "| 2 / 1 |" in capsys.readouterr().out


def test_command_line_rejects_unknown_sections(capsys):
    run = import_benchmarks("run")
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--only", "speed,sped"])
    assert exit_info.value.code == 2
    assert "--only takes" in capsys.readouterr().err


# --- book budget -------------------------------------------------------------------------------


def test_budget_reads_notebooks_from_the_toc_in_order(tmp_path):
    budget = import_benchmarks("budget")
    (tmp_path / "book").mkdir()
    for name in ("intro.md", "b.ipynb", "a.ipynb", "a_part.ipynb", "unlisted.ipynb", "z.md"):
        (tmp_path / "book" / name).write_text("{}")
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n"
        "  - caption: One\n    chapters:\n      - file: book/b\n"
        "      - file: book/a\n        sections:\n          - file: book/a_part\n"
        "  - caption: Two\n    chapters:\n      - file: book/z\n"
    )
    assert budget.toc_notebooks(tmp_path) == [
        tmp_path / "book" / name for name in ("b.ipynb", "a.ipynb", "a_part.ipynb")
    ]
    real = budget.toc_notebooks()
    assert real and all(path.suffix == ".ipynb" and path.exists() for path in real)


def test_budget_times_a_notebook_and_reports_its_error(tmp_path):
    budget = import_benchmarks("budget")
    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    for path, code in ((good, "x = 6 * 7\nassert x == 42"), (bad, "1 / 0")):
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(notebook, path)
    ran = budget.execute_notebook(good, timeout=60)
    assert ran["error"] is None and ran["seconds"] > 0
    failed = budget.execute_notebook(bad, timeout=60)
    assert "ZeroDivisionError" in failed["error"]


def test_budget_reads_per_notebook_times_from_the_build_log():
    budget = import_benchmarks("budget")
    log = (
        f"{ROOT}/book/notation.ipynb: Executing notebook using local CWD [mystnb]\n"
        f"{ROOT}/book/notation.ipynb: Executed notebook in 2.91 seconds [mystnb]\n"
        "book/attention.ipynb: Executed notebook in 12.50 seconds [mystnb]\n"
    )
    assert budget.executed_in_build(log) == {
        "book/notation.ipynb": 2.91,
        "book/attention.ipynb": 12.5,
    }
