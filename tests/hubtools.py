"""What the chapters download, made on disk by hand, so that their online branches run offline.

A Hugging Face Hub cache, in the layout that ``huggingface_hub`` reads (and writes when it
downloads)::

    <cache>/models--<owner>--<name>/refs/main           the commit hash of the snapshot
    <cache>/models--<owner>--<name>/snapshots/<hash>/   the repository's files

:func:`vit_cache` fills one with a random ``transformers`` ViT under a checkpoint's name, and
:func:`write_cifar10_like` writes a small ``.npz`` of CIFAR-10's shapes and layout, which
``vitbook.train.runtime`` reads in place of CIFAR-10 when ``VITBOOK_CIFAR10`` names it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

# The preprocessor_config.json of google/vit-base-patch16-224, in its older feature-extractor form.
VIT_PREPROCESSOR = {
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "ViTFeatureExtractor",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "resample": 2,
    "size": 224,
}


def add_snapshot(cache: Path, repo_id: str, folder: Path, *, preprocessor: dict | None = None):
    """Put the files of ``folder`` into ``cache`` as the ``main`` snapshot of ``repo_id``."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()  # any 40 hex digits will do
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in folder.iterdir():
        shutil.copy(path, snapshot / path.name)
    if preprocessor is not None:
        (snapshot / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def perturb_(model, scale: float) -> None:
    """Add noise of std ``scale`` to every parameter, in place, so that no bias stays at zero and
    no LayerNorm scale at one: a swapped query and key bias would otherwise go unnoticed."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * scale)


def vit_cache(folder: Path, repo_id: str, *, seed: int = 0, **config: object) -> Path:
    """A Hugging Face cache in ``folder / "hub"`` holding a random ViT as ``repo_id``.

    ``config`` sets ``transformers.ViTConfig`` fields (by default ViT-B/16 with 1000 classes);
    every parameter is perturbed (:func:`perturb_`) and the checkpoint's preprocessor config
    (:data:`VIT_PREPROCESSOR`) written beside it. Returns the ``transformers`` model.
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    config.setdefault("id2label", {k: f"class {k}" for k in range(1000)})
    config.setdefault("attn_implementation", "eager")
    model = transformers.ViTForImageClassification(transformers.ViTConfig(**config)).eval()
    perturb_(model, 0.02)
    model.save_pretrained(folder / "saved")
    add_snapshot(folder / "hub", repo_id, folder / "saved", preprocessor=VIT_PREPROCESSOR)
    shutil.rmtree(folder / "saved")
    return model


@pytest.fixture(scope="session")
def vit_b16_home(tmp_path_factory) -> Path:
    """A Hugging Face home whose cache holds a random ViT-B/16 as google/vit-base-patch16-224.

    Its labels read like ImageNet's ("class 7, synonym of class 7"). Shared by the tests of the
    session that import it: writing the 350 MB once is what takes the time.
    """
    home = tmp_path_factory.mktemp("vit-b16")
    labels = {k: f"class {k}, synonym of class {k}" for k in range(1000)}
    vit_cache(home, "google/vit-base-patch16-224", id2label=labels)
    return home


# A ViT with ViT-B/16's input and normalisation (224 px, 16 px patches), small enough to train
# on a CPU in a test: one training step of ViT-B/16 itself takes about 3.4 s per photo there.
SMALL_VIT = {
    "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
    "intermediate_size": 64, "image_size": 224, "patch_size": 16,
}  # fmt: skip


@pytest.fixture(scope="session")
def small_vit_home(tmp_path_factory) -> Path:
    """A Hugging Face home holding a small random ViT (:data:`SMALL_VIT`) under ViT-B/16's name."""
    home = tmp_path_factory.mktemp("small-vit")
    vit_cache(home, "google/vit-base-patch16-224", **SMALL_VIT)
    return home


def write_cifar10_like(path: Path, *, n_train: int, n_test: int, seed: int = 0) -> Path:
    """A ``.npz`` in CIFAR-10's layout: ``x_train`` (n_train, 32, 32, 3) uint8, ``y_train``, ...

    The photos are 32 x 32 crops of the photos that ship with matplotlib and scikit-learn,
    tinted by class so that the ten classes differ; labels cycle through 0 .. 9.
    """
    import numpy as np
    import torch

    from vitbook.data.cifar import cifar10_standin

    total = n_train + n_test
    crops = cifar10_standin(n_train=3 * -(-total // 3), n_val=3, n_test=3, seed=seed).train[0]
    labels = torch.arange(total) % 10
    tint = 0.55 + 0.45 * torch.rand(10, 3, 1, 1, generator=torch.Generator().manual_seed(seed))
    photos = (crops[:total] * tint[labels]).clamp(0, 1)  # (total, 3, 32, 32)
    pixels = (photos * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    arrays = {"x_train": pixels[:n_train], "y_train": labels[:n_train].numpy(),
              "x_test": pixels[n_train:], "y_test": labels[n_train:].numpy()}  # fmt: skip
    np.savez(path, **{name: np.ascontiguousarray(array) for name, array in arrays.items()})
    return path
