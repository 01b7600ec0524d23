"""12 x (Linear + ReLU): each layer's GEMM by cuBLAS (torch.mm(x, W.t()), no copy of W: a transposed
operand), then one kernel of ours adding the bias and applying ReLU in place on the GEMM's fresh output
(16-byte vectors, bias read as vectors, a grid-stride loop). The reference (F.linear: addmm, bias in the GEMM
or its epilogue, then a ReLU kernel) does the same GEMMs, so this is at best about even: the GEMMs are ~95%
of the time.

The parameters are made as the reference makes them: one nn.Linear(width, width) after another, so under
the harness's seed the weights are the same.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEPTH = 12
WIDTH = 1024

cuda_source = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <atomic>
#include <cstdint>

constexpr int THREADS = 256;
constexpr int BLOCKS_PER_SM = 8;

__device__ __forceinline__ float relu_add(float v, float b) { return fmaxf(v + b, 0.0f); }

__global__ void __launch_bounds__(THREADS) acc_bias_relu_vec4(float4* __restrict__ y, const float4* __restrict__ bias,
                                                              int64_t n4, int64_t cols4) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n4; i += stride) {
        const float4 v = y[i];
        const float4 b = __ldg(bias + i % cols4);
        y[i] = make_float4(relu_add(v.x, b.x), relu_add(v.y, b.y), relu_add(v.z, b.z), relu_add(v.w, b.w));
    }
}

__global__ void __launch_bounds__(THREADS) acc_bias_relu_scalar(float* __restrict__ y, const float* __restrict__ bias,
                                                                int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride)
        y[i] = relu_add(y[i], __ldg(bias + i % cols));
}

// SMs of the current device, queried once per device (a grid cap for the grid-stride loops).
static int64_t sm_count() {
    static std::atomic<int> cache[256];
    int dev = 0;
    C10_CUDA_CHECK(cudaGetDevice(&dev));
    int n = dev < 256 ? cache[dev].load(std::memory_order_relaxed) : 0;
    if (n == 0) {
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
        if (dev < 256) cache[dev].store(n, std::memory_order_relaxed);
    }
    return n;
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// In place on y, a GEMM output this module made (fresh, contiguous); returns y.
torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "bias_relu_: y and bias must be CUDA tensors");
    TORCH_CHECK(y.device() == bias.device(), "bias_relu_: y and bias must be on one device");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "bias_relu_: y and bias must be float32");
    TORCH_CHECK(y.dim() == 2 && y.is_contiguous(), "bias_relu_: y must be a contiguous 2-D tensor");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == y.size(1), "bias_relu_: bias must have y.size(1) entries");
    c10::cuda::CUDAGuard guard(y.device());
    const auto bc = bias.contiguous();
    const int64_t n = y.numel(), cols = y.size(1);
    if (n == 0) return y;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t cap = sm_count() * BLOCKS_PER_SM;
    float* yp = y.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    if (cols % 4 == 0 && aligned16(yp) && aligned16(bp)) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + THREADS - 1) / THREADS, cap);
        acc_bias_relu_vec4<<<(unsigned)blocks, THREADS, 0, stream>>>(
            reinterpret_cast<float4*>(yp), reinterpret_cast<const float4*>(bp), n4, cols / 4);
    } else {
        const int64_t blocks = std::min<int64_t>((n + THREADS - 1) / THREADS, cap);
        acc_bias_relu_scalar<<<(unsigned)blocks, THREADS, 0, stream>>>(yp, bp, n, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias);\n"

ext = load_inline(
    name="kbh_acceptance_mlp_deep",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_relu_"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, depth=DEPTH, width=WIDTH):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        h = x.contiguous()
        for layer in self.linears:
            h = ext.bias_relu_(torch.mm(h, layer.weight.t()), layer.bias)
        return h
