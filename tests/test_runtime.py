"""vitbook.train.runtime: where a chapter runs, and the switches that let the tests take each
branch."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from hubtools import write_cifar10_like

from vitbook.data.cifar import DataUnavailableError
from vitbook.train.runtime import (
    CIFAR10_FILE,
    SIMULATE_GPU,
    Note,
    Runtime,
    detect_runtime,
    note,
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in (SIMULATE_GPU, CIFAR10_FILE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    return monkeypatch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's branch, on a machine without GPU")
def test_a_cpu_runtime_trains_in_fp32(clean_env):
    runtime = detect_runtime()
    assert runtime == Runtime(torch.device("cpu"), None, "fp32", colab=False)
    assert not runtime.has_gpu and not runtime.simulated
    assert str(runtime) == "no GPU: the CPU, training in fp32"


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_the_tests_can_take_a_gpus_branch_on_the_cpu(clean_env, precision):
    clean_env.setenv(SIMULATE_GPU, precision)
    runtime = detect_runtime()
    assert runtime.has_gpu and runtime.simulated and runtime.precision == precision
    assert runtime.device == torch.device("cpu")
    assert str(runtime).startswith(f"a GPU: a simulated GPU ({precision} on the CPU) (cpu)")
    clean_env.setenv(SIMULATE_GPU, "T4")
    with pytest.raises(ValueError, match=r"SIMULATE_GPU='T4' must be fp16 .*, bf16 .* or fp32"):
        detect_runtime()


def test_colab_is_told_by_its_module(clean_env):
    clean_env.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    runtime = detect_runtime()
    assert runtime.colab and str(runtime).endswith(", in Colab")


def test_cifar10_from_the_file_the_environment_names(clean_env, tmp_path):
    path = write_cifar10_like(tmp_path / "small.npz", n_train=130, n_test=20)
    clean_env.setenv(CIFAR10_FILE, str(path))
    runtime = detect_runtime()
    assert runtime.cifar10_file == path
    splits = runtime.load_cifar10(val_share=0.1)  # 13 of 130, rounded to a multiple of 10
    assert [len(part[1]) for part in (splits.train, splits.val, splits.test)] == [120, 10, 20]
    assert splits.train[0].shape == (120, 3, 32, 32) and splits.num_classes == 10
    assert splits.val[1].bincount().tolist() == [1] * 10
    assert len(runtime.load_cifar10(val_share=0.02).val[1]) == 10  # at least one per class
    with pytest.raises(ValueError, match=r"val_share=0.6 must be a finite number > 0 and <= 0.5"):
        runtime.load_cifar10(val_share=0.6)
    clean_env.setenv(CIFAR10_FILE, str(tmp_path / "missing.npz"))
    with pytest.raises(DataUnavailableError, match=r"missing.npz does not exist"):
        detect_runtime().load_cifar10()


def test_a_damaged_file_the_environment_names_is_refused_with_the_fix(clean_env, tmp_path):
    """The runtime counts the file's photos before load_cifar10 reads it: numpy's advice to load
    it with allow_pickle (which runs code from the file) must never reach the reader."""
    path = write_cifar10_like(tmp_path / "cifar.npz", n_train=130, n_test=20)
    clean_env.setenv(CIFAR10_FILE, str(path))
    whole = path.read_bytes()
    remake = r"make the file again .* or pass source=None to use torchvision"
    for cut in (0, len(whole) // 2, len(whole) - 30):  # a copy cut short
        path.write_bytes(whole[:cut])
        with pytest.raises(ValueError, match=rf"cifar\.npz is not a readable \.npz .*{remake}"):
            detect_runtime().load_cifar10()
    for damaged in (b"garbage, not a zip at all" * 10, b"\x80\x04not a zip, not a pickle"):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=rf"not a \.npz of plain arrays: .*{remake}") as caught:
            detect_runtime().load_cifar10()
        assert "allow_pickle" not in str(caught.value)
    np.savez(path, x_train=np.zeros((3, 32, 32, 3), np.uint8), y_train=np.array([object()] * 3),
             x_test=np.zeros((1, 32, 32, 3), np.uint8), y_test=np.arange(1))  # fmt: skip
    with pytest.raises(ValueError, match=r"not a \.npz of plain arrays: .*pickled") as caught:
        detect_runtime().load_cifar10()
    assert "allow_pickle" not in str(caught.value)
    np.savez(path, x_train=np.zeros((3, 32, 32, 3), np.uint8), y_train=np.int64(3))
    with pytest.raises(ValueError, match=r"lacks \['x_test', 'y_test'\]"):
        detect_runtime().load_cifar10()


def test_cifar10_itself_holds_out_the_papers_share(clean_env):
    runtime = detect_runtime()
    assert runtime.cifar10_file is None
    assert runtime._val_size(0.02) == 1_000 and runtime._val_size(0.1) == 5_000


def test_a_note_shows_as_a_box_and_prints_as_text(capsys):
    box = Note("Offline <here>", "The cells below ran on a stand-in & say so.")
    assert box._repr_html_() == (
        '<div class="admonition note"><p class="admonition-title">Offline &lt;here&gt;</p>'
        "<p>The cells below ran on a stand-in &amp; say so.</p></div>"
    )
    note("Title", "word " * 30)  # no IPython shell here: printed, wrapped
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "Note: Title" and max(len(line) for line in printed) <= 76
