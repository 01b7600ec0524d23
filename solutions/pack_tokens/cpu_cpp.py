"""Pack tokens on the CPU in C++ (load_inline with cpp_sources only).

It lets the whole harness path, with a real build, run on a machine without a GPU. Any dtype (rows
are copied as bytes); an index that would land outside the output is skipped, never written; rows no
token lands in are zeroed after the scatter, so each output byte is written once.
"""

import torch
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cstring>
#include <vector>
#include <ATen/Parallel.h>

torch::Tensor pack_tokens(torch::Tensor token_hidden, torch::Tensor expert_idx, torch::Tensor slot_idx,
                          torch::Tensor expert_offsets) {
    TORCH_CHECK(token_hidden.device().is_cpu(), "pack_tokens: token_hidden must be a CPU tensor");
    TORCH_CHECK(token_hidden.dim() == 2, "pack_tokens: token_hidden must be 2-D, got ", token_hidden.dim(), "-D");
    for (const auto* t : {&expert_idx, &slot_idx, &expert_offsets}) {
        TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == torch::kInt32 && t->dim() == 1,
                    "pack_tokens: index tensors must be 1-D int32 CPU tensors");
    }
    TORCH_CHECK(expert_offsets.numel() >= 1, "pack_tokens: expert_offsets needs at least one element");
    auto src = token_hidden.contiguous();
    auto e = expert_idx.contiguous();
    auto s = slot_idx.contiguous();
    auto off = expert_offsets.contiguous();
    const int64_t num_tokens = src.size(0);
    TORCH_CHECK(e.numel() == num_tokens && s.numel() == num_tokens, "pack_tokens: one expert and slot per token");
    const int64_t num_experts = off.numel() - 1;
    const int32_t* ep = e.data_ptr<int32_t>();
    const int32_t* sp = s.data_ptr<int32_t>();
    const int32_t* op = off.data_ptr<int32_t>();
    const int64_t total = op[num_experts];
    TORCH_CHECK(total >= 0, "pack_tokens: expert_offsets[-1] is negative");
    auto out = torch::empty({total, src.size(1)}, src.options());
    const int64_t row_bytes = src.size(1) * src.element_size();
    const char* in_bytes = static_cast<const char*>(src.data_ptr());
    char* out_bytes = static_cast<char*>(out.data_ptr());
    std::vector<uint8_t> written(total, 0);
    at::parallel_for(0, num_tokens, 256, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t ex = ep[t];
            if (ex < 0 || ex >= num_experts) continue;
            const int64_t dest = static_cast<int64_t>(op[ex]) + sp[t];
            if (dest < 0 || dest >= total) continue;
            std::memcpy(out_bytes + dest * row_bytes, in_bytes + t * row_bytes, row_bytes);
            written[dest] = 1;
        }
    });
    at::parallel_for(0, total, 1024, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            if (!written[r]) std::memset(out_bytes + r * row_bytes, 0, row_bytes);
        }
    });
    return out;
}
"""

pack_ext = load_inline(name="pack_tokens_cpu", cpp_sources=cpp_source, functions=["pack_tokens"], verbose=False)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return pack_ext.pack_tokens(token_hidden, expert_idx, slot_idx, expert_offsets)
