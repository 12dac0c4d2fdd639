"""A training recipe as data: what decides a run's numbers, in one frozen, checked value.

``fit(model, data, recipe)`` trains by a :class:`Recipe`; the keywords of a call
(``fit(model, data, epochs=20, lr=0.1)``) make one too. What a run does besides (the augmentation,
the mix, the loss, the evaluation data, the device, compiling, progress, saving and resuming) is
not the recipe: those are ``fit``'s own arguments, and they change how a run goes, not which
numbers it gives.

A recipe checks its values when it is made, so a mistake is reported before anything trains,
naming the field, the value and the fix. What depends on the data or on the processes (a batch
that ``accumulate`` micro-batches cannot split, a batch that ``torchrun``'s processes cannot share)
is checked by ``fit``.

See chapter: Training and classification.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from vitbook import _checks
from vitbook.train.optim import OPTIMIZERS, WEIGHT_DECAY_RULES

__all__ = ["PRECISIONS", "Recipe", "check_names"]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # "auto": fit resolves it for its device


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What decides a training run's numbers (the arguments of :func:`vitbook.train.fit`).

    Fields:
        epochs: passes over the training images.
        lr: the peak learning rate.
        weight_decay: the optimizer's weight decay (decoupled for AdamW). DeiT uses 0.05; the
            ViT paper pre-trains with 0.3, 0.03 or 0.1 and fine-tunes with 0.
        batch_size: images per optimizer step (the last batch of an epoch may be smaller).
        seed: seeds the order, the augmentation and torch's generators (dropout).
        warmup_epochs: epochs of linear warm-up (0 for none); ``None`` means 1, unless
            ``warmup_steps`` is given.
        warmup_steps: optimizer steps of linear warm-up instead (the ViT authors warm up over
            500); give one of the two.
        label_smoothing: 0.1 in DeiT.
        optimizer: ``"adamw"`` or ``"sgd"`` (momentum 0.9, as the ViT paper fine-tunes).
        weight_decay_rule: ``"all"`` decays every trained parameter; ``"timm"`` spares biases,
            norms, position embeddings and tokens, as timm and DeiT do.
        clip_grad_norm: the global gradient norm to clip at (1.0 in the ViT paper); ``None``.
        accumulate: micro-batches per optimizer step (gradient accumulation): each step adds up
            the gradients of ``accumulate`` micro-batches of about ``batch_size / accumulate``
            images, weighted so that the sum is the gradient of the whole batch (a BatchNorm
            still normalises each micro-batch by its own statistics); activation memory is that
            of one micro-batch. The ViT authors' batch of 512 is 8 micro-batches of 64.
        repeated_augmentation: DeiT's repeated augmentation: each epoch shows about
            ``len(train_data) / r`` distinct images ``r`` times each, the copies next to each
            other in the order (so in the same batch, as DeiT's ``RASampler`` puts them in the
            same step across its processes), each augmented on its own; the epoch keeps its
            length. 1 (the default) is plain shuffling.
        precision: ``"auto"`` (bf16 on recent GPUs, fp16 on older ones, fp32 on the CPU),
            ``"fp32"``, ``"bf16"`` or ``"fp16"``; ``fit`` resolves ``"auto"`` once, for its device.

    A recipe is plain data: two recipes of equal fields are equal and write the same
    :meth:`to_dict`, however they were made (``Recipe.replace`` and ``dataclasses.replace``
    alike). A recorded layout that names only some fields names its keys beside its recipe
    (``to_dict(keys=...)``, as :data:`vitbook.studies.experiments.RECORDED_FIELDS`);
    :meth:`from_dict` reads either back.

    Raises:
        TypeError, ValueError: a field of the wrong type or out of range, named with the fix.

    Example:
        >>> recipe = Recipe(epochs=100, lr=5e-3, warmup_epochs=5, label_smoothing=0.1)
        >>> recipe.to_dict(keys=("epochs", "lr", "warmup_epochs", "label_smoothing"))
        {'epochs': 100, 'lr': 0.005, 'warmup_epochs': 5, 'label_smoothing': 0.1}
        >>> len(recipe.to_dict()) == len(Recipe.names())
        True
        >>> recipe.replace(seed=3).seed, recipe.weight_decay
        (3, 0.05)
        >>> Recipe.from_dict(recipe.to_dict()) == recipe
        True

    See chapter: Training and classification.
    """

    epochs: int
    lr: float = 1e-3
    weight_decay: float = 0.05
    batch_size: int = 64
    seed: int = 0
    warmup_epochs: int | None = None
    warmup_steps: int | None = None
    label_smoothing: float = 0.0
    optimizer: str = "adamw"
    weight_decay_rule: str = "all"
    clip_grad_norm: float | None = None
    accumulate: int = 1
    repeated_augmentation: int = 1
    precision: str = "auto"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int; use e.g. {name}=10.")
        if self.warmup_epochs is not None and self.warmup_steps is not None:
            raise ValueError(
                f"warmup_epochs={self.warmup_epochs!r} and warmup_steps={self.warmup_steps!r} "
                "both set the warm-up; pass one of them (warmup_steps counts optimizer steps)."
            )
        if self.warmup_epochs is not None:
            _checks.integer("warmup_epochs", self.warmup_epochs, fix="use 0 for no warm-up")
        if self.warmup_steps is not None:
            _checks.integer("warmup_steps", self.warmup_steps, fix="the ViT authors use 500")
        _checks.integer("seed", self.seed, minimum=-(2**64))  # an int; its range is torch's:
        if not -(2**63) <= self.seed < 2**64:  # torch.manual_seed takes a 64-bit (un)signed int
            raise ValueError(f"seed={self.seed} is outside torch's seeds, -2**63 <= seed < 2**64; "
                             "use e.g. seed=0.")  # fmt: skip
        lr = _checks.real("lr", self.lr, fix="1e-3 is a good start for AdamW")
        if not lr > 0:
            raise ValueError(f"lr={lr!r} must be positive; 1e-3 is a good start for AdamW.")
        _checks.real(
            "weight_decay",
            self.weight_decay,
            low=0,
            fix="DeiT uses 0.05; the ViT paper 0.3, 0.03 or 0.1, and 0 to fine-tune",
        )
        _checks.real("label_smoothing", self.label_smoothing, low=0, high=1, open_high=True,
                     fix="DeiT uses 0.1")  # fmt: skip
        _checks.choice("optimizer", self.optimizer, OPTIMIZERS)
        _checks.choice("weight_decay_rule", self.weight_decay_rule, WEIGHT_DECAY_RULES)
        if self.clip_grad_norm is not None:
            _checks.real("clip_grad_norm", self.clip_grad_norm, low=0, open_low=True,
                         fix="the ViT paper clips at 1.0")  # fmt: skip
        _checks.integer("accumulate", self.accumulate, minimum=1, fix="use 1 for no accumulation")
        _checks.integer("repeated_augmentation", self.repeated_augmentation, minimum=1,
                        fix="use 1 for none, 3 as DeiT")  # fmt: skip
        _checks.choice("precision", self.precision, PRECISIONS)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The fields, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes: object) -> Recipe:
        """A copy with ``changes`` (as ``dataclasses.replace``); an unknown name is refused."""
        check_names(changes, unknown="Recipe has no field")
        return dataclasses.replace(self, **changes)

    def to_dict(self, *, keys: Iterable[str] | None = None) -> dict[str, object]:
        """Every field in field order, or only ``keys``, in their order (a recorded layout)."""
        names = self.names() if keys is None else tuple(keys)
        unknown = sorted(set(names) - set(self.names()))
        if unknown:
            raise ValueError(
                f"keys={names!r} names {', '.join(map(repr, unknown))}, which is not a field of "
                f"Recipe ({', '.join(self.names())})."
            )
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_dict(cls, fields: dict[str, object]) -> Recipe:
        """The recipe of :meth:`to_dict`'s layout; an unknown key is refused, naming it."""
        if not isinstance(fields, dict):
            raise TypeError(f"a recipe is a dict of fields, got {type(fields).__name__}.")
        unknown = sorted(set(fields) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"the recipe names {', '.join(map(repr, unknown))}, which is not a field of "
                f"Recipe ({', '.join(cls.names())}); keep what is not the recipe (an "
                "augmentation's name, the model) beside it, not in it."
            )
        return cls(**fields)


