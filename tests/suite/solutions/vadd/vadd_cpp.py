"""Honest C++ vector add whose source includes <torch/extension.h> itself."""

import torch
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor suite_vadd_cpp(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) pc[i] = pa[i] + pb[i];
    return c;
}
"""

ext = load_inline(name="suite_vadd_cpp", cpp_sources=source, functions=["suite_vadd_cpp"])


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.suite_vadd_cpp(a.contiguous(), b.contiguous())
