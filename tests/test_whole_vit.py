"""The reader's own ViT of book/whole_vit.ipynb: its class is what the chapter says (plain
PyTorch, under seventy lines, timm's parameter names), the chapters that train it or check it
against vitbook (full_model, training) or train it on photos (photos) repeat exactly that class,
and the code the page shows runs on its own, as a learner who copies it would run it."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import torch
from booktools import kernel_env

from vitbook import VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[1]
MODEL_CELLS = ("patch-embed", "attention", "mlp", "block", "vit")  # the cells' ids, in order
COPIES = {"book/full_model.ipynb": "whole-vit-model", "book/training.ipynb": "whole-vit-model",
          "book/photos.ipynb": "whole-vit-model"}  # fmt: skip
# The tags that fold or remove a cell on the HTML page: a learner who copies the page does not see
# those cells' code.
FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def cells(notebook: str) -> dict[str, dict]:
    source = json.loads((ROOT / notebook).read_text(encoding="utf-8"))
    return {cell["id"]: cell for cell in source["cells"]}


def text(cell: dict) -> str:
    return "".join(cell["source"])


def model_source() -> str:
    chapter = cells("book/whole_vit.ipynb")
    return "\n\n\n".join(text(chapter[name]) for name in MODEL_CELLS)


def reader_classes() -> dict:
    namespace: dict = {}
    exec(  # the chapter's set-up imports, then its five cells
        "import torch\nfrom einops import rearrange\nfrom torch import nn\n" + model_source(),
        namespace,
    )
    return namespace


def test_the_model_is_under_seventy_lines_of_plain_pytorch():
    source = model_source()
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) < 70, f"the chapter says 'under seventy lines'; the model has {len(lines)}"
    assert "vitbook" not in source


def test_the_other_chapters_repeat_the_class_exactly():
    for notebook, cell_id in COPIES.items():
        copy = cells(notebook)[cell_id]
        assert text(copy) == model_source(), f"{notebook}: the copy of whole_vit's ViT differs"
        assert "hide-input" in copy["metadata"].get("tags", []), f"{notebook}: fold the copy"


def test_the_class_has_timms_names_and_vitbooks_outputs():
    ViT = reader_classes()["ViT"]
    sizes = dict(img_size=16, patch_size=4, in_chans=3, num_classes=7, embed_dim=24, depth=3,
                 num_heads=3, mlp_ratio=4.0)  # fmt: skip
    config = ViTConfig(**sizes, attn_impl="explicit")
    tested = VisionTransformer(config).eval()
    yours = ViT(**sizes)
    yours.load_state_dict(tested.state_dict(), strict=True)
    assert list(yours.state_dict()) == list(tested.state_dict())
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        logits, attention = yours(images, return_attention=True)
        expected, expected_attention = tested.forward_with_attention(images)
    # the same operations in another rounding order: float32's default tolerance
    torch.testing.assert_close(logits, expected)
    for weights, tested_weights in zip(attention, expected_attention, strict=True):
        torch.testing.assert_close(weights, tested_weights)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 17))


@pytest.mark.book
def test_the_shown_code_runs_on_its_own(tmp_path, monkeypatch):
    """The chapter's shown code cells alone (every code cell without a folding tag: no folded
    set-up, figure, check or solution) run top to bottom in a fresh kernel, in an empty folder:
    the imports and the data are in shown cells, and the model trains. About 15 s on 2 cores."""
    from nbclient import NotebookClient

    chapter = nbformat.read(ROOT / "book" / "whole_vit.ipynb", as_version=4)
    shown = [cell for cell in chapter.cells if cell.cell_type == "code"
             and not FOLDED & set(cell.metadata.get("tags", []))]  # fmt: skip
    assert shown[0].id == "setup" and "import torch" in shown[0].source
    assert [cell.id for cell in shown if cell.id in MODEL_CELLS] == list(MODEL_CELLS)
    for name, value in {**kernel_env(), "VITBOOK_PROGRESS": "0"}.items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(cell.source) for cell in shown],
        metadata=chapter.metadata,
    )
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    printed = "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )
    assert "epoch 15:" in printed, "the shown training loop ran all its epochs"
    assert "epoch  1: training loss " in printed, "it prints the mean training loss"
    assert "18,218 parameters" in printed
