"""Training: ``fit`` and what it needs, for any ``nn.Module`` (this package imports no ViT).

- :mod:`vitbook.train.recipe`: :class:`Recipe`, what decides a run's numbers, as data.
- :mod:`vitbook.train.loop`: ``fit`` and its ``History`` (``from vitbook.train import fit``).
- :mod:`vitbook.train.evaluation`: ``evaluate`` and ``predict``, accuracy and probabilities.
- :mod:`vitbook.train.step`: one optimizer step (micro-batches, mixed precision, the guard);
  :mod:`vitbook.train.optim`: optimizers, weight-decay rules, warm-up and cosine;
  :mod:`vitbook.train.checks`: the checks of what comes in.
- :mod:`vitbook.train.resume`: a run's whole state, saved and continued bit for bit.
- :mod:`vitbook.train.distill`: DeiT's distillation losses.
- :mod:`vitbook.train.runtime`: where a chapter runs (a GPU, Colab, the data).

See chapter: Training and classification.
"""

from vitbook.data.augment import random_shift
from vitbook.train._shared import resolve_precision
from vitbook.train.evaluation import evaluate, predict
from vitbook.train.loop import History, fit
from vitbook.train.recipe import Recipe

__all__ = ["History", "Recipe", "evaluate", "fit", "predict", "random_shift", "resolve_precision"]
