import math

import pytest

from harness.stats import converged, fast_p, geomean, mean_cv, paired_ratio, quantile, rse, summarize


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


def test_converged_needs_min_runs_and_low_error():
    steady = [10.0] * 30
    assert converged(steady, 0.005, 20)
    assert not converged(steady[:10], 0.005, 20)
    assert not converged([1.0, 100.0] * 15, 0.005, 20)


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


def test_paired_ratio_holds_when_the_host_slows_both_sides_for_a_while():
    fast = ([90.0] * 9, [30.0] * 2)  # a round in a fast phase: more reference calls than candidate calls fit
    slow = ([180.0] * 2, [60.0] * 9)  # a slow phase, the other way round
    rounds = [fast, slow, fast]
    pooled_ref = sorted(x for r, _ in rounds for x in r)
    pooled_cand = sorted(x for _, c in rounds for x in c)
    assert quantile(pooled_ref, 0.5) / quantile(pooled_cand, 0.5) == pytest.approx(1.5)  # what pooling gives
    assert paired_ratio(rounds) == pytest.approx(3.0)


def test_paired_ratio_is_the_median_ratio_and_skips_empty_rounds():
    rounds = [([10.0], [5.0]), ([30.0], [10.0]), ([40.0], [10.0]), ([], [1.0]), ([5.0], [])]
    assert paired_ratio(rounds) == 3.0
    assert paired_ratio([([1.0], [])]) is None
    assert paired_ratio([]) is None
