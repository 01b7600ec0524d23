"""The pack-tokens problem until the fourteenth session (its first `get_inputs`): the baseline of
`bench/draw_cost.py`.

Inputs: token_hidden (num_tokens, hidden_dim) float32/bfloat16/float16; expert_idx, slot_idx
(num_tokens,) int32; expert_offsets (num_experts + 1,) int32, non-decreasing, first element 0.
Output (expert_offsets[-1], hidden_dim), dtype of token_hidden:
    out[expert_offsets[expert_idx[t]] + slot_idx[t]] = token_hidden[t] for every token t,
and zeros in every row no token lands in (capacity padding).
"""

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Model(nn.Module):
    """Idiomatic vectorized PyTorch: index arithmetic and one indexed assignment."""

    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        total = int(expert_offsets[-1].item())
        out = token_hidden.new_zeros((total, token_hidden.shape[1]))
        dest = expert_offsets.long()[expert_idx.long()] + slot_idx.long()
        out[dest] = token_hidden
        return out


def get_inputs(num_tokens=2048, hidden_dim=128, num_experts=16, dtype="float32", pad_to=None):
    """One routing draw: skewed expert loads, some experts switched off, random slot order."""
    token_hidden = torch.randn(num_tokens, hidden_dim, dtype=DTYPES[dtype])
    weights = torch.rand(num_experts) ** 2 + 0.02
    off = torch.rand(num_experts) < 0.125
    off[torch.randint(num_experts, (1,))] = False
    weights = torch.where(off, torch.zeros_like(weights), weights)
    if num_tokens:
        expert = torch.multinomial(weights, num_tokens, replacement=True)
    else:
        expert = torch.zeros(0, dtype=torch.long)
    counts = torch.bincount(expert, minlength=num_experts)
    order = torch.randperm(num_tokens)
    _, perm = torch.sort(expert[order], stable=True)
    grouped = order[perm]
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty(num_tokens, dtype=torch.long)
    slot[grouped] = torch.arange(num_tokens) - starts[expert[grouped]]
    seg = (counts + pad_to - 1) // pad_to * pad_to if pad_to else counts
    offsets = torch.zeros(num_experts + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(seg, 0)
    return [token_hidden, expert.int(), slot.int(), offsets.int()]


def get_init_inputs():
    return []
