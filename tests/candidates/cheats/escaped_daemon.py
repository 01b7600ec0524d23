"""Cheat: at import, a double fork leaves a daemon in a session of its own (outside the worker's process group,
its parent gone) that works whenever the worker is stopped, that is while the reference it is compared with is
timed, and outlives the run. The answer itself is honest. The judge kills such orphans before it stops the
worker, and at the end: the daemon never runs while the worker is stopped, and nothing of it is left."""

import ctypes
import os
import time

import torch

PR_SET_NAME = 15


def _daemon(watched: int) -> None:
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(PR_SET_NAME, b"kbh-escaped", 0, 0, 0)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            with open(f"/proc/{watched}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "gone"
        if state in ("T", "t"):
            print("escaped daemon: ran while the worker was stopped", flush=True)
            sum(range(100_000))
        time.sleep(0.002)
    os._exit(0)


_watched = os.getpid()
if os.fork() == 0:
    try:
        _daemon(_watched)
    finally:
        os._exit(0)
os.wait()


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
