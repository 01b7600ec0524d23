"""Honest: the reference's arithmetic under torch.compile (inductor, compiled at its first call). Dynamo rewraps
nn.Module.__init__ and inductor starts a compile thread at first use: neither is the candidate's doing."""

import torch


def _pack(token_hidden, expert_idx, slot_idx, expert_offsets, rows: int):
    out = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
    return out.index_copy(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)


_compiled = torch.compile(_pack, dynamic=True)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return _compiled(token_hidden, expert_idx, slot_idx, expert_offsets, int(expert_offsets[-1].item()))
