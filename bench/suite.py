"""A KernelBench-style suite end to end: 20 level-1-style problems of our own (elementwise, row reductions,
softmax, layer norm, matrix-vector; fp32, 4096 x 8192 by default: 128 MiB an input), each with one honest
Triton candidate. Times the references once (--reference-only), then the suite with that baseline twice (the
first run fills Triton's cache), and reports the warm run's seconds per (problem, candidate).

    python bench/suite.py [--rows 4096] [--cols 8192] [--out DIR]

Target on the H200: at most 4 s per (problem, candidate) on average, warm cache and baseline.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import md_table, records, run_eval

ELEMENTWISE = {  # name: (torch expression of x (and y), Triton expression of x (and y))
    "relu": ("torch.relu(x)", "tl.maximum(x, 0.0)"),
    "sigmoid": ("torch.sigmoid(x)", "1.0 / (1.0 + tl.exp(-x))"),
    "silu": ("torch.nn.functional.silu(x)", "x / (1.0 + tl.exp(-x))"),
    "scale": ("x * 2.5", "x * 2.5"),
    "abs": ("torch.abs(x)", "tl.abs(x)"),
    "square": ("x * x", "x * x"),
    "leaky_relu": ("torch.nn.functional.leaky_relu(x, 0.01)", "tl.where(x > 0, x, 0.01 * x)"),
    "exp": ("torch.exp(x)", "tl.exp(x)"),
    "hardtanh": ("torch.nn.functional.hardtanh(x)", "tl.minimum(tl.maximum(x, -1.0), 1.0)"),
    "elu": ("torch.nn.functional.elu(x)", "tl.where(x > 0, x, tl.exp(x) - 1.0)"),
    "softplus": ("torch.nn.functional.softplus(x)", "tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))"),
    "add": ("x + y", "x + y"),
    "mul": ("x * y", "x * y"),
    "sub": ("x - y", "x - y"),
}
ROWWISE = {  # name: (torch expression of x (and v), Triton body over one row `x`, result `out`)
    "rowsum": ("x.sum(dim=1)", "out = tl.sum(x, axis=0)"),
    "rowmax": ("x.amax(dim=1)", "out = tl.max(tl.where(mask, x, -float('inf')), axis=0)"),
    "rowmean": ("x.mean(dim=1)", "out = tl.sum(x, axis=0) / n"),
    "matvec": ("x @ v", "out = tl.sum(x * tl.load(v_ptr + cols, mask=mask, other=0.0), axis=0)"),
    "softmax": ("torch.softmax(x, dim=1)", "e = tl.exp(tl.where(mask, x, -float('inf')) - tl.max(tl.where(mask, x, "
                "-float('inf')), axis=0))\n    out = e / tl.sum(e, axis=0)"),
    "layernorm": ("torch.nn.functional.layer_norm(x, x.shape[1:])", "mu = tl.sum(x, axis=0) / n\n    d = tl.where("
                  "mask, x - mu, 0.0)\n    out = d / tl.sqrt(tl.sum(d * d, axis=0) / n + 1e-5)"),
}
VECTOR_OUT = {"softmax", "layernorm"}

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, {args}):
        return {expr}


def get_inputs(rows={rows}, cols={cols}):
    return [{inputs}]


def get_init_inputs():
    return []
'''

ELEMENTWISE_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _kernel({ptrs}out_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
{loads}    tl.store(out_ptr + offs, {expr}, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, {args}):
        out = torch.empty_like(x)
        _kernel[(triton.cdiv(x.numel(), 1024),)]({args}, out, x.numel(), BLOCK=1024)
        return out
'''

ROW_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, v_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    {body}
    tl.store(out_ptr + {store}, out{store_mask})


class ModelNew(torch.nn.Module):
    def forward(self, {args}):
        rows, n = x.shape
        out = torch.empty({out_shape}, device=x.device, dtype=x.dtype)
        _kernel[(rows,)](x, {v}, out, n, BLOCK=triton.next_power_of_2(n))
        return out
'''


def write_suite(root: Path, rows: int, cols: int) -> tuple[Path, Path]:
    problems, solutions = root / "problems" / "level1", root / "solutions"
    problems.mkdir(parents=True, exist_ok=True)
    for name, (expr, tl_expr) in ELEMENTWISE.items():
        two = "y" in expr
        args = "x, y" if two else "x"
        inputs = ", ".join(["torch.randn(rows, cols)"] * (2 if two else 1))
        (problems / f"{name}.py").write_text(PROBLEM.format(args=args, expr=expr, rows=rows, cols=cols, inputs=inputs))
        loads = "".join(f"    {v} = tl.load({v}_ptr + offs, mask=mask)\n" for v in args.split(", "))
        ptrs = "".join(f"{v}_ptr, " for v in args.split(", "))
        (solutions / name).mkdir(parents=True, exist_ok=True)
        (solutions / name / f"triton_{name}.py").write_text(
            ELEMENTWISE_KERNEL.format(ptrs=ptrs, loads=loads, expr=tl_expr, args=args))
    for name, (expr, body) in ROWWISE.items():
        vec = name == "matvec"
        args = "x, v" if vec else "x"
        inputs = "torch.randn(rows, cols), torch.randn(cols)" if vec else "torch.randn(rows, cols)"
        (problems / f"{name}.py").write_text(PROBLEM.format(args=args, expr=expr, rows=rows, cols=cols, inputs=inputs))
        full = name in VECTOR_OUT
        (solutions / name).mkdir(parents=True, exist_ok=True)
        (solutions / name / f"triton_{name}.py").write_text(ROW_KERNEL.format(
            body=body, args=args, v="v" if vec else "x", store="row * n + cols" if full else "row",
            store_mask=", mask=mask" if full else "", out_shape="(rows, n)" if full else "(rows,)"))
    return problems.parent, solutions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=8192)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--passes", type=int, default=2, help="suite runs after the reference's (default 2)")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile reference and no --reference-only "
                    "pass: the suite alone (the acceptance run's form)")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="kbh-suite-bench-"))
    problems, solutions = write_suite(out / "suite", a.rows, a.cols)
    n = len(ELEMENTWISE) + len(ROWWISE)
    # a dot product of `cols` fp32 terms summed in another order than cuBLAS's moves an output near zero by
    # ~1e-4 (the rows' sums have a standard deviation of sqrt(cols)): past KernelBench's fp32 atol of 1e-4
    (out / "suite.yaml").write_text(("defaults:\n  timing: {compile_reference: false}\n" if a.no_compile else "")
                                    + "problems:\n  matvec:\n    check: {tolerance: {float32: {atol: 1.0e-3, "
                                    "rtol: 1.0e-4}}}\n")
    base = ["--problems", str(problems), "--solutions", str(solutions), "--device", "cuda", "--suite",
            str(out / "suite.yaml")]
    rows = []
    if not a.no_compile:
        ref_s, ref_out, rc = run_eval(*base, "--reference-only", "--out", str(out / "reference"))
        rows.append(["reference only (eager + torch.compile)", round(ref_s, 1), rc, "", "", ""])
        base += ["--baseline", str(ref_out / "baseline.json")]
    for k in range(1, a.passes + 1):
        s, o, rc = run_eval(*base, "--out", str(out / f"run{k}"))
        recs = [r for d in sorted(o.iterdir()) if d.is_dir() for r in records(d)] if o.is_dir() else []
        correct = sum(r["status"] == "correct" for r in recs)
        rows.append([f"suite, pass {k}" + (" (Triton cache cold)" if k == 1 else ""), round(s, 1), rc, len(recs),
                     correct, round(s / n, 2)])
        if k == a.passes:
            for r in recs:
                if r["status"] != "correct":
                    print(f"{r['problem']}/{r['solution']}: {r['status']}: {r['message'][:200]}")
    print(f"{n} problems x 1 candidate, {a.rows} x {a.cols} fp32; output {out}")
    print(md_table(["run", "seconds", "rc", "records", "correct", "s per (problem, candidate)"], rows))


if __name__ == "__main__":
    main()
