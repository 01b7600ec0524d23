"""Pack token activations into expert-major order for MoE execution.

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


def get_inputs(num_tokens=2048, hidden_dim=128, num_experts=16, dtype="float32", pad_to=None, device=None):
    """One routing draw: skewed expert loads, some experts switched off, random slot order.

    Written for the device, since the harness draws a fresh set for every timed call: no host sync, tensors
    placed on `device` directly (the harness then runs no factory-default mode around the draw). On the H200
    (bench/draws.py cost), as the harness draws: 34 kernels and 0.41 ms a draw at seed, 0.52-0.64 ms on the
    large shapes; a draw through multinomial, randperm, a stable sort and bincount took 50-82 kernels, three
    host syncs and 0.80-1.00 ms.

    Repeatable by seed on every device: the judge and the candidate's worker draw the same seed apart and
    compare fingerprints, so a draw that differed would reject an honest kernel. Running sums are taken over
    integers (fixed point, 2^-24): a floating-point cumsum on CUDA is not deterministic (its scan adds in
    an order set by timing; `torch.use_deterministic_algorithms` lists it), and one differing last bit moves
    a token to the next expert. The same draw with float cumsums, outside that mode, gave other bytes in 1 of
    2,000 repeats at deepseek on the H200, rejecting an honest kernel at that rate."""
    n, e = num_tokens, num_experts
    token_hidden = torch.randn(n, hidden_dim, dtype=DTYPES[dtype], device=device)
    u = torch.rand(2 * e + n, device=device)
    load, gate, key = u[:e], u[e:2 * e], u[2 * e:]
    # About one expert in eight off. If every one is, the clamp below sends every token to the last.
    cdf = torch.cumsum(_fixed_point(torch.where(gate < 0.125, 0.0, load * load + 0.02)), 0).double()
    # Positions in expert-major order: n sorted uniforms (running sums of exponentials over their total)
    # mapped through the loads' CDF. Token t takes position pos[t] of a uniformly random permutation, so
    # its expert is an independent draw from the loads and its slot a random rank among that expert's tokens.
    walk = torch.cumsum(_fixed_point(torch.empty(n + 1, device=device).exponential_()), 0).double()
    expert_at = torch.searchsorted(cdf, walk[:n] * (cdf[-1] / walk[-1]), right=True, out_int32=True)
    expert_at.clamp_(max=e - 1)
    bounds = torch.searchsorted(expert_at, torch.arange(e + 1, dtype=torch.int32, device=device), out_int32=True)
    pos = torch.argsort(key)
    expert = expert_at[pos]
    slot = (pos - bounds[expert]).int()
    if not pad_to:
        return [token_hidden, expert, slot, bounds]
    counts = bounds.diff()
    offsets = torch.zeros(e + 1, dtype=torch.int32, device=device)
    offsets[1:] = torch.cumsum((counts + pad_to - 1) // pad_to * pad_to, 0)
    return [token_hidden, expert, slot, offsets]


def _fixed_point(x):
    """Non-negative floats as int64 fixed point (2^-24), whose running sums are exact in any order."""
    return (x * 2**24).long()


def get_init_inputs():
    return []
