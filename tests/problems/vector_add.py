"""Add two float32 vectors: a tiny problem for timing tests (graph replay, launch-bound detection)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs(n=1 << 20):
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
