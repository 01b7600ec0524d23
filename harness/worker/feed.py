"""Fresh inputs for every timed call, drawn in batches ahead of the calls, verified after the fact."""

from typing import Any

import torch

from ..protocol import OVERWRITTEN
from ..seeds import derive
from .outputs import plain_outputs, poison, storage_span, tensor_bytes

STOCK_SETS = 16
STOCK_BYTES = {"cuda": 8 * 2**30, "cpu": 1 * 2**30}


def stock_sets(device: str, per_set: int) -> int:
    """Input sets drawn at once: up to STOCK_SETS, within STOCK_BYTES and a quarter of the free memory."""
    budget = STOCK_BYTES.get(device, STOCK_BYTES["cpu"])
    if device == "cuda":
        budget = min(budget, torch.cuda.mem_get_info()[0] // 4)
    return max(1, min(STOCK_SETS, budget // max(per_set, 1)))


def poison_size(free: int, nbytes: int, holders: int = 1) -> int:
    """Within a quarter of the free memory shared by the `holders` (a lane's idle spares each keep a block
    cached), so on a small GPU the worker being evaluated still finds most of the memory free."""
    return max(0, min(nbytes, free // (4 * max(1, holders))))


class TimedFeed:
    """Call i runs once on seed derive(base_seed, i)'s inputs. Outputs are held and verified (with the inputs)
    at a batch's end, so between calls the host only flushes and syncs: a call right after host work measured
    up to ~100 us slower on the H200. Once an output reuses a held storage, calls settle as they return."""

    def __init__(self, worker: Any, base_seed: int, projection: bool | None, draw: bool = True):
        self.w, self.base, self.draw = worker, base_seed, draw
        self.verify, self.projection = projection is not None, bool(projection)
        self.sets: dict[int, list] = {0: worker.inputs(derive(base_seed, 0)) if draw else []}
        self.in_bytes = tensor_bytes(self.sets[0])
        self.pending: list[tuple[int, list, list, set[int]]] = []  # call, inputs, outputs, storages
        self.calls: dict[int, tuple | str] = {}
        self.k = self.out_bytes = 0
        self.immediate = False

    def take(self, i: int) -> tuple[list, bool]:
        """Call i's inputs, and whether call i may be sampled."""
        fresh = i not in self.sets
        if fresh:
            self.settle()
            self.k = self.k or stock_sets(self.w.device, self.in_bytes + self.out_bytes)
            self.sets = {j: self.w.inputs(derive(self.base, j)) if self.draw else []
                         for j in range(i, i + self.k)}
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
        """Fingerprint every held call (one exact_many, read back at once), then poison and release them."""
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
