"""Compare a candidate's outputs with the reference's, in the judge (pure functions over CPU tensors): same count,
shape, dtype and device; NaN and Inf in the same places; finite values within atol + rtol * |ref| (exact when
both are zero). Where that tolerance would pass a constant answer (zero, or one value for every element), the
answer is held to the output's own scale instead (weak_outputs). The check of timed calls' fingerprints lives
here too."""

import math
from dataclasses import replace

import numpy as np
import torch

from ..protocol import Fingerprints
from ..settings import Tolerance
from .evidence import Comparison
from .isolation import open_regular
from .verdict import PROJECTION_SIGMAS, WEAK_FRACTION, WEAK_RESOLUTION_ULPS

CHUNK = 1 << 22
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


def tensor_from_bytes(data, meta: dict, prefix_ok: bool = False) -> torch.Tensor:
    """A tensor over these bytes; with prefix_ok the data may be longer (a reused output slot)."""
    dtype = DTYPES.get(meta["dtype"])
    if dtype is None:
        raise ValueError(f"unsupported output dtype {meta['dtype']}")
    raw = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    expected = meta["nbytes"]
    if prefix_ok and raw.size >= expected:
        raw = raw[:expected]
    shape = [int(d) for d in meta["shape"]]
    if raw.size != expected or expected != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise ValueError(f"output holds {raw.size} bytes, its shape and dtype need {expected}")
    t = torch.from_numpy(raw if raw.flags.writeable else raw.copy())
    return t.view(dtype).reshape(shape)


def read_output_file(meta: dict) -> torch.Tensor:
    """Map a candidate's output slot copy-on-write: no copy, and nothing written back. The slot's folder is
    the candidate's to write (its home under --isolate), hence open_regular."""
    if meta["nbytes"] == 0:
        return tensor_from_bytes(b"", meta)
    with open_regular(meta["file"]) as f:
        return tensor_from_bytes(np.memmap(f, dtype=np.uint8, mode="c"), meta, prefix_ok=True)


class _Moments:
    """Running statistics of the reference's finite values and the answer's errors, over chunks (float64);
    they stop (`alive` False) once no constant can pass the tolerance, as for most outputs after one chunk."""

    def __init__(self, tol: Tolerance):
        self.tol, self.alive = tol, not tol.exact
        self.n = 0
        self.s1 = self.s2 = self.err2 = self.max_abs = 0.0
        self.lo, self.hi, self.min_abs = math.inf, -math.inf, math.inf

    def add(self, r: torch.Tensor, diff: torch.Tensor | None = None) -> None:
        if not self.alive:
            return
        r = r[torch.isfinite(r)].to(torch.float64)
        if r.numel():
            a = r.abs()
            self.n += r.numel()
            self.s1, self.s2 = self.s1 + float(r.sum()), self.s2 + float((r * r).sum())
            self.lo, self.hi = min(self.lo, float(r.min())), max(self.hi, float(r.max()))
            self.max_abs, self.min_abs = max(self.max_abs, float(a.max())), min(self.min_abs, float(a.min()))
        if diff is not None:
            self.err2 += float((diff.to(torch.float64) ** 2).sum())
        self.alive = any(self.passing())

    def passing(self) -> tuple[bool, bool]:
        """Whether zero, and whether the middle of the values' range, lies within tolerance of every value."""
        t = self.tol
        return ((1 - t.rtol) * self.max_abs <= t.atol,
                (self.hi - self.lo) / 2 <= t.atol + t.rtol * self.min_abs)


def weak_outputs(m: _Moments, eps: float) -> tuple[str, float, bool] | None:
    """Whether a constant answer would pass the tolerance: zero where every reference value lies within
    tolerance of it, or the middle of the values' range (more than one value). Then the scale an answer is held
    to instead: the RMS distance from the reference to the nearest such constant; and whether that scale is
    below what rounding resolves, so that the check cannot tell the answer from the constant at all."""
    if m.n == 0 or not m.alive:
        return None
    zero, middle = m.passing()
    mean = m.s1 / m.n
    scales = []
    if zero and m.max_abs > 0:
        scales.append(("zero", math.sqrt(m.s2 / m.n)))
    if middle and m.n > 1:
        scales.append((f"{(m.lo + m.hi) / 2:.6g}", math.sqrt(max(m.s2 / m.n - mean * mean, 0.0))))
    if not scales:
        return None
    what, scale = min(scales, key=lambda x: x[1])
    return what, scale, scale <= WEAK_RESOLUTION_ULPS * eps * m.max_abs


def _held_to_scale(m: _Moments, eps: float) -> Comparison | None:
    """None where the tolerance alone decides; else the answer held to the output's own scale: a mismatch, or
    ok and `weak` where that scale is below rounding."""
    weak = weak_outputs(m, eps)
    if weak is None:
        return None
    what, scale, unresolved = weak
    if unresolved:
        return Comparison(True, "ok", weak=True)
    err = math.sqrt(m.err2 / m.n)
    if err <= WEAK_FRACTION * scale:
        return None
    return Comparison(False, "mismatch", f"every reference value lies within tolerance of the constant {what}; "
                      f"held to the output's own scale, the answer's RMS error {err:.3g} is not under "
                      f"{WEAK_FRACTION} x the constant's {scale:.3g}", max_abs_err=None, mismatches=m.n)


