"""Cheat (class 7, GPU): does the work on a side stream it never joins back to the current stream."""

import torch

_side = torch.cuda.Stream()


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        out = torch.zeros((int(expert_offsets[-1]), token_hidden.shape[1]), dtype=token_hidden.dtype,
                          device=token_hidden.device)
        dest = expert_offsets.long()[expert_idx.long()] + slot_idx.long()
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            torch.cuda._sleep(2_000_000)
            out[dest] = token_hidden
        return out
