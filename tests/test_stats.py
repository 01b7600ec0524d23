import math

import pytest

from harness.stats import (
    T975,
    Round,
    fast_p,
    geomean,
    mean_cv,
    measured_ratio_interval,
    pooled_ratio,
    quantile,
    quantile_rse,
    ratio_interval,
    rse,
    summarize,
)


def test_summarize_keeps_median_iqr_min_and_count_together():
    m = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (m.median_us, m.min_us, m.runs) == (3.0, 1.0, 5)
    assert m.iqr_us == pytest.approx(4.0 - 2.0)
    assert m.mean_us == pytest.approx(3.0)


def test_quantile_interpolates():
    assert quantile([0.0, 10.0], 0.25) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_rse_is_relative_standard_error_of_the_mean():
    xs = [9.0, 11.0] * 50
    std = math.sqrt(sum((x - 10) ** 2 for x in xs) / (len(xs) - 1))
    assert rse(xs) == pytest.approx(std / math.sqrt(len(xs)) / 10)
    assert rse([1.0]) == math.inf


def test_quantile_rse_reads_the_low_quantile_not_the_outliers():
    """Host hiccups (one call in five at 20x) leave the 0.1 quantile's error small and the mean's large."""
    calm = [100.0 + ((i * 37) % 400) * 0.01 for i in range(400)]
    hiccups = sorted(x * (20 if i % 5 == 4 else 1) for i, x in enumerate(calm))
    assert quantile_rse(hiccups, 0.1) < 0.005 < rse(hiccups)
    assert quantile_rse(sorted(calm[:40]), 0.1) > quantile_rse(sorted(calm), 0.1)


def test_quantile_rse_is_infinite_until_both_ranks_exist():
    xs = [float(i) for i in range(1, 201)]
    assert quantile_rse(xs[:35], 0.1) == math.inf
    assert math.isfinite(quantile_rse(xs[:36], 0.1))
    assert quantile_rse(sorted([0.0] * 50), 0.1) == math.inf
    n = 200
    h = 2 * math.sqrt(n * 0.1 * 0.9)
    lo, hi = math.floor(20 - h), math.ceil(20 + h)
    assert quantile_rse(xs, 0.1) == pytest.approx((xs[hi] - xs[lo]) / 4 / quantile(xs, 0.1))



def test_geomean_ignores_missing_and_nonpositive():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, None, 8.0, 0.0]) == pytest.approx(4.0)
    assert geomean([None]) is None


def test_fast_p_counts_correct_and_faster_than_p_over_all_entries():
    speedups = [2.5, 1.2, None, 0.8]
    assert fast_p(speedups, 0.0) == pytest.approx(3 / 4)
    assert fast_p(speedups, 1.0) == pytest.approx(2 / 4)
    assert fast_p(speedups, 2.0) == pytest.approx(1 / 4)
    assert fast_p([], 1.0) == 0.0


def test_mean_cv():
    mean, cv = mean_cv([9.0, 11.0])
    assert mean == pytest.approx(10.0)
    assert cv == pytest.approx(math.sqrt(2) / 10)


def test_low_quantile_reads_both_sides_in_the_fast_phase_whatever_their_shares():
    fast_ref, slow_ref = [90.0] * 9, [180.0] * 2  # the reference: mostly timed in a fast phase
    fast_cand, slow_cand = [30.0] * 2, [60.0] * 9  # the candidate: mostly in a slow one
    ref, cand = [fast_ref, slow_ref], [fast_cand, slow_cand]
    assert pooled_ratio(ref, cand, 0.5) == pytest.approx(1.5)  # medians compare phases, not kernels
    assert pooled_ratio(ref, cand, 0.1) == pytest.approx(3.0)


def test_pooled_ratio_pools_rounds_and_needs_both_sides():
    assert pooled_ratio([[4.0], [2.0, 6.0]], [[1.0, 3.0], [2.0]], 0.5) == pytest.approx(2.0)
    assert pooled_ratio([[1.0]], [[]], 0.1) is None
    assert pooled_ratio([], [[1.0]], 0.1) is None
    assert pooled_ratio([[1.0]], [[0.0]], 0.1) is None


def test_round_medians_name_each_figure():
    r = Round(reference=(3.0, 1.0, 2.0), candidate=(1.0,), copy=(), launch=(4.0, 6.0))
    assert r.medians() == {"reference_us": 2.0, "time_us": 1.0, "copy_us": None, "launch_us": 5.0}


def test_ratio_interval_is_a_t_interval_of_the_rounds_log_ratios_around_the_pooled_ratio():
    den = [[10.0] * 20 for _ in range(5)]
    num = [[10.0 * f] * 20 for f in (1.00, 1.02, 0.98, 1.01, 0.99)]
    center = pooled_ratio(num, den, 0.1)
    lo, hi = ratio_interval(num, den, 0.1, center)
    logs = [math.log(f) for f in (1.00, 1.02, 0.98, 1.01, 0.99)]
    mean = sum(logs) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 4)
    assert lo == pytest.approx(center * math.exp(-T975[3] * sd / math.sqrt(5)))
    assert hi == pytest.approx(center * math.exp(T975[3] * sd / math.sqrt(5)))
    assert lo < center < hi


def test_ratio_interval_narrows_as_rounds_agree_and_needs_two_rounds():
    den = [[10.0] * 20 for _ in range(5)]
    spread = ratio_interval([[10.0 * f] * 20 for f in (1.5, 1.6, 1.4, 1.55, 1.45)], den, 0.1, 1.5)
    tight = ratio_interval([[10.0 * f] * 20 for f in (1.5, 1.51, 1.49, 1.505, 1.495)], den, 0.1, 1.5)
    assert tight[1] - tight[0] < spread[1] - spread[0]
    assert tight[0] > 1.4 and tight[1] < 1.6
    assert ratio_interval([[15.0]], [[10.0]], 0.1, 1.5) is None
    assert ratio_interval([[15.0], []], [[10.0], [10.0]], 0.1, 1.5) is None


def test_measured_ratio_interval_widens_with_either_sides_error():
    a = summarize([10.0, 10.5, 9.5, 10.2, 9.8] * 4)
    b = summarize([5.0, 5.1, 4.9, 5.05, 4.95] * 4)
    lo, hi = measured_ratio_interval(a, b)
    assert lo < a.median_us / b.median_us < hi
    noisy = summarize([5.0, 7.0, 3.0, 6.0, 4.0] * 4)
    nlo, nhi = measured_ratio_interval(a, noisy)
    assert nhi / nlo > hi / lo
