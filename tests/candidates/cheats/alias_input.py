"""Cheat (class 6): hands back an input's own memory, rewritten in place, as the output."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        if out.shape == token_hidden.shape:
            token_hidden.copy_(out)
            return token_hidden
        return out
