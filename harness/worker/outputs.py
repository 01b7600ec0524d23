"""A candidate's outputs in its worker: plain tensors only, in files the judge maps, then poisoned."""

import ctypes
from typing import Any

import torch

from .clocks import find_cudart

_type = type
_Tensor = torch.Tensor


class HarnessError(Exception):
    """A problem with the problem file or the harness, not with the candidate."""


class BadOutput(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def plain_outputs(out: Any) -> list[torch.Tensor]:
    """The output as a list of plain dense tensors, or BadOutput naming what it was instead."""
    if _type(out) is _Tensor:
        outs = [out]
    elif _type(out) in (tuple, list) and all(_type(o) is _Tensor for o in out):
        outs = list(out)
    else:
        kinds = [out] if _type(out) not in (tuple, list) else [o for o in out if _type(o) is not _Tensor]
        what = ", ".join(sorted({f"{_type(o).__module__}.{_type(o).__qualname__}" for o in kinds}))
        raise BadOutput("not_plain_tensor", f"forward returned {what}, not a plain torch.Tensor")
    for o in outs:
        if o.layout != torch.strided or o.is_meta or o.is_nested or o.is_quantized:
            raise BadOutput("not_plain_tensor",
                            f"forward returned a {o.layout} tensor, not a plain dense one")
    return outs


def tensor_meta(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "device": t.device.type,
            "nbytes": t.numel() * t.element_size()}


def tensor_bytes(xs: list) -> int:
    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def as_bytes(t: torch.Tensor):
    return t.detach().contiguous().reshape(-1).cpu().view(torch.uint8).numpy()


def poison(outs: list[torch.Tensor]) -> None:
    """Fill released tensors with 0xFF (NaN for floats), so no later call finds a stale answer."""
    for o in outs:
        if o.is_contiguous() and o.numel():
            o.detach().reshape(-1).view(torch.uint8).fill_(255)


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def aliases(outs: list[torch.Tensor], inputs: list) -> bool:
    spans = [storage_span(x) for x in inputs if isinstance(x, torch.Tensor) and x.numel()]
    return any(lo < xh and xl < hi for lo, hi in (storage_span(o) for o in outs if o.numel()) for xl, xh in spans)


class OutputSlots:
    """Files the judge maps, one per output index, page-locked once: a device output lands in one copy."""

    def __init__(self):
        self.slots: dict[str, tuple[int, torch.Tensor]] = {}
        self._cudart = None

    def _host(self, fn: str, buf: torch.Tensor, *args) -> None:
        """cudaHostRegister/Unregister through ctypes; its errors are cleared here, never left for a candidate."""
        if self._cudart is None:
            self._cudart = find_cudart() or False
        if self._cudart and getattr(self._cudart, fn)(ctypes.c_void_p(buf.data_ptr()), *args):
            self._cudart.cudaGetLastError()

    def write(self, t: torch.Tensor, path: str) -> None:
        src = t.detach().contiguous().reshape(-1).view(torch.uint8)
        n = src.numel()
        cap, buf = self.slots.get(path, (0, None))
        if buf is None or cap < n:
            if buf is not None and torch.cuda.is_initialized():
                self._host("cudaHostUnregister", buf)
            cap = max(n, 1)
            with open(path, "wb") as f:
                f.truncate(cap)
            buf = torch.from_file(path, shared=True, size=cap, dtype=torch.uint8)
            if src.is_cuda:
                self._host("cudaHostRegister", buf, ctypes.c_size_t(cap), 0)
            self.slots[path] = (cap, buf)
        if n:
            buf[:n].copy_(src)
