"""The ViT-B/16 path of the chapter "Fine-tuning a pretrained ViT", run without a network.

A random Hugging Face ViT-B/16, written by ``save_pretrained`` and placed in a Hugging Face cache
under the name ``google/vit-base-patch16-224`` with that checkpoint's preprocessor config, stands
in for the real checkpoint (same config, same files, random weights). The chapter then loads it
with a new ten-class head, as a reader with a network does; without a GPU it fine-tunes it for a
few steps on stand-in photos, which is what these tests check: the steps run, the loss falls,
and the normalisation used is the checkpoint's. The real CIFAR-10 run needs a GPU and a
download, which the tests never have. An empty cache gives the offline path of the build.
"""

from __future__ import annotations

import math
import re
import time

import nbformat
import pytest
import torch
from booktools import ROOT
from hubtools import VIT_PREPROCESSOR, add_snapshot, perturb_

from vitbook.cifar import CIFAR10_CLASSES, cifar10_standin
from vitbook.pretrained import DEFAULT_CHECKPOINT, load_pretrained
from vitbook.train import fit
from vitbook.transfer import FINETUNE_RECIPE, freeze_body, with_preprocessing

transformers = pytest.importorskip("transformers")

CHAPTER = ROOT / "book" / "finetuning.ipynb"
LOSS_LINE = re.compile(r"(linear probe|fine-tune): loss ([0-9.]+) in the first epoch, ([0-9.]+) "
                       r"in the last;\n  [0-9.]+ min on cpu in fp32")  # fmt: skip


@pytest.fixture(scope="module")
def vit_b16_cache(tmp_path_factory):
    """A Hugging Face cache folder holding a random ViT-B/16 as google/vit-base-patch16-224."""
    root = tmp_path_factory.mktemp("hub")
    torch.manual_seed(0)
    labels = {k: f"class {k}" for k in range(1000)}
    config = transformers.ViTConfig(id2label=labels, attn_implementation="eager")  # ViT-B/16
    model = transformers.ViTForImageClassification(config).eval()
    perturb_(model, 0.02)
    model.save_pretrained(root / "saved")
    add_snapshot(root / "hub", DEFAULT_CHECKPOINT, root / "saved", preprocessor=VIT_PREPROCESSOR)
    return root


def test_the_chapters_recipe_on_the_cached_vit_b16_lowers_the_loss(vit_b16_cache):
    """The chapter's code path, called directly: a few steps of each method on stand-in photos."""
    bundle = load_pretrained(DEFAULT_CHECKPOINT, cache_dir=vit_b16_cache / "hub",
                             local_files_only=True, num_classes=10, class_names=CIFAR10_CLASSES,
                             attn_impl="sdpa")  # fmt: skip
    assert bundle.model.config.num_parameters() == 86_567_656 - 1000 * 769 + 10 * 769
    assert not bundle.model.head.weight.any() and not bundle.model.head.bias.any()
    assert bundle.mean == bundle.std == (0.5, 0.5, 0.5)  # the checkpoint's, not ImageNet's
    photos = cifar10_standin(n_train=3, n_val=3, n_test=3).train  # (3, 3, 32, 32), 3 labels
    frozen = freeze_body(bundle.model)
    assert frozen.trainable_numbers == 768 * 10 + 10
    classifier = with_preprocessing(bundle)
    assert classifier.preprocess.size == (224, 224)
    seen = []
    classifier.model.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach()))
    history = fit(classifier, photos, epochs=3, batch_size=3, lr=0.1, warmup_epochs=0,
                  progress=False, **FINETUNE_RECIPE)  # fmt: skip
    assert history.train_loss[0] == pytest.approx(math.log(10), rel=1e-5)  # the zero head
    assert history.train_loss[-1] < history.train_loss[0]
    inputs = seen[0]  # what the ViT received at the first step, in fit's order
    assert inputs.shape == (3, 3, 224, 224)
    assert inputs.min() >= -1.0 - 1e-6 and inputs.max() <= 1.0 + 1e-6  # (x - 0.5) / 0.5
    expected = bundle.preprocess(photos[0])  # resized to 224 px, then the checkpoint's mean/std
    for image in inputs:
        assert any(torch.equal(image, photo) for photo in expected)


def run_chapter(monkeypatch, hub_home) -> tuple[str, float]:
    """Execute the chapter with the Hugging Face cache in ``hub_home``, never the network."""
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HOME", str(hub_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VITBOOK_STATIC_FIGURES", "0")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(CHAPTER, as_version=4)
    start = time.monotonic()
    NotebookClient(
        notebook, timeout=300, kernel_name="python3",
        resources={"metadata": {"path": str(CHAPTER.parent)}},
    ).execute()  # fmt: skip
    seconds = time.monotonic() - start
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.append(output.get("data", {}).get("text/html", ""))
    return "\n".join(texts), seconds


def losses(text: str) -> dict[str, tuple[float, float]]:
    found = {m[1]: (float(m[2]), float(m[3])) for m in LOSS_LINE.finditer(text)}
    assert set(found) == {"linear probe", "fine-tune"}, text[-2000:]
    return found


@pytest.mark.book
def test_chapter_fine_tunes_the_cached_vit_b16_a_few_steps_without_a_gpu(
    vit_b16_cache, monkeypatch
):
    text, seconds = run_chapter(monkeypatch, vit_b16_cache)
    assert f"model: {DEFAULT_CHECKPOINT}, 10 classes" in text
    assert "preprocessing:\n  Preprocess(size=(224, 224), mean=[0.5, 0.5, 0.5], " \
           "std=[0.5, 0.5, 0.5])" in text  # fmt: skip
    notes = text.split('<div class="admonition note">')[1:]
    assert len(notes) == 1
    shown = notes[0].split("</div>")[0]
    assert "built without a GPU, so the cells below train ViT-B/16 for three steps" in shown
    assert "checkpoint" not in shown and "Colab with a GPU runtime" in shown
    for method, (first, last) in losses(text).items():
        assert first == pytest.approx(math.log(10), abs=1e-3), method  # the zero head
        assert last < first, f"{method}: the loss did not fall"
    assert "frozen: 150 tensors, 85,798,656 numbers" in text  # ViT-B/16's body, for the probe
    assert "Exercise 1: correct" in text and "Exercise 2: correct" in text
    print(f"ViT-B/16 path of {CHAPTER.name}: {seconds:.1f} s")


@pytest.mark.book
def test_chapter_without_the_checkpoint_says_so_and_runs_a_stand_in(tmp_path, monkeypatch):
    text, seconds = run_chapter(monkeypatch, tmp_path)  # an empty cache
    assert "model: an untrained 2-block ViT (stand-in), 10 classes" in text
    notes = text.split('<div class="admonition note">')[1:]
    assert len(notes) == 1
    shown = notes[0].split("</div>")[0]
    assert "without a GPU and without the ViT-B/16 checkpoint" in shown
    for log_text in ("HF_HUB_OFFLINE", "Error", "Traceback", "http"):
        assert log_text not in shown
    for method, (first, last) in losses(text).items():
        assert last < first, f"{method}: the loss did not fall"
    print(f"offline path of {CHAPTER.name}: {seconds:.1f} s")
