"""Cheat: its forward returns an empty output, and an audit hook (which nothing can remove) fills it at the first
audited event after the call. It sets a do-nothing profile function in each call, so that the harness, switching
hooks off once the clock has stopped, raises such an event (`sys.setprofile`). Under the strict sandbox a
profile function found around timed calls is reported as a patched runtime, and where none is set the harness
raises no audited event between a call and its output's read."""

import sys

import torch

_PENDING: list = []


def _pack(out, token_hidden, expert_idx, slot_idx, expert_offsets):
    out.zero_()
    out.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)


def _fill(event, args):
    while _PENDING:
        _pack(*_PENDING.pop())


def _noop(frame, event, arg):
    return None


sys.addaudithook(_fill)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        sys.setprofile(_noop)
        rows = int(expert_offsets[-1].item())
        out = torch.empty((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        _PENDING.append((out, token_hidden, expert_idx, slot_idx, expert_offsets))
        return out
