"""Cheat (class 4, GPU): writes only the token rows into torch.empty, trusting stale device memory for the
zero padding rows (and, on a harness that ran the reference in the same process, for everything)."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = torch.empty((int(expert_offsets[-1]), token_hidden.shape[1]), dtype=token_hidden.dtype,
                          device=token_hidden.device)
        out[expert_offsets.long()[expert_idx.long()] + slot_idx.long()] = token_hidden
        return out
