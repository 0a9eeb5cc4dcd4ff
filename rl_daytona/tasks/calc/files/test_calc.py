"""Tests for calc.py: every test is named test_<function>_<case>."""

from calc import clamp, cumulative_sum, dot, mean, median, mode, normalize, percentile, stdev, variance


def close(actual, expected, tol=1e-9):
    """True when `actual` is a plain number (or list of them) within `tol` of `expected`."""
    if type(expected) is list:
        return (type(actual) is list and len(actual) == len(expected)
                and all(close(a, e, tol) for a, e in zip(actual, expected)))
    return type(actual) in (int, float) and abs(actual - expected) <= tol


def test_mean_integers():
    assert close(mean([1, 2, 3, 4]), 2.5)


def test_mean_single_value():
    assert close(mean([7]), 7)


def test_median_odd_length():
    assert close(median([3, 1, 2]), 2)


def test_median_even_length():
    assert close(median([4, 1, 3, 2]), 2.5)


def test_variance_sample():
    assert close(variance([2, 4, 4, 4, 5, 5, 7, 9]), 32 / 7)


def test_variance_constant():
    assert close(variance([3, 3, 3]), 0)


def test_stdev_sample():
    assert close(stdev([2, 4, 4, 4, 5, 5, 7, 9]), (32 / 7) ** 0.5)


def test_mode_most_common():
    assert close(mode([1, 2, 2, 3]), 2)


def test_mode_first_of_ties():
    assert close(mode([5, 1, 1, 5, 3]), 5)


def test_clamp_inside():
    assert close(clamp(5, 0, 10), 5)


def test_clamp_above():
    assert close(clamp(12, 0, 10), 10)


def test_percentile_interpolates():
    assert close(percentile([10, 20, 30, 40], 50), 25)


def test_percentile_extremes():
    assert close(percentile([5, 1, 3], 0), 1)
    assert close(percentile([5, 1, 3], 100), 5)


def test_dot_product():
    assert close(dot([1, 2, 3], [4, 5, 6]), 32)


def test_normalize_sums_to_one():
    assert close(normalize([1, 1, 2]), [0.25, 0.25, 0.5])


def test_cumulative_sum_running_total():
    assert close(cumulative_sum([1, 2, 3, 4]), [1, 3, 6, 10])
