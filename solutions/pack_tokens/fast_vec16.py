"""Pack tokens at the memory-bandwidth limit: each row read once and written once, 16-byte vectors.

Design (the figures behind each choice are in docs/benchmarks.md, measured by bench/roofline.py):
- Packing is pure data movement: the floor is a device-to-device copy of the same bytes (token_hidden
  read once, the output written once). Every output byte is written exactly once: token rows by the
  scatter kernel, rows no token lands in (capacity padding, empty experts) by a second kernel that
  reads a one-byte-per-row "written" map. No zero-fill of the whole output first (the original kernel's
  third pass over the output).
- Rows move in the widest vector the row size and both base addresses allow: 16 bytes (uint4) when
  row bytes % 16 == 0, else 8, 4, 2 or 1 bytes: a 130-float row (520 bytes) moves as 8-byte vectors,
  never misaligned. A group of 32..256 threads owns one row; each thread keeps UNROLL independent loads
  in flight before its stores; loads bypass L1 (__ldg), stores stream (__stcs), so neither pollutes
  the cache for the next row.
- The row count lives on the device (expert_offsets[-1]) and the output's shape needs it on the host.
  Reading it first would put a host round trip (~30 us) in front of every launch. Instead the count is
  copied to pinned memory on the current stream, the scatter is launched into a buffer of guessed
  capacity right behind that copy, and the host waits only for the 4-byte copy while the scatter runs.
  The result is a view of the first `total` rows; a guess that is too small (never for the bundled
  shapes) falls back to an exact buffer and a second scatter.
- Kernels run on PyTorch's current stream (CUDA-graph capture would still fail: the row count is read
  on the host). Index arithmetic is 64-bit. Expert or slot indices that would land outside the output
  are skipped: nothing is ever written outside it. Wrong dtypes, devices or ranks raise a ValueError that
  names the input (checked in Python before the launch: about 2 us).
"""

import torch
from torch.utils.cpp_extension import load_inline

THREADS = 256
MAX_VEC = 16
UNROLL = 4
SYNC_READ_FIRST = 0  # ablation: read the row count before launching (a host round trip in front of the kernels)
ZERO_FILL_FIRST = 0  # ablation: zero the whole output first, then scatter (the original kernel's extra pass)

cuda_source = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#define THREADS KBH_THREADS
#define MAX_VEC KBH_MAX_VEC
#define UNROLL KBH_UNROLL
#define SYNC_READ_FIRST KBH_SYNC_READ_FIRST
#define ZERO_FILL_FIRST KBH_ZERO_FILL_FIRST

template <typename V>
__global__ void __launch_bounds__(THREADS) scatter_rows(
        const char* __restrict__ src, char* __restrict__ dst, const int* __restrict__ expert_idx,
        const int* __restrict__ slot_idx, const int* __restrict__ offsets, unsigned char* __restrict__ written,
        int64_t num_tokens, int64_t num_experts, int64_t capacity, int64_t row_vecs, int threads_per_row) {
    const int rows_per_block = THREADS / threads_per_row;
    const int lane = threadIdx.x % threads_per_row;
    const int64_t limit = min(capacity, (int64_t)__ldg(offsets + num_experts));
    const int64_t row_bytes = row_vecs * (int64_t)sizeof(V);
    for (int64_t t = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / threads_per_row; t < num_tokens;
         t += (int64_t)gridDim.x * rows_per_block) {
        const int e = __ldg(expert_idx + t);
        if (e < 0 || e >= num_experts) continue;
        const int64_t dest = (int64_t)__ldg(offsets + e) + (int64_t)__ldg(slot_idx + t);
        if (dest < 0 || dest >= limit) continue;
        const V* s = reinterpret_cast<const V*>(src + t * row_bytes);
        V* d = reinterpret_cast<V*>(dst + dest * row_bytes);
        for (int64_t i = lane; i < row_vecs; i += (int64_t)threads_per_row * UNROLL) {
            V v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int64_t j = i + (int64_t)u * threads_per_row;
                if (j < row_vecs) v[u] = __ldg(s + j);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int64_t j = i + (int64_t)u * threads_per_row;
                if (j < row_vecs) __stcs(d + j, v[u]);
            }
        }
        if (lane == 0) written[dest] = 1;
    }
}

template <typename V>
__global__ void __launch_bounds__(THREADS) zero_unwritten(
        char* __restrict__ dst, const unsigned char* __restrict__ written, int64_t rows, int64_t row_vecs) {
    const int warps = THREADS / 32;
    const int lane = threadIdx.x % 32;
    const int64_t row_bytes = row_vecs * (int64_t)sizeof(V);
    V zero;
    memset(&zero, 0, sizeof(V));
    for (int64_t r = (int64_t)blockIdx.x * warps + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * warps) {
        if (written[r]) continue;
        V* d = reinterpret_cast<V*>(dst + r * row_bytes);
        for (int64_t i = lane; i < row_vecs; i += 32) __stcs(d + i, zero);
    }
}

