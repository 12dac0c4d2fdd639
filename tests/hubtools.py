"""A Hugging Face Hub cache on disk, made by hand, so that the loader is tested without a network.

The layout is the one ``huggingface_hub`` reads (and writes when it downloads)::

    <cache>/models--<owner>--<name>/refs/main           the commit hash of the snapshot
    <cache>/models--<owner>--<name>/snapshots/<hash>/   the repository's files
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

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
