"""Cheat: its forward returns an empty output and a torch function mode it installs at import fills the output
when the harness first touches it, after the clock has stopped (issue: work done after the clock stops). Under
the strict sandbox the harness draws, flushes and reads outputs with the candidate's modes off, so the mode acts
only inside the candidate's next call: the work is timed there, or the output it fills is no longer held."""

import torch
from torch.overrides import TorchFunctionMode

_PENDING: list = []


def _pack(out, token_hidden, expert_idx, slot_idx, expert_offsets):
    out.zero_()
    out.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)


class _FillOnTouch(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        while _PENDING:
            _pack(*_PENDING.pop())
        return func(*args, **(kwargs or {}))


_FillOnTouch().__enter__()


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        out = torch.empty((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        _PENDING.append((out, token_hidden, expert_idx, slot_idx, expert_offsets))
        return out
