"""Honest variant (GPU): a kernel builds a one-hot routing matrix, cuBLAS (torch.mm) moves the data.

Exact: each output element is one input element times 1.0 plus zeros (TF32 is off for float32 matmuls
by default). Slow on large shapes (a dense product): meant for small ones.
"""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <c10/cuda/CUDAStream.h>

__global__ void one_hot(float* p, const int* e, const int* s, const int* off, long long tokens, long long total) {
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < tokens) p[((long long)off[e[t]] + s[t]) * tokens + t] = 1.0f;
}

torch::Tensor routing_matrix(torch::Tensor e, torch::Tensor s, torch::Tensor off, long long tokens) {
    const long long total = off[off.numel() - 1].item<int>();
    auto p = torch::zeros({total, tokens}, e.options().dtype(torch::kFloat32));
    if (tokens > 0)
        one_hot<<<(tokens + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            p.data_ptr<float>(), e.data_ptr<int>(), s.data_ptr<int>(), off.data_ptr<int>(), tokens, total);
    return p;
}
"""

ext = load_inline(name="pack_cublas_routing", cpp_sources="torch::Tensor routing_matrix(torch::Tensor e, "
                  "torch::Tensor s, torch::Tensor off, long long tokens);", cuda_sources=cuda_source,
                  functions=["routing_matrix"])


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        p = ext.routing_matrix(expert_idx, slot_idx, expert_offsets, token_hidden.shape[0])
        return torch.mm(p.to(token_hidden.dtype), token_hidden)
