"""The pack-tokens kernel as first written for the original task: one warp per token, float4 copies.

Kept exactly as submitted: it is the example of a candidate, not a model to copy. What the harness
shows it failing, and why:
- mixtral and deepseek (bfloat16): runtime_error. It is float32 only; `data_ptr<float>()` refuses a
  bfloat16 tensor.
- odd (hidden 130, rows of 520 bytes): runtime_error, CUDA "misaligned address". Every other row
  starts 8 bytes past a 16-byte boundary, and its float4 loads fault. (Were the rows aligned, the two
  floats past the last whole float4 of each row would still be skipped.)
- It is correct on seed and wide, but slow there: `torch::zeros` writes the whole output before the
  scatter writes it again (three passes over the output's bytes instead of two), and the row count is
  read with `.item()`, a host sync inside the call.
- It launches on the legacy default stream (`<<<grid, block>>>` with no stream), not on PyTorch's
  current stream, so it is not CUDA-graph safe (`not_graph_safe`).
"""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
__global__ void pack_tokens_kernel(const float* token_hidden, const int* expert_idx, const int* slot_idx,
                                   const int* expert_offsets, float* out, int num_tokens, int hidden_dim) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= num_tokens) return;
    int dest = expert_offsets[expert_idx[warp]] + slot_idx[warp];
    const float4* src = reinterpret_cast<const float4*>(token_hidden + (size_t)warp * hidden_dim);
    float4* dst = reinterpret_cast<float4*>(out + (size_t)dest * hidden_dim);
    for (int i = lane; i < hidden_dim / 4; i += 32) {
        dst[i] = src[i];
    }
}

torch::Tensor pack_tokens(torch::Tensor token_hidden, torch::Tensor expert_idx, torch::Tensor slot_idx,
                          torch::Tensor expert_offsets) {
    int num_tokens = token_hidden.size(0);
    int hidden_dim = token_hidden.size(1);
    int total = expert_offsets[-1].item<int>();
    auto out = torch::zeros({total, hidden_dim}, token_hidden.options());
    int threads = 256;
    int blocks = (num_tokens * 32 + threads - 1) / threads;
    pack_tokens_kernel<<<blocks, threads>>>(token_hidden.data_ptr<float>(), expert_idx.data_ptr<int>(),
                                            slot_idx.data_ptr<int>(), expert_offsets.data_ptr<int>(),
                                            out.data_ptr<float>(), num_tokens, hidden_dim);
    return out;
}
"""

cpp_source = (
    "torch::Tensor pack_tokens(torch::Tensor token_hidden, torch::Tensor expert_idx, "
    "torch::Tensor slot_idx, torch::Tensor expert_offsets);"
)

pack_ext = load_inline(
    name="pack_tokens_original",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["pack_tokens"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        return pack_ext.pack_tokens(token_hidden, expert_idx, slot_idx, expert_offsets)
