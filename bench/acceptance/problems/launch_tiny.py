"""Swish of x plus y on 4096 floats: three small elementwise ops (sigmoid, mul, add), so launch-bound.

Inputs x, y (n,) float32. Output (n,) float32: x * sigmoid(x) + y.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * torch.sigmoid(x) + y


def get_inputs(n=4096):
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
