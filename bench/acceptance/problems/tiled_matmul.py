"""Square float32 matmul, 2048^3: 17.2 GFLOP over 48 MB of operands and result, so compute-bound.

Inputs a (m, k), b (k, n) float32. Output (m, n) float32: a @ b, in true float32 (torch's default: no TF32).
`a` is scaled by k^-0.5 so the result is O(1): with k = 2048, float32 accumulation in any order stays about
20x inside the default tolerance (1e-4 + 1e-4 * |ref|).
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs(m=2048, k=2048, n=2048):
    return [torch.randn(m, k) * k**-0.5, torch.randn(k, n)]


def get_init_inputs():
    return []
