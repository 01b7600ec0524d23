"""The cluster's scheduling without Ray: lanes as names, evaluations as handles the test finishes or loses."""

import itertools

from harness.judge.schedule import EVERY_LANE_LOST, Scheduler


class Lanes:
    """Records what was submitted where; handles are numbers."""

    def __init__(self):
        self.count = itertools.count()
        self.given: list[tuple[str, str]] = []

    def __call__(self, lane, item):
        self.given.append((lane, item[0]))
        return next(self.count)


def items(n: int) -> list[tuple[str]]:
    return [(f"c{i}",) for i in range(n)]


def test_every_lane_gets_one_before_any_gets_a_second_and_none_more_than_depth():
    s, sub = Scheduler(["a", "b", "c"], items(4), depth=2), Lanes()
    s.hand_out(sub)
    assert sorted(lane for lane, _ in sub.given) == ["a", "b", "c"]  # 4 waiting, 3 lanes: one each
    assert len(s.waiting) == 1
    s = Scheduler(["a", "b"], items(9), depth=2)
    sub = Lanes()
    s.hand_out(sub)
    assert {lane: s.held(lane) for lane in "ab"} == {"a": 2, "b": 2}
    assert len(s.waiting) == 5


def test_each_candidate_is_finished_once_in_the_order_handed_out():
    s, sub = Scheduler(["a", "b"], items(5), depth=2), Lanes()
    done = []
    while True:
        s.hand_out(sub)
        if not s.running:
            break
        handle = min(s.running)
        done.append(s.finished(handle)[1][0])
    assert sorted(done) == [f"c{i}" for i in range(5)] and len(done) == 5
    assert len(sub.given) == 5


def on(s: Scheduler, lane: str) -> dict:
    return {h: it for h, (x, it) in s.running.items() if x == lane}


def test_a_lost_lanes_candidates_go_first_to_another_lane():
    s, sub = Scheduler(["a", "b"], items(6), depth=2), Lanes()
    s.hand_out(sub)
    held = on(s, "a")
    assert len(held) == 2
    lane, item = s.finished(next(iter(held)))
    assert s.lost(lane, item) == [] and s.lanes == ["b"]
    assert s.waiting[:2] == list(held.values())  # at the front of the queue, in their order
    s.finished(next(iter(on(s, "b"))))
    s.hand_out(sub)
    assert sub.given[-1] == ("b", item[0])


def test_a_candidate_out_of_attempts_fails_with_the_lanes_error_and_the_rest_when_no_lane_is_left():
    s, sub = Scheduler(["a", "b", "c"], items(4), depth=1, attempts=2), Lanes()
    s.hand_out(sub)  # a: c0, b: c1, c: c2; c3 waits
    lane, c0 = s.finished(next(iter(on(s, "a"))))
    assert s.lost(lane, c0) == [] and s.waiting == [c0, ("c3",)]  # its first attempt: back in front
    s.finished(next(iter(on(s, "b"))))  # c1 done
    s.hand_out(sub)
    assert sub.given[-1] == ("b", "c0")
    lane, item = s.finished(next(iter(on(s, "b"))))
    assert s.lost(lane, item) == [(c0, None)]  # its second attempt was its last
    lane, c2 = s.finished(next(iter(on(s, "c"))))
    assert s.lost(lane, c2) == [(c2, None), (("c3",), EVERY_LANE_LOST)]
    assert s.lanes == [] and s.waiting == [] and s.running == {}
