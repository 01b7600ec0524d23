"""Sum of each row of a matrix, scaled by a constructor argument (KernelBench format, level 2)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.sum(dim=1) * self.scale


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [0.5]
