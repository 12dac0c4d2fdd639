"""Every branch of the chapters that behave differently where they run, executed on this CPU.

A chapter that needs a GPU, a download or Colab runs its stand-in branch everywhere the book is
built and tested; nbval runs that one (tests/test_book.py). This module runs the others, with the
chapter's own cells and its own asserts, steered from outside the notebook:

- a GPU: ``VITBOOK_SIMULATE_GPU=fp16``, which makes ``vitbook.train.runtime.detect_runtime`` report
a
  T4's branch (fp16 mixed precision) and run it on the CPU;
- CIFAR-10: ``VITBOOK_CIFAR10``, a ``.npz`` of 170 photos of CIFAR-10's shapes and layout
  (``hubtools.write_cifar10_like``), or a missing file for "no data";
- a checkpoint: a Hugging Face cache on disk holding a random ViT under the checkpoint's name
  (``hubtools.vit_cache``), ``HF_HUB_OFFLINE=1`` always; "no checkpoint" renames its folder in
  the cache away for the branch;
- Colab: a cell run before the chapter's puts a module ``google.colab`` in ``sys.modules`` and
  replaces the ``%pip`` magic by one that records its arguments, so the install cell takes its
  Colab path without installing anything. Colab branches run the generated Colab copy.

To stay cheap, a branch runs the install and set-up cells (the code cells before the first section)
and the cells of the section that branches, not the whole chapter, and the branches of a chapter
run one after another in one kernel (a cell before each puts the kernel where the branch runs), so
that the imports are paid once. The fine-tuning chapter's checkpoint is a ViT with ViT-B/16's input
(224 px, 16 px patches, the checkpoint's normalisation) but 1 block of width 32
(``hubtools.SMALL_VIT``): on this CPU one training step of ViT-B/16 itself took 13.7 s for 4 photos
in fp32 and 395 s in fp16, which autocast computes there without fast kernels. The pretrained
chapter's online branch asserts ViT-B/16's own sizes, so it runs on a random ViT-B/16, every cell.
Each test prints the seconds its branch took in the kernel.
"""

from __future__ import annotations

import ast
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from booktools import ROOT, kernel_env
from hubtools import small_vit_home, vit_b16_home, write_cifar10_like  # noqa: F401 (fixtures)

from vitbook.pretrained import DEFAULT_CHECKPOINT

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import colab  # noqa: E402  (book/_ext is Sphinx's extension folder, not a package)

pytestmark = pytest.mark.book
transformers = pytest.importorskip("transformers")

SWITCHES = ("VITBOOK_SIMULATE_GPU", "VITBOOK_CIFAR10")
REPO_FOLDER = "models--" + DEFAULT_CHECKPOINT.replace("/", "--")  # in a Hugging Face cache


def where(switches: dict[str, str], *, in_colab: bool, checkpoint: bool = True) -> str:
    """A cell that puts the kernel where a branch runs: the switches, Colab, the checkpoint.

    Colab: a module ``google.colab`` in ``sys.modules``, and a ``%pip`` that records its
    arguments in ``PIP_CALLS`` instead of installing. No checkpoint: its folder in the Hugging
    Face cache is renamed away, as if it had never been downloaded (and renamed back after).
    """
    return f"""import os
import sys
import types
from pathlib import Path

for name in {SWITCHES!r}:
    os.environ.pop(name, None)
os.environ.update({switches!r})
PIP_CALLS = []
get_ipython().register_magic_function(PIP_CALLS.append, "line", "pip")
if {in_colab!r}:
    sys.modules["google.colab"] = types.ModuleType("google.colab")
else:
    sys.modules.pop("google.colab", None)
repo = Path(os.environ.get("HF_HUB_CACHE", "no-cache")) / {REPO_FOLDER!r}
hidden = repo.with_name(repo.name + ".hidden")
if {checkpoint!r} and hidden.exists():
    hidden.rename(repo)
elif not {checkpoint!r} and repo.exists():
    repo.rename(hidden)"""


SHOW_PIP = 'print(f"pip calls: {PIP_CALLS!r}")'  # one write: one stream output
END = "=== the end of a branch ==="


