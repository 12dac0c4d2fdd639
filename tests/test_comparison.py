"""Tests for vitbook.studies.comparison: paired differences over seeds."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from vitbook.studies.comparison import paired_difference, sign_flip_p, t_quantile_975


def test_t_quantile_matches_scipy_for_every_df_the_book_can_meet():
    for df in range(1, 400):
        # 5 decimals in the table (half a unit of the last), 2e-6 from the expansion beyond
        assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=5e-6), df
    assert t_quantile_975(4) == 2.77645  # the published 2.7764, to one more decimal


def test_a_bound_on_a_rounding_boundary_prints_as_with_the_exact_t():
    """With t(0.975, 4) to 3 decimals (2.776) this interval's top is 52.8495 points, printed
    +52.8; with the exact 2.77645 it is 52.8502, printed +52.9 (the book met such a case)."""
    differences = [0.453, 0.525, 0.516, 0.466, 0.49]
    mean, se = statistics.fmean(differences), statistics.stdev(differences) / math.sqrt(5)
    exact = mean + stats.t.ppf(0.975, 4) * se
    d = paired_difference(dict(enumerate(differences)), dict.fromkeys(range(5), 0.0))
    assert d.high == pytest.approx(exact, abs=1e-7)  # t to 5 decimals, times the SE
    assert f"{100 * d.high:+.1f}" == f"{100 * exact:+.1f}" == "+52.9"
    assert d.describe().startswith("+49.0 points (95% interval +45.1 to +52.9;")


def test_the_sign_flip_p_value_counts_every_sign_pattern():
    import itertools

    differences = [0.03, -0.01, 0.02, 0.05, 0.0]
    observed = abs(sum(differences))
    patterns = list(itertools.product((1, -1), repeat=5))
    as_far = sum(abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed
                 - 1e-12 for signs in patterns)  # fmt: skip
    assert sign_flip_p(differences) == as_far / 32
    d = paired_difference(dict(enumerate(differences)), dict.fromkeys(range(5), 0.0))
    assert d.sign_flip == as_far / 32 and d.ties == 1
    # Five seeds that all agree cannot go below 2/32, three below 2/8, however far apart.
    assert sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32 == 0.0625
    assert sign_flip_p([5.0, 6.0, 7.0]) == 0.25
    assert sign_flip_p([0.01, -0.01]) == 1.0  # a mean of 0: every pattern is as far
    assert sign_flip_p([]) is None and sign_flip_p([0.1] * 21) is None  # too many patterns
    assert sign_flip_p([0.1] * 20) == 2 / 2**20


def test_the_t_interval_can_exclude_zero_where_the_sign_flip_cannot():
    """The book's case: five seeds all on one side, an interval starting just above 0, and a
    sign-flip p that no five seeds can bring below 0.0625."""
    d = paired_difference({s: 0.85 + 0.01 * s for s in range(5)},
                          {s: 0.85 + 0.01 * s - v for s, v in enumerate(
                              (0.03, 0.05, 0.04, 0.02, 0.06))})  # fmt: skip
    assert d.tells and d.low > 0 and d.sign_flip == 0.0625


def test_ties_are_named_beside_the_seeds_that_agree():
    d = paired_difference({0: 0.90, 1: 0.85, 2: 0.88, 3: 0.80, 4: 0.80},
                          {0: 0.88, 1: 0.85, 2: 0.86, 3: 0.81, 4: 0.80})  # fmt: skip
    assert (d.positive, d.negative, d.ties, d.agree) == (2, 1, 2, 2)
    assert d.describe().endswith("; 2 of 5 seeds agree, 2 tie)")
    assert d.cell().split("\n")[2] == "2 of 5, 2 tie"
    none = paired_difference({0: 0.9, 1: 0.8}, {0: 0.8, 1: 0.7})
    assert none.ties == 0 and "tie" not in none.describe() + none.cell()


def test_the_sign_flip_p_shows_beside_the_interval_where_asked():
    d = paired_difference({s: 0.9 for s in range(5)}, {s: 0.9 - 0.01 * (s + 1) for s in range(5)})
    assert d.describe() == "+3.0 points (95% interval +1.0 to +5.0; 5 of 5 seeds agree)"
    assert d.describe(p=True) == (
        "+3.0 points (95% interval +1.0 to +5.0; 5 of 5 seeds agree; sign-flip p 0.0625)")
    assert d.cell(p=True).split("\n") == ["+3.0", "+1.0 to +5.0", "5 of 5", "p 0.0625"]
    assert max(len(line) for line in d.cell(p=True).split("\n")) <= 14


def test_paired_difference_is_the_t_interval_of_the_per_seed_differences():
    a = {0: 0.91, 1: 0.88, 2: 0.93, 3: 0.87, 4: 0.90}
    b = {4: 0.86, 3: 0.89, 2: 0.88, 1: 0.85, 0: 0.90}  # another order: paired by seed, not place
    d = paired_difference(a, b)
    diffs = [a[s] - b[s] for s in range(5)]
    se = statistics.stdev(diffs) / math.sqrt(5)
    low, high = stats.t.interval(0.95, 4, loc=statistics.fmean(diffs), scale=se)
    assert d.n == 5 and d.mean == pytest.approx(statistics.fmean(diffs))
    assert d.se == pytest.approx(se)
    assert (d.low, d.high) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))
    assert (d.positive, d.negative, d.agree) == (4, 1, 4)
    assert d.differences == pytest.approx({s: diffs[s] for s in range(5)})
    assert d.tells == (low > 0 or high < 0)


def test_an_interval_that_holds_zero_cannot_tell_and_says_so():
    d = paired_difference({0: 0.80, 1: 0.90, 2: 0.85}, {0: 0.85, 1: 0.84, 2: 0.84})
    assert d.low < 0 < d.high and not d.tells
    assert d.verdict("soft", "hard").startswith("the seeds cannot tell soft from hard")
    assert "95% interval \u2212" in d.describe()


def test_a_clear_difference_names_the_setting_ahead_even_when_it_is_b():
    d = paired_difference({0: 0.80, 1: 0.81, 2: 0.79}, {0: 0.90, 1: 0.92, 2: 0.90})
    assert d.tells and d.high < 0 and d.agree == 3
    assert d.verdict("A", "B").startswith("B is ahead of A: \u221210.7 points")


def test_one_seed_gives_no_interval_and_never_tells():
    d = paired_difference({0: 0.9}, {0: 0.8})
    assert d.se is None and d.low is None and not d.tells
    assert d.describe() == "+10.0 points (one seed: no interval)"


def test_a_table_cell_says_what_describe_says_in_three_short_lines():
    d = paired_difference({0: 0.80, 1: 0.90, 2: 0.85}, {0: 0.85, 1: 0.84, 2: 0.84})
    mean, interval, agree = d.cell().split("\n")
    assert d.describe() == f"{mean} points (95% interval {interval}; {agree} seeds agree)"
    assert max(len(line) for line in d.cell().split("\n")) <= 14  # short: fits a phone
    tie = paired_difference({0: 0.9, 1: 0.8}, {0: 0.9, 1: 0.8})
    assert tie.cell() == "0.0\n0.0 to 0.0\n0 of 2, 2 tie"
    assert paired_difference({0: 0.9}, {0: 0.8}).cell() == "+10.0\none seed"


def test_bad_inputs_name_the_values_and_the_fix():
    with pytest.raises(ValueError, match=r"different seeds: a has \[0, 1\], b has \[0, 2\]"):
        paired_difference({0: 0.9, 1: 0.8}, {0: 0.9, 2: 0.8})
    with pytest.raises(TypeError, match="must map seed -> value"):
        paired_difference([0.9, 0.8], {0: 0.9, 1: 0.8})
    with pytest.raises(TypeError, match=r"seeds must be ints, got '0'"):
        paired_difference({"0": 0.9}, {0: 0.8})
    with pytest.raises(ValueError, match="seed 1 has the value nan"):
        paired_difference({0: 0.9, 1: float("nan")}, {0: 0.8, 1: 0.8})
    with pytest.raises(ValueError, match="at least one seed"):
        paired_difference({}, {})
    with pytest.raises(ValueError, match="at least 1 degree of freedom"):
        t_quantile_975(0)


def test_percentages_beside_fractions_are_refused():
    with pytest.raises(ValueError, match=r"a holds values up to 79 and b values within \[0, 1\]: "
                       r"percentages beside fractions\? Give both as fractions \(79 -> 0\.79\)"):
        paired_difference({0: 79.0, 1: 78.5}, {0: 0.8, 1: 0.78})
    with pytest.raises(ValueError, match=r"b holds values up to 80\.5 and a values within"):
        paired_difference({0: 0.8}, {0: 80.5})
    # numbers of one kind on both sides, or close in size, are compared as given
    assert paired_difference({0: 79.0, 1: 81.0}, {0: 80.0, 1: 78.0}).n == 2
    assert paired_difference({0: 1.2, 1: 1.1}, {0: 0.9, 1: 0.95}).mean == pytest.approx(0.225)
    assert paired_difference({0: 0.02, 1: -0.01}, {0: 0.0, 1: 0.03}).n == 2


def test_a_bound_that_rounds_to_zero_keeps_its_sign_and_side():
    """Two intervals that both printed "0.0" as a bound got opposite verdicts: one started at
    +0.002 points (it tells), the other at -0.032 (it does not). The printed bound now shows
    its side, with the digits that it takes; only an exact 0 prints as 0.0."""
    def starting_at(low):  # five differences around 2 points whose interval starts at low
        spread = (0.02 - low) / (t_quantile_975(4) * math.sqrt(2.5 / 5))
        return {s: 0.02 + spread * (s - 2) for s in range(5)}

    zero = dict.fromkeys(range(5), 0.0)
    above = paired_difference(starting_at(0.00002), zero)  # +0.002 points
    assert above.low == pytest.approx(0.00002, abs=1e-9) and above.tells
    assert above.describe().startswith("+2.0 points (95% interval +0.002 to +4.0;")
    assert above.cell().split("\n")[1] == "+0.002 to +4.0"
    below = paired_difference(starting_at(-0.00032), zero)  # -0.032 points
    assert below.low < 0 and not below.tells
    assert below.describe().startswith("+2.0 points (95% interval \u22120.03 to +4.0;")
    # a bound of exactly 0 (every seed ties) stays 0.0, without a sign
    assert paired_difference({0: 0.9, 1: 0.8}, {0: 0.9, 1: 0.8}).describe() == (
        "0.0 points (95% interval 0.0 to 0.0; 0 of 2 seeds agree, 2 tie)")


def test_the_sign_of_a_printed_bound_agrees_with_the_verdict():
    import random

    rng = random.Random(0)
    for _ in range(300):
        n = rng.choice((2, 3, 5))
        b = {s: rng.uniform(0.8, 0.9) for s in range(n)}
        a = {s: b[s] + rng.gauss(0.01, 0.01) for s in range(n)}
        d = paired_difference(a, b)
        text = d.describe(digits=1).split("interval ")[1].split(";")[0]
        low, high = (float(x.replace("\u2212", "-")) for x in text.split(" to "))
        assert d.tells == (low > 0 or high < 0), (text, d.low, d.high)


def test_verdicts_name_a_winner_only_where_the_interval_tells():
    """The verdict sentence says "is ahead of" exactly when the interval excludes 0, and "cannot
    tell" otherwise (the CIFAR-10 questions of the data-efficient chapter print it)."""
    cases = [({0: 0.9, 1: 0.91, 2: 0.92}, {0: 0.8, 1: 0.8, 2: 0.81}),
             ({0: 0.9, 1: 0.8, 2: 0.85}, {0: 0.85, 1: 0.84, 2: 0.84}),
             ({0: 0.9}, {0: 0.8})]  # fmt: skip
    for a, b in cases:
        d = paired_difference(a, b)
        line = d.verdict("A", "B")
        assert ("is ahead of" in line) == d.tells
        assert ("cannot tell" in line) == (not d.tells)
    # three seeds resolve only large gaps: no sign-flip test of three goes below 2/2**3
    assert sign_flip_p([0.01, 0.02, 0.03]) == 0.25 == 2 / 2**3


