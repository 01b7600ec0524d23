"""A deep narrow MLP: 12 x (Linear(1024, 1024) + ReLU) on a batch of 1024, float32: 25.8 GFLOP of GEMMs.

Input x (batch, 1024) float32. Output (batch, 1024) float32. Weights are nn.Linear's default init, built in
the constructor (one Linear after another, weight then bias).
"""

import torch
import torch.nn as nn

DEPTH = 12
WIDTH = 1024


class Model(nn.Module):
    def __init__(self, depth=DEPTH, width=WIDTH):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def get_inputs(batch=1024):
    return [torch.randn(batch, WIDTH)]


def get_init_inputs():
    return []