@dataclass
class Branch:
    """One place a chapter can run, and the cells that run there.

    ``switches``: the environment variables of vitbook.train.runtime; ``in_colab``: Colab or not;
    ``checkpoint``: whether the Hugging Face cache holds the checkpoint; ``heading``: the
    section whose code cells run after the install and set-up cells (None: every cell).
    """

    name: str
    heading: str | None
    switches: dict[str, str] = field(default_factory=dict)
    in_colab: bool = False
    checkpoint: bool = True


def text(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def chapter(page: str, *, in_colab: bool) -> nbformat.NotebookNode:
    """The chapter as a reader runs it: the source, or in Colab the generated copy."""
    if not in_colab:
        return nbformat.read(ROOT / f"{page}.ipynb", as_version=4)
    book = colab.load_book(ROOT)
    book.commit = colab.source_commit(ROOT)
    return nbformat.from_dict(colab.convert_notebook(book, page))


def section_cells(notebook, heading: str) -> list:
    """The code cells of the section under ``## heading``, up to the next ``## `` heading."""
    cells, inside = [], False
    for cell in notebook.cells:
        lines = text(cell).splitlines() if cell.cell_type == "markdown" else []
        if any(line.startswith("## ") for line in lines):
            inside = f"## {heading}" in lines
        elif inside and cell.cell_type == "code":
            cells.append(cell)
    assert cells, f"no code cells under '## {heading}'"
    return cells


def preamble_cells(notebook) -> list:
    """The code cells before the first section after "What you will learn": install, set-up."""
    cells = []
    for cell in notebook.cells:
        lines = text(cell).splitlines() if cell.cell_type == "markdown" else []
        if any(line.startswith("## ") and line != "## What you will learn" for line in lines):
            return cells
        if cell.cell_type == "code":
            cells.append(cell)
    raise AssertionError("a chapter without sections")


def copy_of(cell) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(text(cell))  # a fresh id: a cell may run more than once


def run_branches(page: str, branches: list[Branch], monkeypatch, *, cache: Path):
    """Run a chapter's branches one after another in one kernel; ``{name: (shown, seconds)}``.

    Each branch runs the chapter's install and set-up cells (:func:`preamble_cells`) and the
    code cells of its section (every code cell without one), from the generated copy in Colab,
    after a cell that puts the kernel where the branch runs (:func:`where`). One kernel serves
    them all, so that the imports are paid once. ``cache`` is the Hugging Face home (its
    ``hub`` the cache). ``shown`` is what the branch's cells printed or showed, text and HTML.
    """
    from nbclient import NotebookClient

    cells, spans = [], {}
    for branch in branches:
        notebook = chapter(page, in_colab=branch.in_colab)
        chosen = [cell for cell in notebook.cells if cell.cell_type == "code"]
        if branch.heading is not None:
            chosen = [*preamble_cells(notebook), *section_cells(notebook, branch.heading)]
        first = len(cells)
        prelude = where(branch.switches, in_colab=branch.in_colab, checkpoint=branch.checkpoint)
        cells += [nbformat.v4.new_code_cell(prelude), *map(copy_of, chosen),
                  nbformat.v4.new_code_cell(SHOW_PIP)]  # fmt: skip
        spans[branch.name] = (first, len(cells))
    for name, value in {**kernel_env(), "VITBOOK_STATIC_FIGURES": "0", "VITBOOK_PROGRESS": "0",
                        "HF_HUB_OFFLINE": "1", "HF_HOME": str(cache),
                        "HF_HUB_CACHE": str(cache / "hub")}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    for name in (*SWITCHES, "MPLBACKEND"):
        monkeypatch.delenv(name, raising=False)
    metadata = chapter(page, in_colab=False).metadata  # its kernel
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=metadata)
    repo = cache / "hub" / REPO_FOLDER
    try:
        NotebookClient(
            notebook, timeout=300, kernel_name="python3",
            resources={"metadata": {"path": str(ROOT / "book")}},
        ).execute()  # fmt: skip
    finally:  # the cache is shared with other tests
        hidden = repo.with_name(repo.name + ".hidden")
        if hidden.exists():
            hidden.rename(repo)
    results = {}
    for name, (first, last) in spans.items():
        shown = []
        for cell in notebook.cells[first:last]:
            for output in cell.get("outputs", []):
                shown.append(output.get("text", ""))
                shown.append(output.get("data", {}).get("text/plain", ""))
                shown.append(output.get("data", {}).get("text/html", ""))
        timing = [notebook.cells[i].metadata["execution"] for i in (first, last - 1)]
        seconds = (stamp(timing[1]["shell.execute_reply"])
                   - stamp(timing[0]["iopub.execute_input"])).total_seconds()  # fmt: skip
        results[name] = ("\n".join(shown), seconds)
    return results


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def notes(shown: str) -> list[str]:
    """The text of each boxed note (vitbook.train.runtime.note) that the cells showed."""
    return [part.split("</div>")[0] for part in shown.split('<div class="admonition note">')[1:]]