def test_ties_raise_the_sign_flip_floor():
    assert sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.05]) == 2 / 32
    assert sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.0]) == 4 / 32  # one tie: 2 / 2**4
    assert sign_flip_p([0.01, 0.02, 0.03, 0.0, 0.0]) == 8 / 32
    assert sign_flip_p([0.01] * 6) == 2 / 64  # six seeds: below 0.05


def test_the_rank_sum_p_is_the_exact_mann_whitney_test():
    from vitbook.studies.comparison import rank_sum_p

    a, b = [0.97, 0.962, 0.975, 0.968, 0.971], [0.85, 0.93, 0.61, 0.88, 0.91]
    exact = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
    assert rank_sum_p(a, b) == pytest.approx(exact) == pytest.approx(2 / 252)
    mixed = [0.9, 0.86, 0.95, 0.8, 0.99], [0.85, 0.93, 0.61, 0.88, 0.91]
    assert rank_sum_p(*mixed) == pytest.approx(
        stats.mannwhitneyu(*mixed, alternative="two-sided", method="exact").pvalue)
    # mappings of seed -> value are read as their values: the test ignores the pairing
    assert rank_sum_p(dict(enumerate(a)), dict(enumerate(b))) == rank_sum_p(a, b)
    # ties share their mean rank; every split then counted by hand
    assert rank_sum_p([1.0, 2.0], [2.0, 3.0]) == pytest.approx(4 / 6)
    assert rank_sum_p([], [1.0]) is None
    assert rank_sum_p([0.1] * 15, [0.2] * 15) is None  # too many splits to enumerate
