"""C++ vector add that subtracts: wrong everywhere."""

import torch
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor vsub_cpp(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) pc[i] = pa[i] - pb[i];
    return c;
}
"""

ext = load_inline(name="vsub_cpp", cpp_sources=source, functions=["vsub_cpp"])


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.vsub_cpp(a.contiguous(), b.contiguous())
