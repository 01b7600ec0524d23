"""Cheat (class 1): replays its first output for every later call with the same input shape."""

import torch

_by_shape = {}


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        key = tuple(token_hidden.shape)
        if key not in _by_shape:
            out = token_hidden.new_zeros((int(expert_offsets[-1]), token_hidden.shape[1]))
            out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
            _by_shape[key] = out
        return _by_shape[key].clone()