def compare_tensor(ref: torch.Tensor, cand: torch.Tensor, tol: Tolerance) -> Comparison:
    if tuple(cand.shape) != tuple(ref.shape):
        return Comparison(False, "wrong_shape", f"shape {tuple(cand.shape)}, expected {tuple(ref.shape)}")
    if cand.dtype != ref.dtype:
        detail = f"dtype {cand.dtype}, expected {ref.dtype}".replace("torch.", "")
        return Comparison(False, "wrong_dtype", detail)
    floating = ref.is_floating_point() or ref.is_complex()
    eps = torch.finfo(ref.dtype).eps if floating else 0.0
    if ref.is_complex():
        ref, cand = torch.view_as_real(ref), torch.view_as_real(cand)
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    rf, cf = ref.reshape(-1), cand.reshape(-1)
    moments = _Moments(tol)
    if ref.numel() == 0 or torch.equal(ref.reshape(-1).view(torch.uint8), cand.reshape(-1).view(torch.uint8)):
        for s in range(0, rf.numel() if floating else 0, CHUNK):
            if not moments.alive:
                break
            moments.add(rf[s:s + CHUNK].to(work))
        weak = _held_to_scale(moments, eps) if floating else None  # no error: at most `weak`, never a mismatch
        return Comparison(True, "ok", max_abs_err=0.0, max_rel_err=0.0, weak=weak is not None)
    max_abs = max_rel = 0.0
    bad_total, first, uninit = 0, None, False
    for s in range(0, rf.numel(), CHUNK):
        r, c = rf[s:s + CHUNK], cf[s:s + CHUNK]
        if ref.is_floating_point():
            r, c = r.to(work), c.to(work)
            rn, cn = torch.isnan(r), torch.isnan(c)
            both_finite = torch.isfinite(r) & torch.isfinite(c)
            diff = torch.where(both_finite, (c - r).abs(), torch.zeros_like(r))
            moments.add(r, diff)
            allowed = tol.atol + tol.rtol * r.abs()
            bad = (rn != cn) | (~both_finite & ~rn & ~cn & (c != r)) | (both_finite & (diff > allowed))
            uninit = uninit or bool((cn & ~rn).any())
            max_abs = max(max_abs, float(diff.max()))  # diff is 0 where either is not finite
            nz = both_finite & (r != 0)
            if nz.any():
                max_rel = max(max_rel, float((diff[nz] / r[nz].abs()).max()))
            if (both_finite & (r == 0) & (diff > 0)).any():
                max_rel = math.inf
        else:
            bad = c != r
            max_abs = max(max_abs, float((c.to(torch.float64) - r.to(torch.float64)).abs().max()))
        n_bad = int(bad.sum())
        if n_bad and first is None:
            first = s + int(torch.nonzero(bad)[0, 0])
        bad_total += n_bad
    if not bad_total:
        scaled = _held_to_scale(moments, eps) if floating else None
        if scaled is not None and not scaled.ok:
            return replace(scaled, max_abs_err=max_abs, max_rel_err=max_rel)
        return Comparison(True, "ok", max_abs_err=max_abs, max_rel_err=max_rel, weak=scaled is not None)
    first_idx = tuple(int(i) for i in np.unravel_index(first, tuple(ref.shape))) if ref.dim() else ()
    detail = (f"{bad_total} of {rf.numel()} elements differ; first at {list(first_idx)}: got {cf[first].item()!r}, "
              f"expected {rf[first].item()!r}")
    if uninit:
        detail += " (NaN where the reference has a value: rows left unwritten read as poison)"
    return Comparison(False, "uninitialized_output" if uninit else "mismatch", detail, max_abs, max_rel, first_idx,
                      bad_total, uninit)


def compare_outputs(ref: list[tuple[dict, torch.Tensor]], cand: list[tuple[dict, torch.Tensor]],
                    tol_for, device: str) -> Comparison:
    """Compare output lists; tol_for(dtype_name) gives the tolerance for each reference output."""
    if len(cand) != len(ref):
        return Comparison(False, "wrong_count", f"{len(cand)} outputs, expected {len(ref)}")
    max_abs = max_rel = 0.0
    weak = False
    for i, ((rm, rt), (cm, ct)) in enumerate(zip(ref, cand)):
        if cm["device"] != device:
            return Comparison(False, "wrong_device", f"output {i} on {cm['device']}, expected {device}")
        c = compare_tensor(rt, ct, tol_for(rm["dtype"]))
        if not c.ok:
            return c if len(ref) == 1 else replace(c, detail=f"output {i}: {c.detail}")
        max_abs, max_rel = max(max_abs, c.max_abs_err or 0.0), max(max_rel, c.max_rel_err or 0.0)
        weak = weak or c.weak
    return Comparison(True, "ok", max_abs_err=max_abs, max_rel_err=max_rel, weak=weak)


def same_as(ref: list[tuple[dict, torch.Tensor]], cand: list[tuple[dict, torch.Tensor]], tol_for) -> bool:
    """True when the candidate's outputs match these reference outputs (used to spot replays)."""
    return len(ref) == len(cand) and all(compare_tensor(rt, ct, tol_for(rm["dtype"])).ok
                                         for (rm, rt), (_, ct) in zip(ref, cand))


def fingerprint_matches(ref_fp, cand_fp, tols: list[Tolerance]) -> bool:
    """Check one call's fingerprints (protocol.Fingerprints, or their wire form; a candidate's that does not
    decode fails). The projection gap allowed is 20 standard deviations of an honest output's error
    (worker/fingerprint.py says why)."""
    ref, cand = (fp if isinstance(fp, Fingerprints) else Fingerprints.read(fp) for fp in (ref_fp, cand_fp))
    if ref is None or cand is None or len(ref.outputs) != len(cand.outputs):
        return False
    for k, tol in enumerate(tols):
        if tol.exact or ref.projections is None or cand.projections is None:
            good = ref.outputs[k] == cand.outputs[k]
        else:
            p_ref, _, abs_wr, s2 = ref.projections[k]
            good = abs(cand.projections[k][0] - p_ref) <= PROJECTION_SIGMAS * s2 ** 0.5 + 1e-7 * abs_wr + 1e-12
        if not good:
            return False
    return True
