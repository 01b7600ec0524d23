"""Swish (x * sigmoid(x)) of 64M floats: 256 MB read, 256 MB written, so bandwidth-bound.

Input x (n,) float32. Output (n,) float32: x * sigmoid(x).
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


def get_inputs(n=64 * 1024 * 1024):
    return [torch.randn(n)]


def get_init_inputs():
    return []
