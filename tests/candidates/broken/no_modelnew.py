"""Broken: defines a model under the wrong name."""

import torch


class ModelNeu(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return token_hidden
