"""Cheat: stops (SIGSTOP) the judge, the fork server and every other process the fork server started (the
reference worker, spares, other candidates), so the reference's rounds stall or the run hangs; logs each
attempt's outcome. Under Landlock ABI 6 or later a worker can signal only processes of its own domain."""

import os
import signal

import torch


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _stop_others() -> None:
    me, server = os.getpid(), os.getppid()
    targets = {server, _ppid(server)}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(entry) != me and _ppid(int(entry)) == server:
                targets.add(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    for pid in sorted(targets):
        try:
            os.kill(pid, signal.SIGSTOP)
            print(f"signal_others: stopped {pid}", flush=True)
        except OSError as e:
            print(f"signal_others: refused {pid}: {e.strerror}", flush=True)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        _stop_others()
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
