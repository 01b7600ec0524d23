"""Which timed calls the judge verifies besides its random sample: all the fastest ones."""

from harness.judge.verdict import FAST_TAIL_MAX, fast_tail


def test_every_call_at_or_under_twice_the_quantile_is_chosen_fastest_first():
    replies = [{"device_us": [50.0, 10.0, 52.0, 51.0, 53.0], "sample_calls": [2, 3, 4, 5, 6]},
               {"device_us": [54.0, 11.0, 55.0, 56.0, 57.0], "sample_calls": [1, 2, 3, 4, 5]}]
    assert fast_tail(replies, 0.1) == [(0, 3), (1, 2)]  # the 20th percentile of the ten is 11.0 + a fraction


def test_the_tail_follows_the_sample_call_indices_not_the_sample_order():
    us = [9.5, 1.0, 9.1, 9.2, 9.3, 9.4, 9.6, 9.7, 9.8, 9.9]
    replies = [{"device_us": us, "sample_calls": list(range(7, 27, 2))}]
    assert fast_tail(replies, 0.1) == [(0, 9), (0, 11)]  # 1.0 and 9.1: under the 20th percentile, 9.18


def test_the_tail_is_capped_and_empty_without_samples():
    many = [{"device_us": [1.0] * (3 * FAST_TAIL_MAX), "sample_calls": list(range(3 * FAST_TAIL_MAX))}]
    assert len(fast_tail(many, 0.1)) == FAST_TAIL_MAX
    assert len(fast_tail(many, 0.5)) == 3 * FAST_TAIL_MAX // 2 + 1  # never short of the quantile itself
    assert fast_tail([{"device_us": [], "sample_calls": []}], 0.1) == []
