"""Honest, Python only, and writes where JIT compilers keep their caches, found as they find them (Triton under
$TRITON_CACHE_DIR or $TRITON_HOME/.triton, inductor under $TORCHINDUCTOR_CACHE_DIR, the CUDA driver under
$CUDA_CACHE_PATH or ~/.nv): the write sandbox must leave these working on a fresh machine. It also runs in the
environment users run in: no cuBLAS workspace setting, which changes every GEMM's timing."""

import os

import torch


def _write(folder: str, name: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        f.write("compiled\n")


home = os.path.expanduser("~")
_write(os.environ.get("TRITON_CACHE_DIR")
       or os.path.join(os.environ.get("TRITON_HOME", home), ".triton", "cache"), "kernel.cubin")
_write(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(home, ".cache", "inductor"), "graph.py")
_write(os.environ.get("CUDA_CACHE_PATH") or os.path.join(home, ".nv", "ComputeCache"), "index")


class ModelNew(torch.nn.Module):
    def forward(self, token_hidden, expert_idx, slot_idx, expert_offsets):
        if "CUBLAS_WORKSPACE_CONFIG" in os.environ:
            raise RuntimeError("forward runs in an environment users do not run in")
        rows = int(expert_offsets[-1].item())
        packed = torch.zeros((rows, token_hidden.shape[1]), dtype=token_hidden.dtype, device=token_hidden.device)
        packed.index_copy_(0, expert_offsets.long()[expert_idx.long()] + slot_idx.long(), token_hidden)
        return packed
