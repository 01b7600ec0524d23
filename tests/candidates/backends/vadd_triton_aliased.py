"""Honest Triton vector add written with aliased imports and an autotuned kernel launched through a method."""

import torch
import triton as tr
from triton import language as tl


@tr.autotune(configs=[tr.Config({"BLOCK": 512}), tr.Config({"BLOCK": 1024})], key=["n"])
@tr.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(torch.nn.Module):
    def launch(self, a, b, c):
        n = a.numel()
        add_kernel[lambda meta: (tr.cdiv(n, meta["BLOCK"]),)](a, b, c, n)

    def forward(self, a, b):
        c = torch.empty_like(a)
        self.launch(a, b, c)
        return c
