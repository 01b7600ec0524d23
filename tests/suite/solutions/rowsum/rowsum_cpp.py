"""Honest C++ scaled row sum; takes the constructor argument as the reference does."""

import torch
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor suite_rowsum(torch::Tensor x, double scale) {
    auto y = torch::empty({x.size(0)}, x.options());
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < x.size(0); ++r) {
        double acc = 0.0;
        for (int64_t c = 0; c < x.size(1); ++c) acc += px[r * x.size(1) + c];
        py[r] = static_cast<float>(acc * scale);
    }
    return y;
}
"""

ext = load_inline(name="suite_rowsum", cpp_sources=source, functions=["suite_rowsum"])


class ModelNew(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.suite_rowsum(x.contiguous(), self.scale)
