"""Handing candidates to lanes that can be lost (a cluster's GPUs): which lane gets which candidate next, and what
happens to the candidates a lost lane held. No Ray here: the cluster driver submits and waits, this decides."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

EVERY_LANE_LOST = "every lane was lost"


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
