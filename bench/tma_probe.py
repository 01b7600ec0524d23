"""Whether the bulk-copy engine (TMA, `cp.async.bulk`) moves token rows faster than threads do: a probe for
issue 5, not a solution. One thread per block streams whole rows global -> shared -> global through a ring
of `stages` row buffers with `ahead` loads in flight; `identity` stores row t to row t (a plain copy).

    python bench/tma_probe.py [--shapes wide mixtral deepseek] [--n 100] [--baseline solutions/pack_tokens/fast_vec16.py]

Prints device time (busy GPU: the next call always queued; L2 flushed before each) of each variant, of a torch
copy of the same bytes, and of the baseline solution's whole call. Scatter only: rows no token lands in
(deepseek's padding) are not written, so deepseek's output is not compared.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernel_time import times  # noqa: E402

from harness import problem  # noqa: E402
from harness.build_worker import import_on_this_gpu  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.timing import prefer_spin_wait  # noqa: E402

CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool bar_try(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    return ok != 0;
}

__device__ __forceinline__ void bulk_load(void* smem, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(smem)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void bulk_store(void* dst, const void* smem, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst), "r"(smem_addr(smem)), "r"(bytes) : "memory");
}

template <int N>
__device__ __forceinline__ void wait_reads() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }

template <int S, int L>
__global__ void __launch_bounds__(32) tma_rows(
        const char* __restrict__ src, char* __restrict__ dst, const int* __restrict__ expert_idx,
        const int* __restrict__ slot_idx, const int* __restrict__ offsets, int64_t num_tokens, int64_t num_experts,
        int64_t limit, uint32_t row_bytes, int identity) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) uint64_t bars[S];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < S; ++s) bar_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const int64_t first = blockIdx.x, step = gridDim.x;
    const int64_t n = first < num_tokens ? (num_tokens - 1 - first) / step + 1 : 0;
    int64_t dest[S];
    auto issue = [&](int64_t i) {
        const int s = (int)(i % S);
        const int64_t t = first + i * step;
        int64_t d = t;
        if (!identity) {
            const int e = __ldg(expert_idx + t);
            d = (e < 0 || e >= num_experts) ? -1 : (int64_t)__ldg(offsets + e) + (int64_t)__ldg(slot_idx + t);
            if (d >= limit) d = -1;
        }
        dest[s] = d;
        bar_expect(&bars[s], row_bytes);
        bulk_load(ring + (size_t)s * row_bytes, src + t * (int64_t)row_bytes, row_bytes, &bars[s]);
    };
    for (int64_t i = 0; i < L && i < n; ++i) issue(i);
    for (int64_t i = 0; i < n; ++i) {
        const int s = (int)(i % S);
        while (!bar_try(&bars[s], (uint32_t)((i / S) & 1))) {}
        if (dest[s] >= 0) bulk_store(dst + dest[s] * (int64_t)row_bytes, ring + (size_t)s * row_bytes, row_bytes);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        if (i + L < n) {
            wait_reads<S - L>();
            issue(i + L);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template <int S, int L>
static void launch(const torch::Tensor& src, torch::Tensor& dst, const torch::Tensor& e, const torch::Tensor& s,
                   const torch::Tensor& off, int64_t identity, int64_t blocks_per_sm) {
    const uint32_t row_bytes = (uint32_t)(src.size(1) * src.element_size());
    const int smem = (int)(S * row_bytes);
    auto kernel = tma_rows<S, L>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int occ = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 32, smem));
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, src.get_device()));
    const int per_sm = blocks_per_sm > 0 ? std::min<int>(occ, (int)blocks_per_sm) : occ;
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(src.size(0), (int64_t)sms * std::max(per_sm, 1)));
    kernel<<<(unsigned)blocks, 32, smem, at::cuda::getCurrentCUDAStream()>>>(
        static_cast<const char*>(src.data_ptr()), static_cast<char*>(dst.data_ptr()), e.data_ptr<int>(),
        s.data_ptr<int>(), off.data_ptr<int>(), src.size(0), off.numel() - 1, dst.size(0), row_bytes, (int)identity);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void tma_pack(torch::Tensor src, torch::Tensor dst, torch::Tensor e, torch::Tensor s, torch::Tensor off,
              int64_t stages, int64_t ahead, int64_t identity, int64_t blocks_per_sm) {
    TORCH_CHECK(src.is_contiguous() && dst.is_contiguous(), "contiguous only");
    TORCH_CHECK((src.size(1) * src.element_size()) % 16 == 0, "rows must be a multiple of 16 bytes");
#define CASE(S, L) if (stages == S && ahead == L) return launch<S, L>(src, dst, e, s, off, identity, blocks_per_sm);
    CASE(2, 1) CASE(3, 2) CASE(4, 2) CASE(4, 3) CASE(6, 3) CASE(6, 4) CASE(8, 4) CASE(8, 6)
#undef CASE
    TORCH_CHECK(false, "no such stages/ahead pair");
}
"""

