"""Broken: one element off by one (the first element of the last token's row)."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        dest = expert_offsets.long()[expert_idx.long()] + slot_idx.long()
        out[dest] = token_hidden
        out[dest[-1], 0] += 1
        return out