def pip_calls(shown: str) -> list[str]:
    """The pip calls that SHOW_PIP printed (a kernel may split a print into several stream
    outputs, which ``shown`` joins with newlines)."""
    found = re.search(r"pip calls:\s*(\[.*?\])\s*$", shown, re.M)
    assert found, f"SHOW_PIP printed nothing: {shown[-500:]}"
    return ast.literal_eval(found[1])


def installs_this_commit(shown: str) -> None:
    """The copy's install cell took its Colab path: one pip call, for this commit."""
    url = colab.read_config(ROOT)["repository"]["url"]
    assert pip_calls(shown) == [f'install -q "vitbook @ git+{url}@{colab.source_commit(ROOT)}"']


# --- the Colab install cell, in every copy ---------------------------------------------------


def test_every_copys_install_cell_installs_its_commit_in_colab_only(monkeypatch):
    from nbclient import NotebookClient

    book = colab.load_book(ROOT)
    book.commit = colab.source_commit(ROOT)
    pages = colab.chapters(book)
    installs = [colab.convert_notebook(book, page)["cells"][0]["source"] for page in pages]
    for name, value in kernel_env().items():
        monkeypatch.setenv(name, value)
    cells = [where({}, in_colab=False), *installs, where({}, in_colab=True), *installs, SHOW_PIP]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    start = time.monotonic()
    NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    shown = "\n".join(out.get("text", "") for cell in notebook.cells for out in cell.outputs)
    url = colab.read_config(ROOT)["repository"]["url"]
    expected = f'install -q "vitbook @ git+{url}@{book.commit}"'
    # Outside Colab (the first round) nothing; in Colab, one install per chapter.
    assert pip_calls(shown) == [expected] * len(pages) and len(pages) >= 10
    print(f"install cells of {len(pages)} copies: {time.monotonic() - start:.1f} s")


