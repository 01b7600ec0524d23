"""Fresh inputs for every timed call, drawn in batches ahead of the calls, and the calls verified after the fact."""

from __future__ import annotations

from typing import Any

import torch

from ..protocol import OVERWRITTEN
from ..seeds import derive
from .outputs import plain_outputs, poison, storage_span, tensor_bytes

STOCK_SETS = 16
STOCK_BYTES = {"cuda": 8 * 2**30, "cpu": 1 * 2**30}


def stock_sets(device: str, per_set: int) -> int:
    """How many input sets (with their outputs) to draw at once: up to STOCK_SETS, within STOCK_BYTES and a
    quarter of the device's free memory."""
    budget = STOCK_BYTES.get(device, STOCK_BYTES["cpu"])
    if device == "cuda":
        budget = min(budget, torch.cuda.mem_get_info()[0] // 4)
    return max(1, min(STOCK_SETS, budget // max(per_set, 1)))


def poison_size(free: int, nbytes: int, holders: int = 1) -> int:
    """A poisoned block's size: nbytes, and at most a quarter of the free memory shared among the `holders` that
    may keep one at once (a lane's idle spares each keep theirs in their caching allocator), so on a small GPU
    the worker being evaluated still finds most of the memory free."""
    return max(0, min(nbytes, free // (4 * max(1, holders))))


class TimedFeed:
    """Inputs and verification for a timing loop. Call i runs on seed derive(base_seed, i)'s inputs, each set
    used by one call only. Sets are drawn up to STOCK_SETS at a time ahead of the calls that use them, and (when
    verifying) every call's outputs are held until its batch ends; then each call of the batch is fingerprinted
    (outputs, and inputs to catch mutation), its outputs and inputs are poisoned, and all are released. So
    between two calls of a batch the host only flushes and syncs: a call right after host work measured up to
    ~100 us slower on the H200. The call right after a draw is made and verified, not sampled. Work a call
    leaves running on another stream is still caught when it returns: the host's full sync waits for it, past
    the last event (`work_outside_timing`).

    A candidate that returns the same storage from call to call (a reused output buffer) has overwritten the
    held outputs of its earlier calls: those calls are reported as OVERWRITTEN (the judge does not sample them)
    and every later call is fingerprinted, then poisoned, right after it returns.

    With draw False (the floors' stand-ins, which ignore their inputs) every call gets no inputs, and the batches
    keep their size and their settling: the calls sampled are made exactly as with draws."""

    def __init__(self, worker: Any, base_seed: int, projection: bool | None, draw: bool = True):
        self.w = worker
        self.base = base_seed
        self.verify = projection is not None
        self.projection = bool(projection)
        self.draw = draw
        self.sets: dict[int, list] = {0: worker.inputs(derive(base_seed, 0)) if draw else []}
        self.in_bytes = tensor_bytes(self.sets[0])
        self.pending: list[tuple[int, list, list[torch.Tensor], set[int]]] = []  # call, inputs, outputs, storages
        self.calls: dict[int, tuple | str] = {}
        self.k = 0
        self.out_bytes = 0
        self.immediate = False

    def take(self, i: int) -> tuple[list, bool]:
        """Call i's inputs, and whether call i may be sampled."""
        fresh = i not in self.sets
        if fresh:
            self.settle()
            self.k = self.k or stock_sets(self.w.device, self.in_bytes + self.out_bytes)
            self.sets = {j: self.w.inputs(derive(self.base, j)) if self.draw else [] for j in range(i, i + self.k)}
        return self.sets.pop(i), i > 0 and (self.k == 1 or not fresh)

    def hold(self, i: int, args: list, out: Any) -> None:
        outs = plain_outputs(out)
        self.out_bytes = max(self.out_bytes, tensor_bytes(outs))
        if not self.verify:
            return
        mine = {storage_span(o)[0] for o in outs if o.numel()}
        reused = [p for p in self.pending if p[3] & mine]
        for p in reused:
            self.calls[p[0]] = OVERWRITTEN
            self.pending.remove(p)
        self.immediate = self.immediate or bool(reused)
        self.pending.append((i, args, outs, mine))
        if self.immediate:
            self.settle()

    def settle(self) -> None:
        """Fingerprint every held call of the batch (all its tensors in one exact_many, read back at once), then
        poison and release them."""
        if not self.pending:
            return
        fp = self.w.fp
        tensors, spans = [], []
        for _, args, outs, _ in self.pending:
            ins = [x for x in args if isinstance(x, torch.Tensor)]
            spans.append((len(tensors), len(outs), len(ins)))
            tensors += outs + ins
        exact = fp.exact_many(tensors).tolist()
        for (i, _, outs, _), (at, n_out, n_in) in zip(self.pending, spans):
            projs = torch.stack([fp.projection(o) for o in outs]).tolist() if self.projection else None
            self.calls[i] = (exact[at:at + n_out], projs, exact[at + n_out:at + n_out + n_in])
            poison(tensors[at:at + n_out + n_in])
        self.pending.clear()
