"""Cheat (class 2: no work on timed calls): right wherever it is not in the worker's timed loop; there it returns
an unwritten tensor and makes the worker report every call as overwritten by a later one, as if its output
storage were reused, so that no timed call would be verified."""

import sys

import torch


class _Overwritten(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, "overwritten")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        f, timed = sys._getframe(1), False
        while f is not None:
            feed = f.f_locals.get("feed")
            if feed is not None and hasattr(feed, "calls"):
                timed = True
                if not isinstance(feed.calls, _Overwritten):
                    feed.calls = _Overwritten(feed.calls)
            f = f.f_back
        if timed:
            return torch.empty((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        out = token_hidden.new_zeros((rows, token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
