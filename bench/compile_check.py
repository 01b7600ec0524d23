"""Compile a candidate's CUDA and C++ sources on a machine with nvcc and no GPU: the sources its
`load_inline` call would build, captured by running the file with load_inline replaced by a recorder,
compiled against this torch's headers (CUDA to PTX for sm_90 only, no machine code; C++ syntax only).

A GPU session costs minutes to start; a source that does not compile (a constant substituted into the
wrong name, a missing header) should fail here first. Catches compile errors, not wrong results.

    python bench/compile_check.py FILE.py [...]
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import SimpleNamespace


def captured_sources(path: Path) -> list[dict]:
    """Every load_inline call the file makes at import: its keyword arguments."""
    import torch.utils.cpp_extension as ext

    calls: list[dict] = []
    real = ext.load_inline

    def record(name, cpp_sources, cuda_sources=None, functions=None, **kw):
        if isinstance(functions, str):
            functions = [functions]
        calls.append({"name": name, "cpp": _joined(cpp_sources), "cuda": _joined(cuda_sources),
                      "functions": list(functions or []), "implicit": not kw.get("no_implicit_headers", False),
                      "cuda_flags": list(kw.get("extra_cuda_cflags") or []), "cflags": list(kw.get("extra_cflags") or [])})
        return SimpleNamespace()

    ext.load_inline = record
    try:
        runpy.run_path(str(path), run_name="kbh_compile_check")
    finally:
        ext.load_inline = real
    return calls


def _joined(src) -> str:
    if not src:
        return ""
    return src if isinstance(src, str) else "\n".join(src)


def _include_flags(stub: Path) -> list[str]:
    import torch.utils.cpp_extension as ext

    paths = [*ext.include_paths(), sysconfig.get_paths()["include"]]
    macros = Path(ext.include_paths()[0]) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    if not macros.exists():  # absent from CPU-only wheels; it only sets build macros
        (stub / "c10" / "cuda" / "impl").mkdir(parents=True, exist_ok=True)
        (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n")
        paths.insert(0, str(stub))
    return [f"-I{p}" for p in paths]


def compile_sources(call: dict, work: Path) -> list[tuple[str, bool, str]]:
    """(part, ok, first error lines) for the CUDA and the C++ source of one load_inline call, with the
    headers and bindings load_inline adds."""
    import torch

    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    inc = _include_flags(work / "stub")
    out = []
    if call["cuda"]:
        cu = work / f"{call['name']}.cu"
        head = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" if call["implicit"] else ""
        cu.write_text(head + call["cuda"])
        flags = [f for f in call["cuda_flags"] if not f.startswith(("-gencode", "--generate-code", "-arch"))]
        cmd = ["nvcc", "-std=c++17", "-arch=compute_90", "-c", str(cu), "-o", str(work / "cuda.o"), abi, *inc, *flags]
        out.append(("cuda", *_run(cmd)))
    if call["cpp"]:
        cpp = work / f"{call['name']}.cpp"
        binds = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in call["functions"])
        module = f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{{binds}}}\n" if call["functions"] else ""
        cpp.write_text(("#include <torch/extension.h>\n" if call["implicit"] else "") + call["cpp"] + module)
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"
        out.append(("c++", *_run([cxx, "-std=c++17", "-fsyntax-only", f"-DTORCH_EXTENSION_NAME={call['name']}", str(cpp),
                                  abi, *inc, *call["cflags"]])))
    return out


def _run(cmd: list[str]) -> tuple[bool, str]:
    p = subprocess.run(cmd, capture_output=True, text=True)
    errors = [line for line in (p.stdout + p.stderr).splitlines() if "error" in line]
    return p.returncode == 0, "\n".join(errors[:5]) or (p.stderr[-500:] if p.returncode else "")


def check(path: Path) -> list[tuple[str, bool, str]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="kbh-compile-") as d:
        for call in captured_sources(path):
            results += [(f"{call['name']} {part}", ok, msg) for part, ok, msg in compile_sources(call, Path(d))]
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    if shutil.which("nvcc") is None:
        sys.exit("compile_check: nvcc not found on PATH")
    failed = False
    for f in args.files:
        for part, ok, msg in check(f):
            print(f"{f.name}: {part}: {'ok' if ok else 'FAILED'}" + (f"\n{msg}" if not ok else ""))
            failed = failed or not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
