"""Paired comparisons of two recorded settings over the same seeds.

:func:`paired_difference`: the mean per-seed difference A - B, a 95% t interval, the sign count
and the exact sign-flip p; :func:`rank_sum_p`: the unpaired exact rank-sum test. What each
assumes: the chapter.

See chapter: How this book compares two settings.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "PairedDifference",
    "paired_difference",
    "rank_sum_p",
    "sign_flip_p",
    "t_quantile_975",
]

# Student's t, the 97.5% point, for 1 to 30 degrees of freedom (two-sided 95%), to 5 decimals
# (scipy.stats.t.ppf(0.975, df) rounded; the published tables agree to their 3 or 4 decimals).
# Five, not three: with three, a bound on a rounding boundary prints one digit off.
_T975 = (
    12.70620, 4.30265, 3.18245, 2.77645, 2.57058, 2.44691, 2.36462, 2.30600, 2.26216, 2.22814,
    2.20099, 2.17881, 2.16037, 2.14479, 2.13145, 2.11991, 2.10982, 2.10092, 2.09302, 2.08596,
    2.07961, 2.07387, 2.06866, 2.06390, 2.05954, 2.05553, 2.05183, 2.04841, 2.04523, 2.04227,
)  # fmt: skip
# The exact sign-flip test enumerates 2**n sign patterns: up to 20 seeds (a million patterns).
SIGN_FLIP_MAX_SEEDS = 20


def t_quantile_975(df: int) -> float:
    """Student's t at 0.975 for ``df`` degrees of freedom: the half-width of a 95% interval in
    standard errors, exact to 5 decimals up to 30, then Cornish-Fisher (within 2e-6).

    Example:
        >>> t_quantile_975(4)
        2.77645
        >>> round(t_quantile_975(100), 4)  # scipy: 1.98397
        1.984

    See chapter: How this book compares two settings.
    """
    if isinstance(df, bool) or not isinstance(df, int):
        raise TypeError(f"df must be an int, got {type(df).__name__}.")
    if df < 1:
        raise ValueError(f"df={df}: a t interval needs at least 1 degree of freedom (2 seeds).")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))  # fmt: skip


def sign_flip_p(differences: list[float]) -> float | None:
    """The exact two-sided paired sign-flip (permutation) p-value of the mean difference.

    Counts the 2**n sign patterns whose mean is at least as far from 0 as the observed one. The
    floor is 2 / 2**n, doubled by each tie. Returns p in (0, 1]; None for no differences or more
    than ``SIGN_FLIP_MAX_SEEDS``.

    Example:
        >>> sign_flip_p([0.02, 0.03, 0.01, 0.04, 0.05])  # all five agree: 2 of 32 patterns
        0.0625
        >>> sign_flip_p([0.02, -0.01, 0.04])  # 4 of the 8 patterns are as far from 0
        0.5
        >>> sign_flip_p([0.02, 0.03, 0.01, 0.04, 0.0])  # one tie: the floor doubles
        0.125

    See chapter: How this book compares two settings.
    """
    n = len(differences)
    if n == 0 or n > SIGN_FLIP_MAX_SEEDS:
        return None
    sums = [0.0]
    for d in differences:  # every signed sum: 2**n of them
        sums = [s + d for s in sums] + [s - d for s in sums]
    observed = abs(math.fsum(differences))
    # Sums equal to the observed one but summed in another order may differ in the last bits.
    slack = 1e-9 * max(1.0, sum(abs(d) for d in differences))
    return sum(abs(s) >= observed - slack for s in sums) / len(sums)


# The exact rank-sum test enumerates every split of the runs: up to about a million splits.
RANK_SUM_MAX_SPLITS = 1_000_000


def rank_sum_p(a: Iterable[float], b: Iterable[float]) -> float | None:
    """The exact two-sided rank-sum (Wilcoxon-Mann-Whitney) p-value of two settings' runs.

    ``a``, ``b``: values, or seed -> value; ties share their mean rank. Returns p in (0, 1];
    None when a side is empty or there are more than ``RANK_SUM_MAX_SPLITS`` splits.

    Example:
        >>> round(rank_sum_p([0.97, 0.96, 0.98], [0.91, 0.95, 0.90]), 4)  # apart: 2 of 20
        0.1
        >>> rank_sum_p([0.9, 0.8], [0.85, 0.95])  # 4 of the 6 splits are as far
        0.6666666666666666

    See chapter: How this book compares two settings.
    """
    a_values = list(a.values()) if isinstance(a, Mapping) else list(a)
    b_values = list(b.values()) if isinstance(b, Mapping) else list(b)
    n_a, n = len(a_values), len(a_values) + len(b_values)
    if not a_values or not b_values or math.comb(n, n_a) > RANK_SUM_MAX_SPLITS:
        return None
    pooled = sorted(a_values + b_values)
    # mean rank of each value (1-based): ties share the mean of the ranks they span
    rank_of = {v: (pooled.index(v) + 1 + n - pooled[::-1].index(v)) / 2 for v in pooled}
    ranks = [rank_of[v] for v in a_values + b_values]
    centre = n_a * (n + 1) / 2  # the mean rank sum of a under the null
    observed = abs(sum(ranks[:n_a]) - centre)
    splits = [abs(sum(ranks[i] for i in split) - centre)
              for split in itertools.combinations(range(n), n_a)]  # fmt: skip
    return sum(far >= observed - 1e-9 for far in splits) / len(splits)


@dataclass(frozen=True)
class PairedDifference:
    """A - B over the seeds both were recorded with; ``se``, ``low``, ``high`` (the 95% t
    interval) are None for one seed; ``positive``/``negative`` count seeds with A above/below B.
    """

    n: int
    mean: float
    se: float | None
    low: float | None
    high: float | None
    positive: int
    negative: int
    differences: dict[int, float]
    sign_flip: float | None = None

    @property
    def tells(self) -> bool:
        """True when the 95% t interval excludes 0."""
        return self.low is not None and (self.low > 0 or self.high < 0)

    @property
    def agree(self) -> int:
        """How many seeds agree in sign with the mean difference."""
        return self.positive if self.mean > 0 else self.negative if self.mean < 0 else 0

    @property
    def ties(self) -> int:
        """How many seeds give A and B the same value (a difference of exactly 0)."""
        return self.n - self.positive - self.negative

    def _seeds(self, *, short: bool) -> str:
        tie = f", {self.ties} tie" if self.ties else ""
        return f"{self.agree} of {self.n}{tie}" if short else (
            f"{self.agree} of {self.n} seeds agree{tie}")  # fmt: skip

    def describe(
        self, *, scale: float = 100.0, unit: str = " points", digits: int = 1, p: bool = False
    ) -> str:
        """The difference as the book writes it, in percentage points by default:
        ``+2.4 points (95% interval -4.9 to +9.7; 3 of 5 seeds agree)``; ``p=True`` adds the
        sign-flip p. A bound that would round to 0 keeps its sign (``+0.002``).

        Example:
            >>> d = paired_difference({0: 0.9, 1: 0.8, 2: 0.7}, {0: 0.8, 1: 0.8, 2: 0.6})
            >>> d.describe(p=True).split("; ")  # doctest: +NORMALIZE_WHITESPACE
            ['+6.7 points (95% interval \u22127.7 to +21.0',
             '2 of 3 seeds agree, 1 tie', 'sign-flip p 0.5)']
        """
        mean = _signed(self.mean, scale, digits)
        if self.low is None:
            return f"{mean}{unit} (one seed: no interval)"
        low, high = _bound(self.low, scale, digits), _bound(self.high, scale, digits)
        flip = f"; sign-flip p {_p_text(self.sign_flip)}" if p else ""
        return f"{mean}{unit} (95% interval {low} to {high}; {self._seeds(short=False)}{flip})"

    def cell(self, *, scale: float = 100.0, digits: int = 1, p: bool = False) -> str:
        """The difference as a table cell, one line each: ``+2.4``, ``-4.9 to +9.7``, ``3 of 5``
        (seeds that agree), with ``p=True`` ``p 0.0625``."""
        mean = _signed(self.mean, scale, digits)
        if self.low is None:
            return f"{mean}\none seed"
        low, high = _bound(self.low, scale, digits), _bound(self.high, scale, digits)
        flip = f"\np {_p_text(self.sign_flip)}" if p else ""
        return f"{mean}\n{low} to {high}\n{self._seeds(short=True)}{flip}"

    def verdict(self, a: str, b: str) -> str:
        """One sentence: which setting the seeds put ahead, or that they cannot tell."""
        if self.tells:
            ahead, behind = (a, b) if self.mean > 0 else (b, a)
            return f"{ahead} is ahead of {behind}: {self.describe()}."
        return f"the seeds cannot tell {a} from {b}: {a} - {b} = {self.describe()}."


def _p_text(p: float | None) -> str:
    """A sign-flip p-value, k / 2**n, to 4 significant digits (0.0625, 0.125, 1)."""
    return "not computed (too many seeds)" if p is None else f"{p:.4g}"


def _signed(value: float, scale: float, digits: int) -> str:
    """``value * scale`` with its sign and a true minus sign; 0.0 without a sign."""
    text = f"{value * scale:+.{digits}f}"
    return "0.0" if float(text) == 0 else text.replace("-", "\u2212")


# A bound that rounds to 0 at the asked digits gets up to this many more, to show its side.
_MORE_DIGITS = 4


def _bound(value: float, scale: float, digits: int) -> str:
    """An interval's end as :func:`_signed` writes it; a non-zero one keeps digits to show its side.

    Example:
        >>> _bound(0.00002, 100, 1), _bound(-0.00032, 100, 1), _bound(0.0, 100, 1)
        ('+0.002', '\u22120.03', '0.0')
    """
    for more in range(_MORE_DIGITS + 1):
        text = _signed(value, scale, digits + more)
        if text != "0.0":  # _signed writes 0.0 for any value that rounds to 0
            return text
    return _signed(value, scale, digits)


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
    """A - B, seed by seed (``a``, ``b``: seed -> value, the same seeds), with its standard
    error, 95% interval, sign count and sign-flip p.

    Raises:
        TypeError: when ``a`` or ``b`` is not a mapping of int seeds.
        ValueError: different seeds, none, a non-finite value, or percentages beside fractions.

    Example:
        >>> d = paired_difference({0: 0.90, 1: 0.85, 2: 0.88}, {0: 0.86, 1: 0.86, 2: 0.83})
        >>> round(d.mean, 4), d.positive, d.negative, d.tells, d.sign_flip
        (0.0267, 2, 1, False, 0.5)
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
        differences=differences, sign_flip=sign_flip_p(values),
    )  # fmt: skip
