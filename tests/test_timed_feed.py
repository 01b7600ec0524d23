"""The timing loop's input feed and sampling rule, on the CPU with a stand-in worker."""

import dataclasses
from types import SimpleNamespace

import torch

from harness import stats
from harness.seeds import derive
from harness.settings import LoopSettings
from harness.worker import clocks, feed
from harness.worker.feed import STOCK_SETS, TimedFeed, poison_size
from harness.worker.fingerprint import Fingerprinter

BASE = 77


def fake_worker(draws: list[int], size: int = 8):
    def inputs(seed: int) -> list:
        draws.append(seed)
        g = torch.Generator().manual_seed(seed % 2**63)
        return [torch.randn(size, generator=g), 3]

    return SimpleNamespace(inputs=inputs, device="cpu", fp=Fingerprinter(5, "cpu"))


def test_each_call_gets_its_own_seed_drawn_in_batches_and_the_call_after_a_draw_is_not_sampled():
    draws: list[int] = []
    feed = TimedFeed(fake_worker(draws), BASE, projection=False)
    counted = []
    for i in range(2 * STOCK_SETS + 3):
        args, ok = feed.take(i)
        want = fake_worker([]).inputs(derive(BASE, i))[0]
        assert torch.equal(args[0], want), i
        counted.append(ok)
        feed.hold(i, args, args[0] * 2)
    assert draws == [derive(BASE, i) for i in range(3 * STOCK_SETS + 1)]  # call 0, then batches from 1
    assert not counted[0]
    fresh = {1, 1 + STOCK_SETS, 1 + 2 * STOCK_SETS}
    assert [i for i, ok in enumerate(counted) if not ok] == [0, *sorted(fresh)]


def test_outputs_are_held_until_the_batch_ends_then_fingerprinted_and_poisoned():
    w = fake_worker([])
    feed = TimedFeed(w, BASE, projection=False)
    outs = {}
    for i in range(STOCK_SETS + 2):
        args, _ = feed.take(i)
        outs[i] = (args[0] * 2, args[0].clone())
        feed.hold(i, args, outs[i][0])
    last = STOCK_SETS + 1  # the first call of the second batch: drawing it settled calls 0 .. last - 1
    assert set(feed.calls) == set(range(last))
    assert not torch.isnan(outs[last][0]).any() and torch.isnan(outs[last - 1][0]).all()
    feed.settle()
    assert set(feed.calls) == set(range(STOCK_SETS + 2))
    for i, (out, clean_in) in outs.items():
        fps, projs, ins = feed.calls[i]
        assert fps == [w.fp.exact(clean_in * 2).item()]
        assert ins == [w.fp.exact(clean_in).item()]
        assert projs is None
        assert torch.isnan(out).all()  # poisoned once fingerprinted


def test_a_feed_without_draws_keeps_the_batches_and_which_calls_are_sampled():
    """The floors' stand-ins ignore their inputs: no draw, but the same batches, settling and sampled calls."""
    draws: list[int] = []
    drawn, bare = TimedFeed(fake_worker([]), BASE, projection=False), TimedFeed(fake_worker(draws), BASE, False, draw=False)
    outs = []
    for i in range(2 * STOCK_SETS + 3):
        (_, want), (args, ok) = drawn.take(i), bare.take(i)
        assert args == [] and ok == want, i
        outs.append(torch.ones(4) * i)
        bare.hold(i, args, outs[-1])
    assert draws == []
    assert set(bare.calls) == set(range(2 * STOCK_SETS + 1))  # settled at the last batch's first call
    assert all(torch.isnan(o).all() for o in outs[:2 * STOCK_SETS + 1]) and not torch.isnan(outs[-1]).any()
    assert bare.calls[0][2] == []  # no inputs to fingerprint


def test_no_batches_when_one_set_fills_the_budget(monkeypatch):
    monkeypatch.setitem(feed.STOCK_BYTES, "cpu", 16)
    one = TimedFeed(fake_worker([], size=64), BASE, projection=None)
    counted = [one.take(i)[1] for i in range(5)]
    assert counted == [False, True, True, True, True]  # every call drawn fresh, so every call is sampled


class StepClock:
    kind = "cpu"

    def __init__(self):
        self.n = 0

    def measure(self, call, after, behind_flush=True, cover_us=0.0):
        self.n += 1
        out = call()
        return out, after(out), clocks.Sample(float(self.n), float(self.n), float(self.n))


