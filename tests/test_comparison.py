"""Tests for vitbook.studies.comparison: paired differences over seeds."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from vitbook.studies.comparison import paired_difference, t_quantile_975


def test_t_quantile_matches_scipy_for_every_df_the_book_can_meet():
    for df in range(1, 400):
        assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-3), df


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
    assert tie.cell() == "0.0\n0.0 to 0.0\n0 of 2"
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
