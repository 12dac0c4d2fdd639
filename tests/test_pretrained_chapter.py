"""The online path of the chapter "A pretrained ViT", run without a network.

A random Hugging Face ViT-B/16, written by ``save_pretrained`` and placed in a Hugging Face cache
under the name ``google/vit-base-patch16-224``, stands in for the real checkpoint: same config,
same files, same names, random weights. ``load_pretrained`` then takes the path that a reader with
internet access takes after the download, and the chapter's online branch runs end to end. The
real download cannot be tested here (builds and tests never use the network); the conversion it
relies on is covered by tests/test_convert.py.
"""

from __future__ import annotations

import time

import nbformat
import pytest
import torch
from booktools import ROOT
from hubtools import VIT_PREPROCESSOR, add_snapshot, perturb_

from vitbook.data import sample_image
from vitbook.pretrained import DEFAULT_CHECKPOINT, load_pretrained

transformers = pytest.importorskip("transformers")

CHAPTER = ROOT / "book" / "pretrained.ipynb"
PARITY = {"rtol": 1e-5, "atol": 1e-5}  # float32, the same operations (see test_convert.py)


@pytest.fixture(scope="module")
def vit_b16_cache(tmp_path_factory):
    """(Hugging Face cache folder, the Hugging Face model) for a random ViT-B/16."""
    root = tmp_path_factory.mktemp("hub")
    torch.manual_seed(0)
    labels = {k: f"class {k}, synonym of class {k}" for k in range(1000)}  # ImageNet style
    config = transformers.ViTConfig(id2label=labels, attn_implementation="eager")  # ViT-B/16
    model = transformers.ViTForImageClassification(config).eval()
    perturb_(model, 0.02)
    model.save_pretrained(root / "saved")
    add_snapshot(root / "hub", DEFAULT_CHECKPOINT, root / "saved", preprocessor=VIT_PREPROCESSOR)
    return root, model


def test_vit_b16_from_the_cache_has_the_originals_logits_and_attention(vit_b16_cache):
    root, hf_model = vit_b16_cache
    pretrained = load_pretrained(DEFAULT_CHECKPOINT, cache_dir=root / "hub", local_files_only=True)
    assert pretrained.model.config.num_parameters() == 86_567_656
    assert pretrained.class_names[7] == "class 7, synonym of class 7"
    inputs = pretrained.preprocess(sample_image("grace_hopper", size=224))  # (1, 3, 224, 224)
    with torch.no_grad():
        expected = hf_model(pixel_values=inputs, output_attentions=True)
        logits, weights = pretrained.model.forward_with_attention(inputs)
    torch.testing.assert_close(logits, expected.logits, **PARITY)
    for ours, theirs in zip(weights, expected.attentions, strict=True):
        assert ours.shape == theirs.shape == (1, 12, 197, 197)
        torch.testing.assert_close(ours, theirs, **PARITY)


def run_chapter(monkeypatch, hub_home) -> tuple[str, float]:
    """Execute the chapter with the Hugging Face cache in ``hub_home``, never the network.

    Returns everything it printed or showed (text and HTML) and the seconds it took.
    """
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HOME", str(hub_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache, never the network
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws with the inline backend
    notebook = nbformat.read(CHAPTER, as_version=4)
    start = time.monotonic()
    NotebookClient(
        notebook, timeout=120, kernel_name="python3",
        resources={"metadata": {"path": str(CHAPTER.parent)}},
    ).execute()  # fmt: skip
    seconds = time.monotonic() - start
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.append(output.get("data", {}).get("text/html", ""))
    return "\n".join(texts), seconds


@pytest.mark.book
def test_chapter_runs_its_online_path_on_the_cached_vit_b16(vit_b16_cache, monkeypatch):
    root, _ = vit_b16_cache
    text, seconds = run_chapter(monkeypatch, root)
    assert f"model: {DEFAULT_CHECKPOINT}\n" in text
    assert "86,567,656 parameters, 1000 classes" in text
    assert 'class="admonition' not in text, "the note is for builds without a network only"
    assert "without a network" not in text and "digits" not in text
    assert "224 x 224 pixels, 14 x 14 patches of 16 x 16, D = 768\n12 blocks of 12 heads" in text
    assert "grace_hopper\n" in text and "Exercise 2: correct" in text
    print(f"online path of {CHAPTER.name}: {seconds:.1f} s")


@pytest.mark.book
def test_chapter_without_a_network_says_so_to_the_reader(tmp_path, monkeypatch):
    text, seconds = run_chapter(monkeypatch, tmp_path)  # an empty cache
    notes = text.split('<div class="admonition note">')[1:]
    assert len(notes) == 1, "one note, under the loading cell"
    shown = notes[0].split("</div>")[0]
    assert "This copy of the book was built without a network" in shown
    assert "open the chapter in Colab" in shown and "ViT-B/16" in shown
    for log_text in ("HF_HUB_OFFLINE", "Error", "error", "Traceback", "huggingface_hub", "http"):
        assert log_text not in shown, f"the note reads like a log: {log_text!r} in {shown!r}"
    assert "model: vitbook digits ViT (" in text
    assert "Exercise 2: correct" in text
    print(f"offline path of {CHAPTER.name}: {seconds:.1f} s")
