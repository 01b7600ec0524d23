"""Cheat: plants a file in the reference's Triton and inductor cache (a compiled kernel there would change the
torch.compile reference it is timed against). Its path comes from $PLANT_AT, as a test gives it; a real cheat
would read it off the reference worker's environment. The sandbox must refuse the write."""

import os

import torch

_target = os.environ.get("PLANT_AT")
if _target:
    try:
        os.makedirs(os.path.dirname(_target), exist_ok=True)
        with open(_target, "w") as f:
            f.write("planted\n")
    except OSError:
        pass


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
