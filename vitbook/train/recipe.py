"""A training recipe as data: what decides a run's numbers, in one frozen, checked value.

``fit(model, data, recipe)`` trains by a :class:`Recipe`, or by one made of its keywords
(``fit(model, data, epochs=20, lr=0.1)``); augmentation, mix, loss, device and the rest are
``fit``'s own arguments. A recipe checks its values when made; what depends on the data or the
processes, ``fit`` checks.

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
        weight_decay: decoupled for AdamW (DeiT: 0.05).
        batch_size: images per optimizer step (an epoch's last batch may be smaller).
        seed: seeds the order, the augmentation and torch's generators (dropout).
        warmup_epochs: epochs of linear warm-up; ``None``: 1, unless ``warmup_steps`` is given.
        warmup_steps: optimizer steps of warm-up instead; give one of the two.
        label_smoothing: 0.1 in DeiT.
        optimizer: ``"adamw"`` or ``"sgd"`` (momentum 0.9).
        weight_decay_rule: ``"all"``, or ``"timm"`` (biases, norms, positions, tokens spared).
        clip_grad_norm: the global gradient norm to clip at (the ViT paper: 1.0); ``None``.
        accumulate: micro-batches per optimizer step, weighted to the whole batch's gradient.
        repeated_augmentation: r > 1 shows about ``len(train_data) / r`` images r times each
            per epoch, side by side in the order (DeiT's ``RASampler``); 1 is plain shuffling.
        precision: ``"auto"`` (resolved by ``fit`` for its device), ``"fp32"``, ``"bf16"`` or
            ``"fp16"``.

    Plain data: equal fields give equal recipes and equal :meth:`to_dict`, however made. A
    recorded layout of some fields uses ``to_dict(keys=...)``; :meth:`from_dict` reads either.

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
    """Refuse a name that is not a field (``unknown`` begins the message), suggesting the
    closest; with ``missing``, refuse fields without ``epochs`` too."""
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