static int vector_bytes(int64_t row_bytes, uintptr_t a, uintptr_t b) {
    for (int v = MAX_VEC; v > 1; v /= 2) {
        if (row_bytes % v == 0 && a % v == 0 && b % v == 0) return v;
    }
    return 1;
}

static int threads_per_row(int64_t row_vecs) {
    int64_t want = (row_vecs + UNROLL - 1) / UNROLL;
    int tpr = 32;
    while (tpr < THREADS && tpr < want) tpr *= 2;
    return tpr;
}

template <typename V>
static void launch_scatter(const torch::Tensor& src, torch::Tensor& dst, const torch::Tensor& e,
                           const torch::Tensor& s, const torch::Tensor& off, torch::Tensor& written,
                           int64_t capacity, cudaStream_t stream, int sms) {
    const int64_t n = src.size(0);
    if (n == 0) return;
    const int64_t row_vecs = src.size(1) * src.element_size() / (int64_t)sizeof(V);
    const int tpr = threads_per_row(row_vecs);
    const int64_t rows_per_block = THREADS / tpr;
    const int64_t blocks = std::min<int64_t>((n + rows_per_block - 1) / rows_per_block, (int64_t)sms * 32);
    scatter_rows<V><<<blocks, THREADS, 0, stream>>>(
        static_cast<const char*>(src.data_ptr()), static_cast<char*>(dst.data_ptr()), e.data_ptr<int>(),
        s.data_ptr<int>(), off.data_ptr<int>(), written.data_ptr<uint8_t>(), n, off.numel() - 1, capacity,
        row_vecs, tpr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename V>
static void launch_zero(torch::Tensor& dst, const torch::Tensor& written, int64_t rows, cudaStream_t stream, int sms) {
    if (rows == 0) return;
    const int64_t row_vecs = dst.size(1) * dst.element_size() / (int64_t)sizeof(V);
    const int64_t blocks = std::min<int64_t>((rows + THREADS / 32 - 1) / (THREADS / 32), (int64_t)sms * 16);
    zero_unwritten<V><<<blocks, THREADS, 0, stream>>>(static_cast<char*>(dst.data_ptr()),
                                                      written.data_ptr<uint8_t>(), rows, row_vecs);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

#define DISPATCH_VEC(vec, FN, ...)                                         \
    switch (vec) {                                                         \
        case 16: FN<uint4>(__VA_ARGS__); break;                            \
        case 8: FN<uint2>(__VA_ARGS__); break;                             \
        case 4: FN<unsigned int>(__VA_ARGS__); break;                      \
        case 2: FN<unsigned short>(__VA_ARGS__); break;                    \
        default: FN<unsigned char>(__VA_ARGS__); break;                    \
    }

static std::mutex hint_mutex;
static std::unordered_map<int64_t, int64_t> capacity_hint;

torch::Tensor pack_tokens_cuda(const torch::Tensor& src, const torch::Tensor& e, const torch::Tensor& s,
                               const torch::Tensor& off) {
    const auto dev = src.device();
    const int64_t num_tokens = src.size(0);
    c10::cuda::CUDAGuard guard(dev);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev.index()));
    const int64_t num_experts = off.numel() - 1;
    const int64_t hidden = src.size(1);

    // The row count travels to the host behind the stream's earlier work; the scatter does not wait for it.
    auto host_total = torch::empty({1}, torch::dtype(torch::kInt32).pinned_memory(true));
    C10_CUDA_CHECK(cudaMemcpyAsync(host_total.data_ptr(), off.data_ptr<int>() + num_experts, sizeof(int),
                                   cudaMemcpyDeviceToHost, stream));
    cudaEvent_t copied;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(copied, stream));

    const int64_t key = num_tokens * 1000003 + num_experts;
    int64_t capacity = num_tokens + 16 * num_experts;
    {
        std::lock_guard<std::mutex> lock(hint_mutex);
        auto it = capacity_hint.find(key);
        if (it != capacity_hint.end()) capacity = std::max(capacity, it->second);
    }
    if (SYNC_READ_FIRST) {
        C10_CUDA_CHECK(cudaEventSynchronize(copied));
        capacity = std::max<int64_t>(host_total.data_ptr<int>()[0], 0);
    }
    auto buffer = ZERO_FILL_FIRST ? torch::zeros({capacity, hidden}, src.options())
                                  : torch::empty({capacity, hidden}, src.options());
    auto written = torch::zeros({capacity}, src.options().dtype(torch::kUInt8));
    const int vec = vector_bytes(hidden * src.element_size(), reinterpret_cast<uintptr_t>(src.data_ptr()),
                                 reinterpret_cast<uintptr_t>(buffer.data_ptr()));
    DISPATCH_VEC(vec, launch_scatter, src, buffer, e, s, off, written, capacity, stream, sms);

    C10_CUDA_CHECK(cudaEventSynchronize(copied));
    C10_CUDA_CHECK(cudaEventDestroy(copied));
    const int64_t total = host_total.data_ptr<int>()[0];
    TORCH_CHECK(total >= 0, "pack_tokens: expert_offsets[-1] is negative");
    if (total > capacity) {
        {
            std::lock_guard<std::mutex> lock(hint_mutex);
            capacity_hint[key] = total;
        }
        buffer = torch::empty({total, hidden}, src.options());
        written = torch::zeros({total}, src.options().dtype(torch::kUInt8));
        const int v2 = vector_bytes(hidden * src.element_size(), reinterpret_cast<uintptr_t>(src.data_ptr()),
                                    reinterpret_cast<uintptr_t>(buffer.data_ptr()));
        DISPATCH_VEC(v2, launch_scatter, src, buffer, e, s, off, written, total, stream, sms);
        capacity = total;
    }
    auto out = buffer.narrow(0, 0, total);
    const int vz = vector_bytes(hidden * src.element_size(), reinterpret_cast<uintptr_t>(out.data_ptr()),
                                reinterpret_cast<uintptr_t>(out.data_ptr()));
    if (!ZERO_FILL_FIRST) DISPATCH_VEC(vz, launch_zero, out, written, total, stream, sms);
    return out;
}
"""

cpp_source = r"""
torch::Tensor pack_tokens_cuda(const torch::Tensor& src, const torch::Tensor& e, const torch::Tensor& s,
                               const torch::Tensor& off);

