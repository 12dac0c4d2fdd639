"""Paired comparisons of two recorded settings over the same seeds.

The book's recorded results run every setting with the same seeds, and a seed fixes the data's
order (and, where two settings build the same model, its initial weights), so the fair question
is not "is mean A above mean B" but "how far apart are A and B seed by seed, and could that be
noise". :func:`paired_difference` answers it: the mean of the per-seed differences A - B, its
standard error, a 95% interval from Student's t with n - 1 degrees of freedom, and how many
seeds agree in sign. Where the interval holds 0 the data cannot tell the two settings apart,
and a sentence of the book that compares them must say so (:meth:`PairedDifference.verdict`).

See chapter: Can a ViT beat the CNN that taught it?
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PairedDifference", "paired_difference", "t_quantile_975"]

# Student's t, the 97.5% point, for 1 to 30 degrees of freedom (two-sided 95%), to 3 decimals.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """Student's t at 0.975 for ``df`` degrees of freedom: the half-width of a 95% interval in
    standard errors. Exact to 3 decimals up to 30; beyond, the first terms of the Cornish-Fisher
    expansion about the normal quantile 1.95996 (within 0.001 of the exact value).

    Example:
        >>> t_quantile_975(4)
        2.776
    """
    if isinstance(df, bool) or not isinstance(df, int):
        raise TypeError(f"df must be an int, got {type(df).__name__}.")
    if df < 1:
        raise ValueError(f"df={df}: a t interval needs at least 1 degree of freedom (2 seeds).")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class PairedDifference:
    """A - B over the seeds both were recorded with.

    Attributes:
        n: how many seeds are paired.
        mean: the mean of the per-seed differences A - B.
        se: its standard error (sd of the differences / sqrt(n)); None for one seed.
        low, high: the 95% interval of the mean difference (Student's t, n - 1 degrees of
            freedom); None for one seed.
        positive, negative: how many seeds have A above B, and below (ties count in neither).
        differences: the per-seed differences, by seed.
    """

    n: int
    mean: float
    se: float | None
    low: float | None
    high: float | None
    positive: int
    negative: int
    differences: dict[int, float]

    @property
    def tells(self) -> bool:
        """True when the 95% interval excludes 0: the seeds support an order of A and B."""
        return self.low is not None and (self.low > 0 or self.high < 0)

    @property
    def agree(self) -> int:
        """How many seeds agree in sign with the mean difference."""
        return self.positive if self.mean > 0 else self.negative if self.mean < 0 else 0

    def describe(self, *, scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
        """The difference as the book writes it, in percentage points by default:
        ``+2.4 points (95% interval -4.9 to +9.7; 3 of 5 seeds agree)``."""
        mean = _signed(self.mean, scale, digits)
        if self.low is None:
            return f"{mean}{unit} (one seed: no interval)"
        low, high = _signed(self.low, scale, digits), _signed(self.high, scale, digits)
        return f"{mean}{unit} (95% interval {low} to {high}; {self.agree} of {self.n} seeds agree)"

    def cell(self, *, scale: float = 100.0, digits: int = 1) -> str:
        """The difference as a table cell of three short lines: the mean, the 95% interval and
        how many seeds agree in sign (``+2.4``, ``-4.9 to +9.7``, ``3 of 5``). The cell wraps
        between its lines, never inside a number, so that a table of them fits a phone."""
        mean = _signed(self.mean, scale, digits)
        if self.low is None:
            return f"{mean}\none seed"
        low, high = _signed(self.low, scale, digits), _signed(self.high, scale, digits)
        return f"{mean}\n{low} to {high}\n{self.agree} of {self.n}"

    def verdict(self, a: str, b: str) -> str:
        """One sentence: which setting the seeds put ahead, or that they cannot tell."""
        if self.tells:
            ahead, behind = (a, b) if self.mean > 0 else (b, a)
            return f"{ahead} is ahead of {behind}: {self.describe()}."
        return f"the seeds cannot tell {a} from {b}: {a} - {b} = {self.describe()}."


def _signed(value: float, scale: float, digits: int) -> str:
    """``value * scale`` with its sign and a true minus sign; 0.0 without a sign."""
    text = f"{value * scale:+.{digits}f}"
    return "0.0" if float(text) == 0 else text.replace("-", "\u2212")


def _by_seed(values: Mapping[int, float], name: str) -> dict[int, float]:
    if not isinstance(values, Mapping):
        raise TypeError(
            f"{name} must map seed -> value (a dict such as {{0: 0.91, 1: 0.89}}), got "
            f"{type(values).__name__}; pairing by position would pair the wrong seeds."
        )
    out = {}
    for seed, value in values.items():
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"{name}: seeds must be ints, got {seed!r} ({type(seed).__name__}).")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name}: seed {seed} has the value {value}; a paired difference "
                             "needs finite values (was that run recorded?).")
        out[seed] = value
    return out


def _same_units(a: dict[int, float], b: dict[int, float]) -> None:
    """Refuse percentages beside fractions (79 against 0.8): each difference would be ~78."""
    for big, small, names in ((a, b, ("a", "b")), (b, a, ("b", "a"))):
        if not big or not small or not all(1 < v <= 100 for v in big.values()):
            continue
        ratio = statistics.fmean(big.values()) / max(statistics.fmean(small.values()), 1e-12)
        if all(0 <= v <= 1 for v in small.values()) and ratio >= 20:
            most = max(big.values())
            raise ValueError(
                f"{names[0]} holds values up to {most:g} and {names[1]} values within [0, 1]: "
                f"percentages beside fractions? Give both as fractions ({most:g} -> "
                f"{most / 100:g}) or both as percentages."
            )


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> PairedDifference:
    """A - B, seed by seed, with its standard error, 95% interval and sign count.

    Args:
        a, b: seed -> the value (an accuracy, say) that setting reached with that seed. Both must
            hold the same seeds: a seed one of them lacks is an error, never silently dropped.

    Raises:
        TypeError: when ``a`` or ``b`` is not a mapping of int seeds.
        ValueError: when the seeds differ, none are given, a value is not finite, or one side
            holds percentages (all in (1, 100], 20 times the other's mean or more) and the
            other fractions (all in [0, 1]).

    Example:
        >>> d = paired_difference({0: 0.90, 1: 0.85, 2: 0.88}, {0: 0.86, 1: 0.86, 2: 0.83})
        >>> round(d.mean, 4), d.positive, d.negative, d.tells
        (0.0267, 2, 1, False)
        >>> d.describe()
        '+2.7 points (95% interval \u22125.3 to +10.7; 2 of 3 seeds agree)'
    """
    a, b = _by_seed(a, "a"), _by_seed(b, "b")
    _same_units(a, b)
    if set(a) != set(b):
        raise ValueError(
            f"the two settings were recorded with different seeds: a has {sorted(a)}, b has "
            f"{sorted(b)}; pair them over the seeds both have ({sorted(set(a) & set(b))})."
        )
    if not a:
        raise ValueError("paired_difference needs at least one seed, got none.")
    differences = {seed: a[seed] - b[seed] for seed in sorted(a)}
    values = list(differences.values())
    n, mean = len(values), statistics.fmean(values)
    se = low = high = None
    if n > 1:
        se = statistics.stdev(values) / math.sqrt(n)
        half = t_quantile_975(n - 1) * se
        low, high = mean - half, mean + half
    return PairedDifference(
        n=n, mean=mean, se=se, low=low, high=high,
        positive=sum(v > 0 for v in values), negative=sum(v < 0 for v in values),
        differences=differences,
    )  # fmt: skip
