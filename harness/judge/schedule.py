"""Handing candidates to lanes that can be lost (a cluster's GPUs): which lane gets which candidate next, what
happens to the candidates a lost lane held, and how each record is written once (`dispatch`). No Ray here:
`Lanes` is what the driver needs of a cluster (harness.judge.cluster.RayLanes is Ray's), so all of it runs in
tests with lanes of their own."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from .records import Record, RecordWriter, safe_name
from .verdict import Status

EVERY_LANE_LOST = "every lane was lost"
LOST = "the cluster could not evaluate it: "
ATTEMPTS = 3  # lanes a candidate is handed to before its records say the cluster could not evaluate it
DEPTH = 2  # candidates a lane holds at once while enough wait (Scheduler)


class LaneStartError(RuntimeError):
    """A lane's reference or pipeline failed to start: the cluster is misconfigured, and the run ends."""


@dataclass(frozen=True)
class Candidate:
    name: str
    path: Path
    source: str


@dataclass(frozen=True)
class Evaluated:
    """A lane's answer for one candidate: its records at the shapes asked, and the end of its log."""

    records: list[Record]
    log: bytes = b""


class Lanes(Protocol):
    def submit(self, lane: Hashable, cand: Candidate, shapes: list[str]) -> Hashable:
        """Starts the evaluation; returns its handle."""

    def wait(self, handles: list[Hashable]) -> Hashable:
        """Blocks until one of `handles` has finished (records or an error); returns it."""

    def result(self, handle: Hashable) -> Evaluated:
        """A finished evaluation's answer. Raises LaneStartError where the lane never started, any other
        exception where the lane was lost or failed."""

    def node(self, lane: Hashable) -> str:
        """The host the lane runs on."""

    def drop(self, lane: Hashable, error: BaseException) -> str:
        """The lane is given up (its process ended); returns how to name what happened to it (lost, failed)."""


@dataclass
class Scheduler:
    """lanes: live lanes, in order; items: candidates, each handed out at most `attempts` times. A lane holds
    one candidate while any lane is idle, and up to `depth` once every lane would get one more (its pipeline
    prepares the next while it times one)."""

    lanes: list[Hashable]
    waiting: list[Any]
    depth: int = 2
    attempts: int = 3
    running: dict[Hashable, tuple[Hashable, Any]] = field(default_factory=dict)  # handle -> (lane, item)
    tries: dict[int, int] = field(default_factory=dict)  # id(item) -> times handed out

    def held(self, lane: Hashable) -> int:
        return sum(held_by == lane for held_by, _ in self.running.values())

    def hand_out(self, submit: Callable[[Hashable, Any], Hashable]) -> None:
        """submit(lane, item) starts the evaluation and returns its handle."""
        held = {lane: self.held(lane) for lane in self.lanes}
        for lane in self.lanes:
            if not held[lane] and self.waiting:
                self._give(lane, submit)
                held[lane] = 1
        for lane in self.lanes:
            while held[lane] < self.depth and len(self.waiting) >= len(self.lanes):
                self._give(lane, submit)
                held[lane] += 1

    def _give(self, lane: Hashable, submit: Callable[[Hashable, Any], Hashable]) -> None:
        item = self.waiting.pop(0)
        self.tries[id(item)] = self.tries.get(id(item), 0) + 1
        self.running[submit(lane, item)] = (lane, item)

    def finished(self, handle: Hashable) -> tuple[Hashable, Any]:
        """The lane and item of a handle that returned (records or an error)."""
        return self.running.pop(handle)

    def lost(self, lane: Hashable, item: Any) -> list[tuple[Any, str | None]]:
        """`lane` is gone, `item` (finished with its error) and whatever else it held with it. Each goes back to
        the front of the queue while it has attempts left and a lane remains. Returns those that fail, each with
        None (the lane's error says why) and, once no lane remains, every waiting item with EVERY_LANE_LOST."""
        self.lanes.remove(lane)
        held = [item] + [self.running.pop(h)[1] for h in [h for h, (x, _) in self.running.items() if x == lane]]
        failed: list[tuple[Any, str | None]] = []
        for it in reversed(held):
            if self.tries[id(it)] < self.attempts and self.lanes:
                self.waiting.insert(0, it)
            else:
                failed.insert(0, (it, None))
        if not self.lanes:
            failed += [(it, EVERY_LANE_LOST) for it in self.waiting]
            self.waiting.clear()
        return failed


def failed_records(problem: str, cand: Candidate, shapes: list[str], message: str) -> list[Record]:
    return [Record(solution=cand.name, problem=problem, shape=s, status=Status.RUNTIME_ERROR, message=message[:2000],
                   solution_path=str(cand.path)) for s in shapes]


def dispatch(lanes: Lanes, order: list[Hashable], cands: list[Candidate], shapes: dict[str, list[str]],
             writer: RecordWriter, out: Path, problem: str, say: Callable[[str], None]) -> None:
    """Every candidate evaluated at `shapes[name]` on some lane, each record written once, as the lane decided
    it, with its node, lane number (its place in `order`) and the log the lane sent back, under out/logs. A lost
    lane's candidates go to others (Scheduler); one that no lane could evaluate gets runtime_error records that
    say why. A lane that never started ends the run (RuntimeError)."""
    number = {lane: i for i, lane in enumerate(order)}
    sched = Scheduler(list(order), list(cands), DEPTH, ATTEMPTS)
    while True:
        sched.hand_out(lambda lane, cand: lanes.submit(lane, cand, shapes[cand.name]))
        if not sched.running:
            return
        handle = lanes.wait(list(sched.running))
        lane, cand = sched.finished(handle)
        try:
            answer = lanes.result(handle)
        except LaneStartError as e:
            raise RuntimeError(f"a cluster lane on {lanes.node(lane)} failed to start: {e}") from None
        except Exception as e:  # noqa: BLE001  (a lost lane re-queues; any other failure retries elsewhere)
            what = lanes.drop(lane, e)
            say(f"[yellow]lane on {lanes.node(lane)} {what}:[/] {type(e).__name__}; its candidates go to another lane")
            for c, why in sched.lost(lane, cand):
                for rec in failed_records(problem, c, shapes[c.name], LOST + (why or f"{type(e).__name__}: {e}")):
                    writer.write(rec)
            continue
        log = out / "logs" / f"{safe_name(cand.name)}.log"
        log.parent.mkdir(exist_ok=True)
        log.write_bytes(answer.log)
        for rec in answer.records:
            writer.write(replace(rec, solution_path=str(cand.path), node=lanes.node(lane), lane=number[lane],
                                 log=str(log)))
