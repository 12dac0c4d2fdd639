"""The recipe ladder of the photo chapter: its recorded runs, their summary, a model's read-out.

``scripts/train_cifar10.py`` trains each row of the ladder on CIFAR-10 with several seeds and
writes ``vitbook/assets/cifar10_results.json`` (:data:`RESULTS_PATH`) with its provenance; the
chapter reads it with :func:`load_results` and :func:`summarize`. :func:`readout` is what both
show of a trained photo ViT: attention rollout from the class token and the mean attention
distance of every head.

See chapter: Real photos on a GPU.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from torch import nn

from vitbook.analysis import attention_rollout, cls_rollout_map, mean_attention_distance

__all__ = ["RESULTS_PATH", "load_results", "readout", "summarize"]

# What scripts/train_cifar10.py records on a GPU: the recipe ladder, with provenance.
RESULTS_PATH = Path(__file__).parent / "assets" / "cifar10_results.json"


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """The recorded runs of ``scripts/train_cifar10.py``: ``{"runs": [...], "provenance": [...]}``.

    Raises:
        FileNotFoundError: nothing recorded at ``path`` yet, with the command that records it.
        ValueError: a file without runs or provenance.

    See chapter: Real photos on a GPU.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no recorded CIFAR-10 runs at {path}: they come from a GPU, with "
            "`python scripts/train_cifar10.py --download` (or --data cifar10.npz)."
        )
    results = json.loads(path.read_text(encoding="utf-8"))
    if not results.get("runs") or not results.get("provenance"):
        raise ValueError(f"{path} holds no runs or no provenance; record it again.")
    return results


def summarize(results: dict) -> dict[str, dict[str, float]]:
    """Per row of the ladder: seeds, mean and standard deviation of the accuracies, minutes.

    Returns:
        ``{row: {"n", "val_mean", "val_std", "test_mean", "test_std", "test_min", "test_max",
        "minutes"}}`` with the sample standard deviation (0 for one seed) and the mean minutes
        of a run.

    Example:
        >>> runs = [{"row": "a", "seed": s, "final_val_accuracy": v, "test_accuracy": t,
        ...          "minutes": 2.0} for s, v, t in ((0, 0.8, 0.79), (1, 0.82, 0.81))]
        >>> row = summarize({"runs": runs})["a"]
        >>> row["n"], round(row["test_mean"], 4), round(row["test_std"], 4)
        (2, 0.8, 0.0141)

    See chapter: Real photos on a GPU.
    """
    table: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(run["row"] for run in results["runs"]):
        runs = [run for run in results["runs"] if run["row"] == name]
        val = [run["final_val_accuracy"] for run in runs]
        test = [run["test_accuracy"] for run in runs]
        spread = statistics.stdev if len(runs) > 1 else (lambda values: 0.0)
        table[name] = {
            "n": len(runs),
            "val_mean": statistics.fmean(val),
            "val_std": spread(val),
            "test_mean": statistics.fmean(test),
            "test_std": spread(test),
            "test_min": min(test),
            "test_max": max(test),
            "minutes": statistics.fmean(run["minutes"] for run in runs),
        }
    return table


@torch.no_grad()
def readout(model: nn.Module, images: torch.Tensor, *, maps: int = 8) -> dict[str, object]:
    """Rollout maps and mean attention distances of a photo ViT, ``Normalize`` first.

    Args:
        model: ``nn.Sequential(Normalize(...), VisionTransformer(...))`` with a class token.
        images: (B, 3, H, W) photos in [0, 1]; distances are averaged over all B.
        maps: how many of the first photos get a rollout map.

    Returns:
        ``{"rollout_maps": (maps, Gh, Gw) the class token's rollout over the patches,
        "mean_attention_distance": (L, Nh) in pixels, the paper's convention}``, tensors on the
        CPU.

    Example:
        >>> from vitbook import VisionTransformer, ViTConfig
        >>> from vitbook.cifar import Normalize
        >>> vit = VisionTransformer(ViTConfig(img_size=8, patch_size=4, embed_dim=8, depth=2,
        ...                                   num_heads=2, num_classes=3))
        >>> out = readout(nn.Sequential(Normalize((0.5,) * 3, (0.5,) * 3), vit),
        ...               torch.rand(4, 3, 8, 8), maps=2)
        >>> out["rollout_maps"].shape, out["mean_attention_distance"].shape
        (torch.Size([2, 2, 2]), torch.Size([2, 2]))

    See chapter: Real photos on a GPU.
    """
    normalize, vit = model[0], model[1]
    vit.eval()
    config = vit.config
    _, attentions = vit.forward_with_attention(normalize(images))  # L x (B, Nh, N, N)
    distances = torch.stack(
        [mean_attention_distance(a, config.grid_size, config.patch_size) for a in attentions]
    )  # (L, Nh)
    rollout = attention_rollout([a[:maps] for a in attentions])  # (maps, N, N)
    return {
        "rollout_maps": cls_rollout_map(rollout, config.grid_size).cpu(),
        "mean_attention_distance": distances.cpu(),
    }
