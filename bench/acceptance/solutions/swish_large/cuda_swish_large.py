"""x * sigmoid(x) over 64M floats in one pass: each thread loads UNROLL 16-byte vectors before it stores
any (streaming stores), in a grid-stride loop over a grid of full occupancy.

The floor is a device copy of the same 512 MB (256 MB read, 256 MB written); the reference is two kernels
(sigmoid, then the product) and moves 1.25 GB.
"""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <atomic>
#include <cstdint>

constexpr int THREADS = 256;
constexpr int UNROLL = 4;
constexpr int BLOCKS_PER_SM = 8;

__device__ __forceinline__ float swish1(float v) { return v * (1.0f / (1.0f + expf(-v))); }

__device__ __forceinline__ float4 swish4(float4 v) {
    return make_float4(swish1(v.x), swish1(v.y), swish1(v.z), swish1(v.w));
}

__global__ void __launch_bounds__(THREADS) acc_swish_vec4(const float4* __restrict__ x, float4* __restrict__ out,
                                                          int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(x + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) __stcs(out + i + u * stride, swish4(v[u]));
    }
    for (; i < n4; i += stride) __stcs(out + i, swish4(__ldg(x + i)));
}

__global__ void __launch_bounds__(THREADS) acc_swish_scalar(const float* __restrict__ x, float* __restrict__ out,
                                                            int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride) out[i] = swish1(__ldg(x + i));
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

torch::Tensor swish(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "swish: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "swish: x must be float32");
    c10::cuda::CUDAGuard guard(x.device());
    const auto xc = x.contiguous();
    auto out = torch::empty(xc.sizes(), xc.options());
    const int64_t n = xc.numel();
    if (n == 0) return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t cap = sm_count() * BLOCKS_PER_SM;
    const float* xp = xc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    if (n % 4 == 0 && aligned16(xp) && aligned16(op)) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + THREADS - 1) / THREADS, cap);
        acc_swish_vec4<<<(unsigned)blocks, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(xp),
                                                                 reinterpret_cast<float4*>(op), n4);
    } else {
        const int64_t blocks = std::min<int64_t>((n + THREADS - 1) / THREADS, cap);
        acc_swish_scalar<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, op, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor swish(torch::Tensor x);\n"

ext = load_inline(
    name="kbh_acceptance_swish_large",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["swish"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.swish(x)
