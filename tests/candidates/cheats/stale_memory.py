"""Cheat (class 4): returns uninitialized memory, hoping the reference's freed output is still there."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return torch.empty((int(expert_offsets[-1]), token_hidden.shape[1]), dtype=token_hidden.dtype,
                           device=token_hidden.device)
