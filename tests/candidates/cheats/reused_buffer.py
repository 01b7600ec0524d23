"""Cheat (issue class 1: output reuse): every call rewrites the same tensor and returns it, so an earlier
call's output changes when the next call runs. A drop-in replacement returns fresh outputs."""

import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        shape = (rows, token_hidden.shape[1])
        if self.out is None or self.out.shape != shape or self.out.dtype != token_hidden.dtype:
            self.out = torch.empty(shape, dtype=token_hidden.dtype, device=token_hidden.device)
        self.out.zero_()
        self.out.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return self.out
