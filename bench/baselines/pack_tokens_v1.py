"""The bundled problem's first input draw (until the fourteenth session), the baseline of
`bench/draw_cost.py`: only `get_inputs`; the problem itself is problems/pack_tokens.py."""

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