# --- A pretrained ViT: online and offline ------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained_branches(vit_b16_home):  # noqa: F811
    """The pretrained chapter online (every cell, a random ViT-B/16), offline, offline in Colab."""
    loading = "Loading ViT-B/16"
    branches = [
        Branch("online", None),
        Branch("offline", loading, checkpoint=False),
        Branch("offline in Colab", loading, in_colab=True, checkpoint=False),
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_branches("book/pretrained", branches, monkeypatch, cache=vit_b16_home)


def test_pretrained_online_runs_every_cell_on_vit_b16(pretrained_branches):
    shown, seconds = pretrained_branches["online"]
    assert f"model: {DEFAULT_CHECKPOINT}\n" in shown
    assert "224 x 224 pixels, 14 x 14 patches of 16 x 16, D = 768\n12 blocks of 12 heads" in shown
    assert "86,567,656 parameters, 1000 classes" in shown and "grace_hopper\n" in shown
    assert re.search(r"%  class \d+\n", shown), "the top 5 name the checkpoint's classes"
    assert not notes(shown), "the note is for runs without a network only"
    assert "digits" not in shown and "Exercise 2: correct" in shown
    print(f"pretrained, online (ViT-B/16, every cell): {seconds:.1f} s")


@pytest.mark.parametrize("name", ["offline", "offline in Colab"])
def test_pretrained_offline_says_so_in_the_words_of_where_it_runs(pretrained_branches, name):
    shown, seconds = pretrained_branches[name]
    (shown_note,) = notes(shown)
    assert "Without a network: the digits ViT stands in for ViT-B/16" in shown_note
    assert "there was no network where these cells ran" in shown_note
    if name == "offline in Colab":
        assert "check the runtime&#x27;s connection and run the notebook again" in shown_note
        assert "open the chapter in Colab" not in shown_note
        installs_this_commit(shown)
    else:
        assert "open the chapter in Colab, or run it with a network" in shown_note
        assert pip_calls(shown) == []
    for log_text in ("HF_HUB_OFFLINE", "Error", "error", "Traceback", "huggingface_hub", "http"):
        assert log_text not in shown_note, f"the note reads like a log: {log_text!r}"
    assert "model: vitbook digits ViT (" in shown
    print(f"pretrained, {name}: {seconds:.1f} s")


# --- Fine-tuning a pretrained ViT: a T4 in Colab, no GPU, no data, no checkpoint ---------------

VIT_SECTION = "ViT-B/16 on CIFAR-10"


@pytest.fixture(scope="module")
def cifar10_file(tmp_path_factory) -> Path:
    """170 photos of CIFAR-10's shapes and layout: 150 for training, 20 for testing."""
    return write_cifar10_like(tmp_path_factory.mktemp("cifar") / "cifar10.npz",
                              n_train=150, n_test=20)  # fmt: skip


@pytest.fixture(scope="module")
def finetuning_branches(small_vit_home, cifar10_file):  # noqa: F811
    """Every branch of the fine-tuning chapter's ViT-B/16 section, in one kernel."""
    t4 = {"VITBOOK_SIMULATE_GPU": "fp16", "VITBOOK_CIFAR10": str(cifar10_file)}
    no_data = {**t4, "VITBOOK_CIFAR10": str(cifar10_file.parent / "missing.npz")}
    branches = [
        Branch("a T4 in Colab", VIT_SECTION, t4, in_colab=True),
        Branch("no GPU in Colab", VIT_SECTION, in_colab=True),
        Branch("a GPU without the data", VIT_SECTION, no_data),
        Branch("no checkpoint", VIT_SECTION, checkpoint=False),
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_branches("book/finetuning", branches, monkeypatch, cache=small_vit_home)


def one_epoch_lines(shown: str) -> dict[str, list[float]]:
    """{method: mean training loss of each epoch}, as the chapter prints them."""
    found = re.findall(r"(linear probe|fine-tune): mean training loss per epoch ([0-9., ]+)\n",
                       shown)  # fmt: skip
    assert [method for method, _ in found] == ["linear probe", "fine-tune"], shown[-3000:]
    return {method: [float(x) for x in losses.split(", ")] for method, losses in found}


def test_finetuning_on_a_t4_in_colab_follows_the_authors_recipe(
    finetuning_branches, cifar10_file
):
    """The Colab reader's run: a T4 (fp16), the checkpoint, CIFAR-10, the copy's install cell."""
    shown, seconds = finetuning_branches["a T4 in Colab"]
    installs_this_commit(shown)
    assert "a GPU: a simulated GPU (fp16 on the CPU) (cpu), training in fp16, in Colab" in shown
    assert not notes(shown), "the real run needs no note"
    assert f"model: {DEFAULT_CHECKPOINT}, 10 classes" in shown
    assert f"data: npz file {cifar10_file}\n  140 training, 10 validation, 20 test" in shown
    assert "logits all zero: True; loss 2.302585, ln 10 = 2.302585" in shown
    losses = one_epoch_lines(shown)
    assert all(len(epochs) == 1 for epochs in losses.values()), "one pass each"
    assert shown.count("validation accuracy ") == 2
    assert len(re.findall(r" min on .* in fp16\n", shown)) == 2
    assert "paper, Table 5" in shown and "98.95%" in shown, "the test table beside the paper's"
    assert "transformers: " in shown and "new head (10, 32)" in shown, "from the cache"
    assert "timm: not loaded here, not installed" in shown
    print(f"fine-tuning, a T4 in Colab with the data: {seconds:.1f} s")


def test_finetuning_without_a_gpu_in_colab_tells_the_reader_to_switch(
    finetuning_branches,
):
    shown, seconds = finetuning_branches["no GPU in Colab"]
    installs_this_commit(shown)
    (shown_note,) = notes(shown)
    assert "Without a GPU, the cells below train ViT-B/16 for three steps" in shown_note
    assert "Choose Runtime &gt; Change runtime type &gt; T4 GPU" in shown_note
    assert "open the chapter in Colab" not in shown_note.lower()
    assert "model: google/vit-base-patch16-224, 3 classes" in shown
    assert "logits all zero: True; loss 1.098612, ln 3 = 1.098612" in shown
    for method, epochs in one_epoch_lines(shown).items():
        assert len(epochs) == 3 and epochs[-1] < epochs[0], method
    print(f"fine-tuning, the checkpoint without a GPU, in Colab: {seconds:.1f} s")


def test_finetuning_on_a_gpu_without_the_data_says_what_is_missing(
    finetuning_branches,
):
    shown, seconds = finetuning_branches["a GPU without the data"]
    assert pip_calls(shown) == [], "not in Colab: nothing installed"
    (shown_note,) = notes(shown)
    assert "Without CIFAR-10, the cells below train ViT-B/16 for three steps" in shown_note
    assert "Open the chapter in Colab with a GPU runtime" in shown_note
    for log_text in ("Error", "Traceback", "missing.npz", "http"):
        assert log_text not in shown_note
    assert len(re.findall(r" min on .* in fp16\n", shown)) == 2, "the GPU's precision, here too"
    print(f"fine-tuning, a GPU without CIFAR-10: {seconds:.1f} s")


def test_finetuning_without_the_checkpoint_trains_a_small_stand_in(finetuning_branches):
    """The branch of the HTML book and of nbval: no GPU, no network, no checkpoint."""
    shown, seconds = finetuning_branches["no checkpoint"]
    (shown_note,) = notes(shown)
    assert ("Without a GPU and without the ViT-B/16 checkpoint, the cells below train a small "
            "untrained ViT for three steps") in shown_note  # fmt: skip
    assert "model: an untrained 2-block ViT (stand-in), 3 classes" in shown
    assert "transformers: not loaded here, offline" in shown
    for method, epochs in one_epoch_lines(shown).items():
        assert epochs[-1] < epochs[0], method
    print(f"fine-tuning, no checkpoint and no GPU: {seconds:.1f} s")


# --- Real photos: a T4 in Colab with the data, a GPU without it ----------------------


@pytest.fixture(scope="module")
def photos_branches(tmp_path_factory):
    """The photo chapter on a GPU with 50 CIFAR-shaped photos (every cell, in Colab), and on a
    GPU without the data (the section that picks the device and the data).

    The GPU trains in fp32 here: the branch trains the photo ViT for 30 epochs, and on this CPU
    one step of 10 photos took 15 s in fp16 against 1.0 s in fp32 (autocast has no fast fp16
    kernels here). fp16 itself runs in the fine-tuning chapter's T4 branch.
    """
    folder = tmp_path_factory.mktemp("photos")
    data = write_cifar10_like(folder / "cifar10.npz", n_train=40, n_test=10)
    gpu = {"VITBOOK_SIMULATE_GPU": "fp32", "VITBOOK_CIFAR10": str(data)}
    no_data = {"VITBOOK_SIMULATE_GPU": "fp16", "VITBOOK_CIFAR10": str(folder / "missing.npz")}
    branches = [
        Branch("a GPU in Colab with the data", None, gpu, in_colab=True),
        Branch("a GPU without the data", "Three ways to run this chapter", no_data),
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        return data, run_branches("book/photos", branches, monkeypatch, cache=folder / "no-hub")


def test_photos_on_a_gpu_in_colab_train_for_real(photos_branches):
    data, results = photos_branches
    shown, seconds = results["a GPU in Colab with the data"]
    installs_this_commit(shown)
    assert ("Live cells: the shipped photos, then all of CIFAR-10 on a simulated GPU (fp32 on "
            "the CPU),") in shown  # fmt: skip
    assert f"with npz file {data}." in shown
    assert "30 training, 10 validation, 10 test photos of 10 classes" in shown
    assert re.search(r"\nepoch 4: loss [0-9.]+, validation accuracy [0-9.]+\n", shown)  # yours
    assert re.search(r"\n30 epochs in fp32, [0-9.]+ minutes; validation accuracy", shown)
    assert re.search(r"\ntest accuracy: [0-9.]+\n", shown), "the test set, read once"
    print(f"photos, a GPU in Colab with the data (every cell): {seconds:.1f} s")


def test_photos_on_a_gpu_without_the_data_fall_back_and_say_why(photos_branches):
    data, results = photos_branches
    shown, seconds = results["a GPU without the data"]
    assert pip_calls(shown) == []
    assert "Live cells: the shipped photos (" in shown and "missing.npz does not exist" in shown
    assert "4500 training, 500 validation, 1000 test photos of 10 classes" in shown
    print(f"photos, a GPU without the data: {seconds:.1f} s")
