"""Honest, and loud: it says what its stdout and stderr are, then prints 40 MiB at import and a line at every
call. Where the sandbox is strict they are a pipe that the judge drains into a log of capped size: no path is
named, and the log stays under its cap."""

import os
import sys

import torch


def _what(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError as e:
        return f"unreadable ({e})"


print(f"chatty: stdout is {_what(1)}; stderr is {_what(2)}", flush=True)
_CHUNK = "garbage " * 8191 + "garbage\n"
for _ in range(640):
    sys.stdout.write(_CHUNK)
sys.stdout.flush()


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        print("chatty: call", file=sys.stderr)
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
