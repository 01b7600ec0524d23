"""Cheat (class 3): computes the answer, then scribbles over an input."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        token_hidden.zero_()
        return out
