"""The bundled problem's draw of the fourteenth and fifteenth sessions (until 9d77beb): running sums in
float32 on the device. The baseline of `bench/draw_repeat.py`: only `get_inputs`; the problem itself is
problems/pack_tokens.py."""

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def get_inputs(num_tokens=2048, hidden_dim=128, num_experts=16, dtype="float32", pad_to=None, device=None):
    """One routing draw: skewed expert loads, some experts switched off, random slot order.

    Written for the device, since the harness draws a fresh set for every timed call: no host sync, tensors
    placed on `device` directly (the harness then runs no factory-default mode around the draw). On the H200
    (bench/draw_cost.py, docs/benchmarks.md, fourteenth session): 28 kernels and 0.43 ms a draw at seed,
    0.47-0.62 ms on the large shapes, against 50-82 kernels, three host syncs and 0.80-1.00 ms for the first
    version (multinomial, randperm, a stable sort, bincount)."""
    n, e = num_tokens, num_experts
    token_hidden = torch.randn(n, hidden_dim, dtype=DTYPES[dtype], device=device)
    u = torch.rand(2 * e + n, device=device)
    load, gate, key = u[:e], u[e:2 * e], u[2 * e:]
    # About one expert in eight off. If every one is, the clamp below sends every token to the last.
    cdf = torch.cumsum(torch.where(gate < 0.125, 0.0, load * load + 0.02), 0)
    # Positions in expert-major order: n sorted uniforms (running sums of exponentials over their total)
    # mapped through the loads' CDF. Token t takes position pos[t] of a uniformly random permutation, so
    # its expert is an independent draw from the loads and its slot a random rank among that expert's tokens.
    walk = torch.cumsum(torch.empty(n + 1, device=device).exponential_(), 0)
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