CPP = """
#include <torch/extension.h>
void tma_pack(torch::Tensor src, torch::Tensor dst, torch::Tensor e, torch::Tensor s, torch::Tensor off,
              int64_t stages, int64_t ahead, int64_t identity, int64_t blocks_per_sm);
"""

VARIANTS = [(2, 1, 0), (3, 2, 0), (4, 2, 0), (4, 3, 0), (6, 3, 0), (6, 4, 0), (8, 4, 0), (8, 6, 0), (4, 2, 2), (4, 3, 1)]


def build_dir() -> str:
    d = REPO / ".cache" / "tma_probe"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["wide", "mixtral", "deepseek"])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--baseline", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--cache", default=str(REPO / ".cache" / "kbh"))
    args = ap.parse_args()
    print(f"host wait: {prefer_spin_wait()}")
    ext = load_inline("kbh_tma_probe", CPP, cuda_sources=CUDA, functions=["tma_pack"],
                      extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
                      build_directory=build_dir(), verbose=False)
    base = import_on_this_gpu(args.baseline, args.cache).ModelNew()
    cfg = load_config(str(REPO / "configs" / "pack_tokens.yaml"))
    ns = problem.load_namespace(problem.read_problem(Path(cfg.problem)))
    ref = ns["Model"]()
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}; median us of {args.n} calls, busy GPU, "
          "256 MB zeroed before each\n")
    print("| shape | what | us | / copy | exact |")
    print("|---|---|---:|---:|---|")
    for name in args.shapes:
        shape_rows(ext, base, ref, ns, next(s for s in cfg.shapes if s.name == name), args.n, flush, True)
        torch.cuda.empty_cache()


def shape_rows(ext, base, ref, ns: dict, shape, n: int, flush: torch.Tensor) -> None:
    x, e, s, off = problem.make_inputs(ns, dict(shape.params), 1234, "cuda")
    want = ref(x, e, s, off)
    out = torch.empty_like(want)
    src = torch.empty(x.numel() * x.element_size(), dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy = times(lambda: dst.copy_(src), n, flush, True)
    print(f"| {shape.name} | torch copy of token_hidden's bytes | {copy:.1f} | 1.00 | |", flush=True)
    b = times(lambda: base(x, e, s, off), n, flush, True)
    print(f"| {shape.name} | baseline (whole call) | {b:.1f} | {b / copy:.3f} | "
          f"{bool(torch.equal(base(x, e, s, off), want))} |", flush=True)
    for st, ah, per_sm in VARIANTS:
        for identity in (0, 1):
            def run(st=st, ah=ah, identity=identity, per_sm=per_sm):
                ext.tma_pack(x, out, e, s, off, st, ah, identity, per_sm)
            label = f"tma {'copy' if identity else 'scatter'} stages={st} ahead={ah} blocks/SM={per_sm or 'max'}"
            try:
                out.zero_()
                run()
                torch.cuda.synchronize()
                if identity:
                    exact = str(bool(torch.equal(out[: x.shape[0]], x)))
                else:
                    exact = "" if shape.name == "deepseek" else str(bool(torch.equal(out, want)))
                t = times(run, n, flush, True)
                print(f"| {shape.name} | {label} | {t:.1f} | {t / copy:.3f} | {exact} |", flush=True)
            except Exception as ex:  # noqa: BLE001 - a failing variant is reported, the others still run
                print(f"| {shape.name} | {label} | failed: {type(ex).__name__}: {str(ex)[:150]} | | |", flush=True)


if __name__ == "__main__":
    main()
