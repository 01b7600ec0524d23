"""Cheat (class 2): right on the checks and on most timed calls, but every eighth timed call skips the
work and returns at once: a speedup read at a low quantile would rest on those calls alone, and a random
sample of 16 verified calls misses all of them about one time in eight."""

import torch

calls = [0]
_weight = torch.randn(160, 160)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        calls[0] += 1
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        if calls[0] > 8 and calls[0] % 8 == 0:
            return out
        for _ in range(4):
            _weight.mm(_weight)
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
