"""x * sigmoid(x) + y in one launch (the reference takes three): 16-byte vectors, a grid-stride loop.

At 4096 floats the work is a few hundred nanoseconds of device time; what is timed is the launch and the
host path, so the kernel is one launch of at most a few blocks and the host code does only checks.
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

__device__ __forceinline__ float swish_add1(float v, float w) {
    return v * (1.0f / (1.0f + expf(-v))) + w;
}

__global__ void __launch_bounds__(THREADS) acc_swish_add_vec4(const float4* __restrict__ x,
                                                              const float4* __restrict__ y,
                                                              float4* __restrict__ out, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n4; i += stride) {
        const float4 a = __ldg(x + i);
        const float4 b = __ldg(y + i);
        float4 r;
        r.x = swish_add1(a.x, b.x);
        r.y = swish_add1(a.y, b.y);
        r.z = swish_add1(a.z, b.z);
        r.w = swish_add1(a.w, b.w);
        out[i] = r;
    }
}

__global__ void __launch_bounds__(THREADS) acc_swish_add_scalar(const float* __restrict__ x,
                                                                const float* __restrict__ y,
                                                                float* __restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride)
        out[i] = swish_add1(__ldg(x + i), __ldg(y + i));
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

torch::Tensor swish_add(torch::Tensor x, torch::Tensor y) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "swish_add: x and y must be CUDA tensors");
    TORCH_CHECK(x.device() == y.device(), "swish_add: x and y must be on one device");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32,
                "swish_add: x and y must be float32");
    TORCH_CHECK(x.sizes() == y.sizes(), "swish_add: x and y must have the same shape");
    c10::cuda::CUDAGuard guard(x.device());
    const auto xc = x.contiguous();
    const auto yc = y.contiguous();
    auto out = torch::empty(xc.sizes(), xc.options());
    const int64_t n = xc.numel();
    if (n == 0) return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t cap = sm_count() * 16;
    const float* xp = xc.data_ptr<float>();
    const float* yp = yc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    if (n % 4 == 0 && aligned16(xp) && aligned16(yp) && aligned16(op)) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + THREADS - 1) / THREADS, cap);
        acc_swish_add_vec4<<<(unsigned)blocks, THREADS, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<const float4*>(yp), reinterpret_cast<float4*>(op), n4);
    } else {
        const int64_t blocks = std::min<int64_t>((n + THREADS - 1) / THREADS, cap);
        acc_swish_add_scalar<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, yp, op, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor swish_add(torch::Tensor x, torch::Tensor y);\n"

ext = load_inline(
    name="kbh_acceptance_launch_tiny",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["swish_add"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return ext.swish_add(x, y)