def check_names(fields: Iterable[str], *, unknown: str, missing: str | None = None) -> None:
    """Refuse a name that is not a field (``unknown`` begins the message), with the closest
    fields and the list of them; with ``missing``, refuse fields without ``epochs`` too."""
    names = Recipe.names()
    listed = f"the recipe's fields are {', '.join(names)}"
    for name in fields:
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise TypeError(f"{unknown} {name!r}{hint} ({listed}).")
    if missing is not None and "epochs" not in fields:
        raise TypeError(f"{missing} missing 1 required keyword-only argument: 'epochs' (or pass "
                        f"a Recipe); {listed}, all but epochs with a default.")  # fmt: skip


def _naming_the_fields(init: object) -> object:
    """The dataclass's ``__init__``, refusing a wrong or missing name in the recipe's words."""

    @functools.wraps(init)
    def __init__(self: Recipe, *args: object, **fields: object) -> None:
        if args:
            raise TypeError(f"Recipe takes its fields as keywords only (Recipe(epochs=10, "
                            f"lr=1e-3)), got {len(args)} positional; its fields are "
                            f"{', '.join(Recipe.names())}.")  # fmt: skip
        check_names(fields, unknown="Recipe() got an unexpected keyword argument",
                    missing="Recipe()")  # fmt: skip
        init(self, **fields)

    return __init__


Recipe.__init__ = _naming_the_fields(Recipe.__init__)
