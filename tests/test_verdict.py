"""The verdict: each observation turns into the status and flag the docs promise, and nothing else does."""

from dataclasses import replace

from harness.judge.evidence import CheckOutcome, Comparison, Evidence, TimedVerification
from harness.judge.verdict import TIMER_BOUND, decide, host_timing_suspect
from harness.stats import summarize

OK = Comparison(True, "ok", max_abs_err=0.0, max_rel_err=0.0)
BAD = Comparison(False, "mismatch", "1 of 4 elements differ", 1.0, 1.0, (2,), 1)


def honest(device: str = "cuda", median: float = 200.0, **kw) -> Evidence:
    e = Evidence(device=device, min_bytes=10**6, cache_bytes=60 * 2**20, copy_gbps=4000.0, empty_gap_us=10.0,
                 floor_launch_us=20.0)
    e.checks = [CheckOutcome(seed=s, phase="check", comparison=OK) for s in (1, 2, 3)]
    e.timing = summarize([median] * 30)
    e.host_gap_us = 15.0
    e.judge_call_us = median + 20
    e.timed = [TimedVerification(i, 100 + i, ok=True) for i in range(16)]
    e.graph_message = "capture failed: item() during capture"
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_honest_evidence_is_correct_and_unflagged_but_for_info():
    d = decide(honest())
    assert d.status == "correct"
    assert d.flags == ("not_graph_safe",)


def test_launch_bound_flag_and_graph_safe_run():
    e = honest(median=25.0, judge_call_us=40.0)
    e.graph, e.graph_message = summarize([5.0] * 10), None
    d = decide(e)
    assert d.status == "correct" and d.flags == ("launch_bound",)


def test_launch_bound_uses_the_shapes_own_floor_when_measured():
    """The shape's floor decides: a 55 us call is launch-bound against a 40 us floor, a 25 us call is not against
    a 10 us floor; never on the CPU, nor without a floor."""
    assert "launch_bound" in decide(honest(median=55.0, floor_launch_us=40.0)).flags
    assert "launch_bound" not in decide(honest(median=25.0, floor_launch_us=10.0)).flags
    assert "launch_bound" not in decide(honest(device="cpu", median=25.0, floor_launch_us=40.0)).flags
    assert "launch_bound" not in decide(honest(median=25.0, floor_launch_us=None)).flags


def test_each_integrity_observation_rejects_with_its_flag():
    cases = {
        "patched_runtime": dict(patched={"time.perf_counter"}),
        "not_plain_tensor": dict(bad_output=("not_plain_tensor", "forward returned Proxy")),
        "timed_output_mismatch": dict(timed=[TimedVerification(0, 1, ok=True), TimedVerification(1, 2, ok=False)]),
        "work_outside_timing": dict(host_gap_us=500.0, host_recheck=(480.0, False)),
        "timer_mismatch": dict(judge_call_us=2000.0),
        "faster_than_memory": dict(min_bytes=2 * 10**9),
        "tampered_files": dict(tampered=["harness/timing.py"]),
    }
    for flag, kw in cases.items():
        d = decide(honest(**kw))
        assert d.status == "rejected", flag
        assert flag in d.flags, (flag, d.flags)
        assert d.message.startswith(flag)


def test_host_timing_alone_never_rejects():
    """A host wait past the last event, or events spanning more than the host saw, only calls for a re-measure
    with builds paused: what that re-measure does not show is no flag, what it shows rejects."""
    for kw in (dict(host_gap_us=500.0), dict(host_gap_us=500.0, host_recheck=(20.0, False)),
               dict(device_exceeds_host=True, host_recheck=(15.0, False))):
        assert host_timing_suspect(honest(**kw)) and decide(honest(**kw)).status == "correct", kw
    assert not host_timing_suspect(honest())
    d = decide(honest(device_exceeds_host=True, host_recheck=(15.0, True)))
    assert d.status == "rejected" and "timer_mismatch" in d.flags


def test_a_fault_of_the_harness_is_its_own_status_unless_integrity_already_rejects():
    d = decide(honest(harness_error="verify: KeyError: 3"))
    assert d.status == "harness_error" and "KeyError" in d.message
    assert decide(honest(harness_error="verify: KeyError: 3", patched={"time.time"})).status == "rejected"


def test_check_observations_reject():
    for attr, flag in (("aliases_input", "output_aliases_input"), ("input_mutated", "input_mutated"),
                       ("late_write", "work_outside_timing"), ("thread_growth", "work_outside_timing")):
        e = honest()
        e.checks[1] = replace(e.checks[1], **{attr: True})
        d = decide(e)
        assert (d.status, flag in d.flags) == ("rejected", True), attr
    e = honest()
    e.checks[2] = CheckOutcome(seed=9, phase="check", comparison=BAD, replay_of=1)
    d = decide(e)
    assert d.status == "rejected" and {"replayed_output", "mismatch"} <= set(d.flags)


def test_faster_than_memory_needs_bytes_beyond_the_cache():
    small = honest(median=1.0, judge_call_us=None, min_bytes=2 * 2**20)
    assert "faster_than_memory" not in decide(small).flags
    big = honest(median=100.0, min_bytes=10**9)
    assert "faster_than_memory" in decide(big).flags
    plausible = honest(median=300.0, min_bytes=10**9)
    assert decide(plausible).status == "correct"


def test_host_gap_limit_scales_with_call_time():
    confirmed = dict(median=1000.0, judge_call_us=1000.0, host_recheck=(400.0, False))
    assert decide(honest(host_gap_us=200.0, **confirmed)).status == "correct"
    assert decide(honest(host_gap_us=400.0, **confirmed)).status == "rejected"
    assert decide(honest(device="cpu", host_gap_us=10_000.0, host_recheck=(10_000.0, False))).status == "correct"


