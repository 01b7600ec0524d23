"""Broken: C++ that does not compile (undeclared identifier)."""

import torch
from torch.utils.cpp_extension import load_inline

source = r"""
torch::Tensor broken(torch::Tensor x) {
    return x + undeclared_thing;
}
"""

ext = load_inline(name="broken_compile_test", cpp_sources=source, functions=["broken"])


class ModelNew(torch.nn.Module):
    def forward(self, *args):
        return ext.broken(args[0])
