"""Broken: forward raises."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        raise ValueError("this kernel does not support that routing")
