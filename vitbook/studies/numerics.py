"""How far apart two computations of the same numbers may be, by the arithmetic alone.

A format rounds to a relative step, its *unit roundoff* u (2^-24 for fp32, 2^-11 for fp16,
2^-8 for bf16); another machine, kernel or precision moves outputs by a few u times their
scale. :func:`tolerance` is that bound; :func:`compare_logits` checks low-precision logits
against fp32 ones with it.

See chapter: Real photos.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vitbook import _checks

__all__ = ["UNIT_ROUNDOFF", "LogitsAgreement", "compare_logits", "tolerance"]

# Half of torch.finfo(dtype).eps: the largest relative error of rounding one number.
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}


def _unit(precision: str) -> float:
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(
            f"precision={precision!r} is not one of {sorted(UNIT_ROUNDOFF)}; name the format the "
            "numbers were computed in."
        )
    return UNIT_ROUNDOFF[precision]


def tolerance(precision: str, scale: float, *, units: float = 8.0) -> float:
    """``units`` unit roundoffs of ``precision``, times ``scale`` (the size of the values).

    Raises:
        ValueError: an unknown precision, ``units`` not positive, or ``scale`` negative or not
            finite.
        TypeError: a ``scale`` that is not a number.

    Example:
        >>> tolerance("bf16", 2.0)  # 8 * 2^-8 * 2
        0.0625
    """
    _unit(precision)
    if not (isinstance(units, (int, float)) and units > 0):
        raise ValueError(f"units={units!r} must be a positive number of unit roundoffs.")
    scale = _checks.real("scale", scale, low=0, fix="pass the size of the values (the largest "
                         "absolute value, say)")  # fmt: skip
    return units * UNIT_ROUNDOFF[precision] * scale


@dataclass(frozen=True)
class LogitsAgreement:
    """Low-precision logits against fp32 ones (see :func:`compare_logits`).

    Attributes:
        gap: the largest absolute difference.
        scale: the largest absolute fp32 logit.
        bound: ``tolerance(precision, scale, units=units)``.
        units: the gap in unit roundoffs of the format, times the scale.
        decided: rows whose fp32 top two logits are more than twice the bound apart.
        same_class: every decided row predicts the same class in both.
    """

    gap: float
    scale: float
    bound: float
    units: float
    decided: int
    same_class: bool

    @property
    def holds(self) -> bool:
        """The gap is within the bound and the decided predictions agree."""
        return self.gap <= self.bound and self.same_class


def compare_logits(
    reference: torch.Tensor, result: torch.Tensor, precision: str, *, units: float = 8.0
) -> LogitsAgreement:
    """Compare logits (B, n_cls) computed in ``precision`` with the fp32 ``reference``.

    Rows whose top two fp32 logits are within twice the bound may go either way and are not
    compared for the class.

    Args:
        result: the same logits computed in ``precision`` (any float dtype).
        precision: ``"bf16"``, ``"fp16"`` or ``"fp32"``: the format ``result`` was computed in.
        units: unit roundoffs times the logits' scale the gap may reach; 8 suits a few blocks.

    Raises:
        ValueError: logits of other shapes, an unknown precision, or a ``reference`` that holds
            inf or NaN.

    Example:
        >>> ref = torch.tensor([[1.0, -0.5, 0.25]])
        >>> a = compare_logits(ref, ref.bfloat16().float(), "bf16")
        >>> a.holds, a.decided
        (True, 1)
    """
    unit = _unit(precision)
    if reference.ndim != 2 or reference.shape != result.shape:
        raise ValueError(
            f"reference and result must both be logits of shape (B, n_cls), got "
            f"{tuple(reference.shape)} and {tuple(result.shape)}."
        )
    reference, result = reference.detach().float(), result.detach().float()
    broken = (~reference.isfinite()).any(dim=1).nonzero().flatten().tolist()
    if broken:
        raise ValueError(
            f"reference holds inf or NaN (row{'s' * (len(broken) > 1)} "
            f"{', '.join(map(str, broken[:5]))}); the fp32 logits must be finite to measure "
            "a gap against: compute them again in fp32 (a model with finite weights)."
        )
    scale = reference.abs().max().item()
    gap = (result - reference).abs().max().item()
    bound = tolerance(precision, scale, units=units)
    decided = torch.ones(reference.shape[0], dtype=torch.bool)
    if reference.shape[1] > 1:
        top2 = reference.topk(2, dim=1).values
        decided = (top2[:, 0] - top2[:, 1]) > 2 * bound
    same = reference.argmax(1) == result.argmax(1)
    return LogitsAgreement(
        gap=gap, scale=scale, bound=bound, units=gap / (unit * scale) if scale else 0.0,
        decided=int(decided.sum()), same_class=bool(same[decided].all()),
    )  # fmt: skip