def test_run_loop_samples_only_counted_calls_and_reports_the_rest():
    seen = []
    settings = LoopSettings(warmup_ms=0.0, min_runs=6, max_runs=6, budget_s=10.0, target_rse=0.0)
    samples, unsampled = clocks.run_loop(StepClock(), lambda i: ((lambda: i), i % 3 != 1), lambda o: None,
                                         lambda i, o, e: seen.append(i), settings)
    assert [s.device_us for s in samples] == [3.0, 4.0, 6.0, 7.0, 9.0, 10.0]
    assert unsampled == len(seen) - len(samples) == 4  # warm-up calls 0 and 1, skipped calls 4 and 7


def test_a_reused_output_buffer_switches_to_fingerprinting_each_call_as_it_returns():
    from harness.protocol import OVERWRITTEN

    w = fake_worker([])
    feed = TimedFeed(w, BASE, projection=False)
    buf = torch.empty(8)
    expect = {}
    for i in range(6):
        args, _ = feed.take(i)
        buf.copy_(args[0] * 2)
        expect[i] = w.fp.exact(args[0] * 2).item()
        feed.hold(i, args, buf)
        if i >= 2:
            assert torch.isnan(buf).all()  # fingerprinted and poisoned as soon as it returned
    feed.settle()
    assert feed.calls[1] == OVERWRITTEN  # held when call 2 rewrote the same storage
    for i in (0, 2, 3, 4, 5):
        assert feed.calls[i][0] == [expect[i]], i


class ValueClock:
    """Sample i's time is values(i): the loop's stopping rule without a device."""

    kind = "cpu"

    def __init__(self, values):
        self.values = values
        self.n = 0

    def measure(self, call, after, behind_flush=True, cover_us=0.0):
        t = self.values(self.n)
        self.n += 1
        return None, None, clocks.Sample(t, t, t)


def test_run_loop_stops_when_the_low_quantile_is_precise_though_outliers_keep_the_mean_noisy():
    settings = LoopSettings(warmup_ms=0.0, min_runs=5, max_runs=500, budget_s=60.0, target_rse=0.005)
    hiccups = ValueClock(lambda i: 5000.0 if i % 4 == 3 else 100.0 + (i % 7) * 0.01)
    samples, _ = clocks.run_loop(hiccups, lambda i: ((lambda: i), True), lambda o: None, lambda *a: None, settings)
    xs = [s.device_us for s in samples]
    assert 36 <= len(xs) < 60
    assert stats.rse(xs) > 0.1  # a rule on the mean's error would run to max_runs


def test_run_loop_runs_on_while_the_low_quantile_is_uncertain():
    settings = LoopSettings(warmup_ms=0.0, min_runs=5, max_runs=300, budget_s=60.0, target_rse=0.005)
    spread = ValueClock(lambda i: 50.0 + (i * 37) % 101)
    samples, _ = clocks.run_loop(spread, lambda i: ((lambda: i), True), lambda o: None, lambda *a: None, settings)
    assert len(samples) == 300
    median_rule = dataclasses.replace(settings, quantile=0.5, target_rse=0.05)
    samples, _ = clocks.run_loop(ValueClock(spread.values), lambda i: ((lambda: i), True), lambda o: None,
                                 lambda *a: None, median_rule)
    assert 5 <= len(samples) < 300  # the settings' quantile is the one whose error is read


def test_idle_spares_poison_together_at_most_a_quarter_of_the_free_memory():
    gib = 2**30
    assert poison_size(139 * gib, 4 * gib, holders=5) == 4 * gib  # the H200: the 4 GiB block, as before
    small = poison_size(24 * gib, 4 * gib, holders=5)
    assert small == 24 * gib // 20 and 5 * small <= 24 * gib // 4
    assert poison_size(24 * gib, 4 * gib) == 4 * gib and poison_size(8 * gib, 4 * gib) == 2 * gib
    assert poison_size(0, 4 * gib, holders=0) == 0


def test_run_loop_takes_two_samples_when_a_draw_outlasts_the_round_budget():
    import time

    settings = LoopSettings(warmup_ms=0.0, min_runs=5, max_runs=50, budget_s=0.001, target_rse=0.0)

    def step(i: int):
        if i % 3 == 0:
            time.sleep(0.02)  # a batch of inputs drawn on a busy host: 20 budgets
        return (lambda: i), i % 3 != 0

    samples, _ = clocks.run_loop(StepClock(), step, lambda o: None, lambda *a: None, settings)
    assert len(samples) >= 2
