"""How far apart two computations of the same numbers may be, by the arithmetic alone.

Every floating-point format rounds to a relative step: its *unit roundoff* u, half the gap between
1 and the next number (2^-24 for fp32, 2^-11 for fp16, 2^-8 for bf16). The same model run on
another CPU, GPU, thread count or torch release sums in another order and picks other kernels, so
its outputs move by a few u times their scale; run in bf16 or fp16 they move by a few of that
format's u. The book's checks on live computations use this rule (a few units times the scale)
instead of a value seen on one machine:

- :func:`tolerance` is ``units * u(precision) * scale``;
- :func:`compare_logits` compares logits computed in a low precision with fp32 ones: the largest
  gap, the bound, and whether the predicted class is the same wherever fp32's top two logits are
  further apart than twice the bound (closer than that, rounding may decide either way).

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
        ValueError: an unknown precision, ``units`` that are not positive, or a ``scale`` that
            is negative, NaN or infinite (a size is a finite number >= 0).
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
        units: the gap in unit roundoffs of the format, times the scale (a few, when right).
        decided: how many rows have fp32's top two logits more than twice the bound apart.
        same_class: True when every decided row predicts the same class in both.
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

    Args:
        reference: fp32 logits, (B, n_cls).
        result: the same logits computed in ``precision`` (any float dtype), (B, n_cls).
        precision: ``"bf16"``, ``"fp16"`` or ``"fp32"``: the format ``result`` was computed in.
        units: how many unit roundoffs times the logits' scale the gap may reach. A forward
            pass chains many roundings; 8 leaves room for a network of a few blocks.

    Raises:
        ValueError: for logits of other shapes, an unknown precision, or a ``reference`` that
            holds inf or NaN (its scale and bound would be infinite and every gap would pass).

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
