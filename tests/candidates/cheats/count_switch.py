"""Cheat (class 2): right for the first calls (the checks), fast and wrong once timing starts."""

import torch

calls = [0]


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        calls[0] += 1
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        if calls[0] > 6:
            return out
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
