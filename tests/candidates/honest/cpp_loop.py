"""Honest C++ variant for CPU runs: a plain serial loop, zero-filled output (a different build from cpu_cpp)."""

import torch
from torch.utils.cpp_extension import load_inline

source = r"""
torch::Tensor pack_loop(torch::Tensor x, torch::Tensor e, torch::Tensor s, torch::Tensor off) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "pack_loop: token_hidden must be 2-D and contiguous");
    const int64_t total = off[off.numel() - 1].item<int>();
    auto out = torch::zeros({total, x.size(1)}, x.options());
    auto ea = e.accessor<int, 1>();
    auto sa = s.accessor<int, 1>();
    auto oa = off.accessor<int, 1>();
    for (int64_t t = 0; t < x.size(0); ++t) {
        out[oa[ea[t]] + sa[t]].copy_(x[t]);
    }
    return out;
}
"""

ext = load_inline(name="pack_loop_test", cpp_sources=source, functions=["pack_loop"])


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return ext.pack_loop(token_hidden, expert_idx, slot_idx, expert_offsets)
