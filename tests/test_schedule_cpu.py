"""The cluster's scheduling and driver without Ray: lanes as names, evaluations as handles the test finishes or
loses."""

import itertools
import json
from pathlib import Path

import pytest

from harness.judge.records import Record, RecordWriter
from harness.judge.schedule import (
    EVERY_LANE_LOST,
    LOST,
    Candidate,
    Evaluated,
    LaneStartError,
    Scheduler,
    dispatch,
)


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


class FakeLanes:
    """schedule.Lanes in this process: an evaluation answers `correct` at each shape asked, with a log naming the
    lane, oldest first; a lane in `lose` is lost at its Nth answer, and every answer it still owes fails with it."""

    def __init__(self, lose: dict | None = None, unstarted: tuple = ()):
        self.count = itertools.count()
        self.jobs: dict[int, tuple] = {}
        self.lose, self.unstarted = dict(lose or {}), set(unstarted)
        self.answered: dict[str, int] = {}
        self.gone: set[str] = set()
        self.dropped: list[str] = []

    def submit(self, lane, cand, shapes):
        h = next(self.count)
        self.jobs[h] = (lane, cand, list(shapes))
        return h

    def wait(self, handles):
        return min(handles)

    def result(self, h):
        lane, cand, shapes = self.jobs[h]
        if lane in self.unstarted:
            raise LaneStartError("the reference worker failed to start")
        self.answered[lane] = self.answered.get(lane, 0) + 1
        if lane in self.gone or self.answered[lane] == self.lose.get(lane):
            self.gone.add(lane)
            raise ConnectionError(f"{lane} is gone")
        return Evaluated([Record(solution=cand.name, problem="p", shape=s, status="correct") for s in shapes],
                         f"{cand.name} on {lane}".encode())

    def node(self, lane):
        return f"host-{lane}"

    def drop(self, lane, error):
        self.dropped.append(lane)
        return "lost"


def _run(tmp_path: Path, lanes: FakeLanes, order: list, n: int, shapes=("small", "large")):
    cands = [Candidate(f"c{i}", tmp_path / f"c{i}.py", "source") for i in range(n)]
    writer = RecordWriter(tmp_path / "results.jsonl")
    said: list[str] = []
    dispatch(lanes, order, cands, {c.name: list(shapes) for c in cands}, writer, tmp_path, "p", said.append)
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    return lines, said


def test_a_lane_lost_mid_run_loses_no_record_and_duplicates_none(tmp_path):
    lanes = FakeLanes(lose={"b": 2})
    lines, said = _run(tmp_path, lanes, ["a", "b"], 6)
    assert sorted((r["solution"], r["shape"]) for r in lines) == sorted(
        (f"c{i}", s) for i in range(6) for s in ("small", "large"))
    assert {r["status"] for r in lines} == {"correct"} and lanes.dropped == ["b"]
    assert any("host-b lost" in line for line in said)
    by_lane = {r["solution"]: (r["node"], r["lane"]) for r in lines}
    assert set(by_lane.values()) <= {("host-a", 0), ("host-b", 1)} and ("host-b", 1) in by_lane.values()
    for r in lines:  # each record names the log its own lane sent back
        lane = r["node"][-1]
        assert Path(r["log"]).read_text() == f"{r['solution']} on {lane}"
        assert r["solution_path"] == str(tmp_path / f"{r['solution']}.py")


def test_candidates_no_lane_could_evaluate_get_records_that_say_so(tmp_path):
    lines, _ = _run(tmp_path, FakeLanes(lose={"a": 1, "b": 1}), ["a", "b"], 3, shapes=("small",))
    assert sorted(r["solution"] for r in lines) == ["c0", "c1", "c2"]
    assert {r["status"] for r in lines} == {"runtime_error"}
    assert all(r["message"].startswith(LOST) for r in lines)
    assert any(EVERY_LANE_LOST in r["message"] for r in lines)


def test_a_lane_that_never_started_ends_the_run_naming_its_host(tmp_path):
    with pytest.raises(RuntimeError, match="host-b failed to start"):
        _run(tmp_path, FakeLanes(unstarted=("b",)), ["a", "b"], 4)
