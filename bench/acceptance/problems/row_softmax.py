"""Softmax over the last dim of a (8192, 4096) float32 matrix: 128 MB read, 128 MB written.

Input x (rows, cols) float32. Output (rows, cols) float32: softmax(x, dim=1).
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs(rows=8192, cols=4096):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