def test_wrong_output_is_incorrect_with_seed_and_kind():
    e = honest()
    e.checks[1] = CheckOutcome(seed=77, phase="check", comparison=BAD)
    d = decide(e)
    assert (d.status, d.failing_seed, d.flags) == ("incorrect", 77, ("mismatch",))
    assert "seed 77" in d.message


def test_failures_and_static_policy():
    assert decide(Evidence(device="cuda", failure=("compile_error", "x.cu: error"))).status == "compile_error"
    assert decide(Evidence(device="cuda", failure=("build_timeout", "600 s"))).status == "timeout"
    assert decide(Evidence(device="cuda", failure=("timeout", "no answer"))).status == "timeout"
    assert decide(Evidence(device="cuda", failure=("runtime_error", "boom"))).status == "runtime_error"
    strict = decide(Evidence(device="cuda", static_errors=["threads (line 3)"], static_policy="strict"))
    assert strict.status == "rejected" and strict.flags == ("static:threads (line 3)",)
    warned = decide(honest(static_errors=["threads (line 3)"], static_policy="warn"))
    assert warned.status == "correct" and "static:threads (line 3)" in warned.flags
    off = decide(honest(static_errors=["threads (line 3)"], static_policy="off"))
    assert off.status == "correct" and not any(f.startswith("static") for f in off.flags)


def test_on_the_gpu_the_judges_clock_bounds_the_times_at_the_speedups_quantile():
    ratio, slack = TIMER_BOUND["cuda"]
    edge = ratio * 5000.0 - slack
    for fast, status in ((edge + 1, "correct"), (edge - 1, "rejected")):
        e = honest(device="cuda", median=5000.0, judge_call_us=5000.0)
        e.reported_fast_us = fast  # the median agrees with the judge: only the low quantile was rewritten
        d = decide(e)
        assert d.status == status and ("timer_mismatch" in d.flags) == (status == "rejected"), d


def test_the_judges_clock_accuses_only_beyond_its_own_noise():
    """Where the two workers' no-ops disagree, the judge's figure is uncertain by that much, and only a report
    under the bound of the figure less that noise is a contradiction."""
    ratio, slack = TIMER_BOUND["cuda"]
    judge, noise = 5000.0, 1000.0
    for fast, noisy, status in ((ratio * judge - slack - 1, 0.0, "rejected"), (ratio * judge - slack - 1, noise, "correct"),
                                (ratio * (judge - noise) - slack - 1, noise, "rejected")):
        e = honest(device="cuda", median=judge, judge_call_us=judge, judge_noise_us=noisy)
        e.reported_fast_us = fast
        d = decide(e)
        assert d.status == status and ("timer_mismatch" in d.flags) == (status == "rejected"), (fast, noisy, d)


def test_on_the_cpu_the_judges_clock_bounds_the_median():
    ratio, slack = TIMER_BOUND["cpu"]
    edge = ratio * 5000.0 - slack
    for median, status in ((edge + 1, "correct"), (edge - 1, "rejected")):
        e = honest(device="cpu", median=median, judge_call_us=5000.0)
        e.reported_fast_us = median / 3  # an honest loaded host's low quantile alone accuses nobody
        d = decide(e)
        assert d.status == status and ("timer_mismatch" in d.flags) == (status == "rejected"), d


def test_a_wrong_answer_on_the_judges_clock_is_a_timed_mismatch():
    e = honest()
    e.timed.append(TimedVerification(0, 7, ok=False, phase="judge's clock"))
    d = decide(e)
    assert d.status == "rejected" and "timed_output_mismatch" in d.flags and "judge's clock call 0" in d.message


def test_on_the_gpu_the_launched_kernels_decide_the_dummy_kernel_flag_not_the_text():
    text = ["torch_compute_in_forward (line 16)"]
    d = decide(honest(static_warnings=text, own_kernels=False))
    assert d.status == "correct" and "own_kernel_not_launched" in d.flags
    assert not [f for f in d.flags if f.startswith("static:")]
    d = decide(honest(static_warnings=text, own_kernels=True))
    assert d.status == "correct" and "own_kernel_not_launched" not in d.flags
    assert not [f for f in d.flags if f.startswith("static:")]
    d = decide(honest(static_warnings=text))  # no profile: the text's warning stands
    assert "static:torch_compute_in_forward (line 16)" in d.flags and "own_kernel_not_launched" not in d.flags


def test_a_timed_call_whose_output_was_reused_is_a_replay_not_an_exemption():
    e = honest()
    e.timed.append(TimedVerification(3, 9, ok=False, reused=True))
    d = decide(e)
    assert d.status == "rejected" and "replayed_output" in d.flags and "timed_output_mismatch" not in d.flags
    assert "call 3" in d.message


def test_a_check_too_weak_to_tell_a_constant_is_correct_but_flagged_and_unranked():
    weak = replace(OK, weak=True)
    e = honest()
    e.checks = [CheckOutcome(seed=1, phase="check", comparison=weak)]
    d = decide(e)
    assert d.status == "correct" and "weak_check" in d.flags
    assert "weak_check" in decide(honest(device="cpu", checks=e.checks)).flags


def test_host_work_hideable_behind_the_flush_is_taken_off_the_judges_clock_and_no_more():
    """Queued behind the L2 flush, an honest launch-heavy call reports its device time while the judge's clock
    also sees the host work that ran during the flush; the flush's length comes off, a larger gap still rejects."""
    e = honest(median=26.0, judge_call_us=150.0)
    e.reported_fast_us = 26.0
    assert decide(e).status == "rejected"
    e.hidden_us = 90.0
    assert decide(e).status == "correct"
    e.reported_fast_us = 2.0
    d = decide(e)
    assert d.status == "rejected" and "hideable behind the flush" in d.message
