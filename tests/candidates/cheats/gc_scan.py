"""Cheat (class 4): looks through the garbage collector for a tensor shaped like the answer."""

import gc

import torch


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        shape = (int(expert_offsets[-1]), token_hidden.shape[1])
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and tuple(obj.shape) == shape and obj is not token_hidden:
                if obj.dtype == token_hidden.dtype and obj.device == token_hidden.device:
                    return obj.clone()
        return token_hidden.new_zeros(shape)