// ModelNew.forward checks the contract with messages that name the values. These checks guard direct calls
// of the extension; their messages are plain literals: a failing check whose message formats a value
// crashed the process on the H200 (see docs/benchmarks.md).
torch::Tensor pack_tokens(torch::Tensor token_hidden, torch::Tensor expert_idx, torch::Tensor slot_idx,
                          torch::Tensor expert_offsets) {
    TORCH_CHECK(token_hidden.is_cuda(), "pack_tokens: token_hidden must be a CUDA tensor");
    TORCH_CHECK(token_hidden.dim() == 2, "pack_tokens: token_hidden must be 2-D");
    const auto dev = token_hidden.device();
    for (const torch::Tensor* t : {&expert_idx, &slot_idx, &expert_offsets}) {
        TORCH_CHECK(t->device() == dev, "pack_tokens: all inputs must be on token_hidden's device");
        TORCH_CHECK(t->scalar_type() == torch::kInt32, "pack_tokens: index tensors must be int32");
        TORCH_CHECK(t->dim() == 1, "pack_tokens: index tensors must be 1-D");
    }
    const int64_t num_tokens = token_hidden.size(0);
    TORCH_CHECK(expert_idx.numel() == num_tokens && slot_idx.numel() == num_tokens,
                "pack_tokens: expert_idx and slot_idx need one entry per token");
    TORCH_CHECK(expert_offsets.numel() >= 1, "pack_tokens: expert_offsets needs num_experts + 1 entries");
    return pack_tokens_cuda(token_hidden.contiguous(), expert_idx.contiguous(), slot_idx.contiguous(),
                            expert_offsets.contiguous());
}
"""

pack_ext = load_inline(
    name=f"pack_tokens_fast_t{THREADS}_v{MAX_VEC}_u{UNROLL}_s{SYNC_READ_FIRST}_z{ZERO_FILL_FIRST}",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source.replace("KBH_THREADS", str(THREADS)).replace("KBH_MAX_VEC", str(MAX_VEC))
    .replace("KBH_UNROLL", str(UNROLL)).replace("KBH_SYNC_READ_FIRST", str(SYNC_READ_FIRST))
    .replace("KBH_ZERO_FILL_FIRST", str(ZERO_FILL_FIRST)),
    functions=["pack_tokens"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


def check_contract(token_hidden, expert_idx, slot_idx, expert_offsets) -> None:
    """Raise ValueError naming the first input outside the contract (a CUDA fault never tells the caller which)."""
    if not token_hidden.is_cuda:
        raise ValueError(f"pack_tokens: token_hidden must be a CUDA tensor, got {token_hidden.device}")
    if token_hidden.dim() != 2:
        raise ValueError(f"pack_tokens: token_hidden must be 2-D, got {token_hidden.dim()}-D")
    for name, t in (("expert_idx", expert_idx), ("slot_idx", slot_idx), ("expert_offsets", expert_offsets)):
        if t.device != token_hidden.device:
            raise ValueError(f"pack_tokens: {name} must be on {token_hidden.device}, got {t.device}")
        if t.dtype != torch.int32:
            raise ValueError(f"pack_tokens: {name} must be int32, got {t.dtype}")
        if t.dim() != 1:
            raise ValueError(f"pack_tokens: {name} must be 1-D, got {t.dim()}-D")
    n = token_hidden.shape[0]
    if expert_idx.numel() != n or slot_idx.numel() != n:
        raise ValueError(f"pack_tokens: expert_idx and slot_idx need one entry per token ({n}), "
                         f"got {expert_idx.numel()} and {slot_idx.numel()}")
    if expert_offsets.numel() < 1:
        raise ValueError("pack_tokens: expert_offsets needs num_experts + 1 entries, got none")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        check_contract(token_hidden, expert_idx, slot_idx, expert_offsets)
        return pack_ext.pack_tokens(token_hidden, expert_idx, slot_idx, expert_offsets)
