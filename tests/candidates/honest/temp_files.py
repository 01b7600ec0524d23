"""Honest, Python only, and writes scratch files as real candidates do (a temporary file at import and in its
first call, as compilers and autotuners do): the write sandbox must leave that working."""

import os
import tempfile

import torch

with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
    f.write("tile=64\n")
_CONFIG = f.name


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        if os.path.exists(_CONFIG):
            with tempfile.TemporaryDirectory() as d, open(os.path.join(d, "tuned.txt"), "w") as g:
                g.write(open(_CONFIG).read())
            os.unlink(_CONFIG)
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
