"""Each static rule fires on code that breaks it, with its line, and stays quiet on comments and docstrings."""

from pathlib import Path

import pytest

from harness.judge.static_checks import analyze, defined_kernels, launched_own_kernel

KERNEL = '''
from torch.utils.cpp_extension import load_inline
ext = load_inline("k", "", cuda_sources="__global__ void k() {}", functions=["f"])
'''


def rules(src: str, device: str = "cpu") -> dict[str, int]:
    return {f.rule: f.line for f in analyze(src, device)}


@pytest.mark.parametrize("src, rule, line", [
    ("import threading\n", "threads", 1),
    ("x = 1\nfrom concurrent.futures import ThreadPoolExecutor\n", "threads", 2),
    ("import multiprocessing as mp\n", "processes", 1),
    ("import os\nos.fork()\n", "processes", 2),
    ("import ctypes\n", "ctypes", 1),
    ("import torch\ntorch.allclose = lambda *a: True\n", "patches_runtime", 2),
    ("import time as t\nt.perf_counter = None\n", "patches_runtime", 2),
    ("import torch\nsetattr(torch.cuda.Event, 'elapsed_time', None)\n", "patches_runtime", 2),
    ("import torch\nE = torch.cuda.Event\nE.record = None\n", "patches_runtime", 3),
    ("import harness.timing\nharness.timing._perf_ns = None\n", "patches_runtime", 2),
    ("import builtins\nbuiltins.isinstance = None\n", "patches_runtime", 2),
    ("import torch\ns = torch.cuda.Stream()\n", "side_stream", 2),
    ("import torch\nclass Lazy(torch.Tensor):\n    pass\n", "tensor_subclass", 2),
    ("import torch\nx = torch.Tensor._make_subclass(object, None)\n", "tensor_subclass", 2),
    ("class P:\n    def __torch_function__(self, *a):\n        pass\n", "tensor_subclass", 2),
    ("import torch\ntry:\n    y = f()\nexcept Exception:\n    y = torch.relu(x)\n", "torch_fallback", 5),
    ('src = """\n__global__ void k() {}\nvoid g() { cudaStreamCreate(&s); }\n"""\n', "side_stream", 3),
    ('src = "void g() { std::thread t(f); }"\n', "threads", 1),
])
def test_rule_fires_with_its_line(src, rule, line):
    found = rules(src)
    assert rule in found, found
    assert found[rule] == line


@pytest.mark.parametrize("src", [
    '"""Uses threading? No: this docstring mentions import threading and cudaStreamCreate."""\n',
    "# import threading\n# torch.allclose = None\nx = 1\n",
    'src = """\n// cudaStreamCreate(&s) is not called\n/* std::thread */\n__global__ void k() {}\n"""\n',
    "import torch\nmodel = torch.nn.Linear(2, 2)\nmodel.weight = None\n",
    "import torch\nwith torch.no_grad():\n    x = torch.zeros(3)\n",
    "try:\n    import foo\nexcept ImportError:\n    foo = None\n",
])
def test_quiet_on_harmless_code(src):
    assert rules(src) == {}


def test_cuda_candidate_needs_a_kernel_and_warns_on_torch_only_forward():
    src = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    found = {f.rule: f for f in analyze(src, "cuda")}
    assert found["no_custom_kernel"].severity == "error"
    assert found["torch_compute_in_forward"].severity == "warning"
    assert found["torch_compute_in_forward"].line == 4
    assert analyze(src, "cpu") == []


def test_forward_that_calls_the_extension_is_not_warned_even_with_torch_ops():
    src = KERNEL + (
        "import torch\n"
        "def run(x):\n    return ext.f(x)\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        p = run(x)\n        return torch.mm(p, x)\n")
    assert rules(src, "cuda") == {}


def test_extension_kept_on_self_counts_as_a_kernel_call():
    src = KERNEL.replace("ext = ", "class Holder:\n    pass\nunused = ") + (
        "import torch\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.ext = load_inline('k2', '', cuda_sources='__global__ void k() {}')\n"
        "    def forward(self, x):\n        return torch.relu(self.ext.f(x))\n")
    assert "torch_compute_in_forward" not in rules(src, "cuda")


def test_bundled_solutions_are_clean():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "solutions" / "pack_tokens"
    for name in ("original_warp_float4.py", "fast_vec16.py"):
        assert analyze((root / name).read_text(), "cuda") == [], name
    assert analyze((root / "cpu_cpp.py").read_text(), "cpu") == []


def test_syntax_error_yields_no_findings():
    assert analyze("def broken(:\n", "cuda") == []


BACKENDS = Path(__file__).resolve().parent / "candidates" / "backends"
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "pack_tokens"
CUTE = '''
import torch
import cutlass.cute as cute

@cute.kernel
def scale_kernel(x):
    pass

@cute.jit
def scale(x):
    scale_kernel(x).launch(grid=[1, 1, 1], block=[128, 1, 1])

class ModelNew(torch.nn.Module):
    def forward(self, x):
        scale(x)
        return x
'''
TILELANG = '''
import torch
import tilelang
import tilelang.language as T

@tilelang.jit
def make(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32")):
        pass
    return main

kernel = make(1024)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return kernel(x)
'''


@pytest.mark.parametrize("src", [
    (BACKENDS / "vadd_triton.py").read_text(),
    (BACKENDS / "vadd_triton_aliased.py").read_text(),
    CUTE,
    TILELANG,
], ids=["triton", "triton_autotune_aliased", "cute", "tilelang"])
def test_kernel_dsl_candidates_pass_strict_checks(src):
    assert analyze(src, "cuda") == []


def test_dsl_kernel_defined_but_not_launched_in_forward_is_warned():
    found = {f.rule: f for f in analyze((BACKENDS / "dummy_triton.py").read_text(), "cuda")}
    assert "no_custom_kernel" not in found
    assert found["torch_compute_in_forward"].severity == "warning"


def test_a_decorator_of_another_library_is_no_kernel():
    src = ("import torch\nimport functools\n@functools.lru_cache\ndef jit(x):\n    return x\n"
           "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n")
    assert "no_custom_kernel" in rules(src, "cuda")


def test_the_kernels_a_candidate_defines_are_found_by_name_and_matched_against_profiler_names():
    src = ('import torch\nimport triton\nsrc = r"""\n'
           "// __global__ void commented_out(int n) {}\n"
           "template <int V> __global__ void __launch_bounds__(256) pack_rows(const float* x) {}\n"
           "__global__ static void zero_tail(float* y, int n) {}\n"
           '"""\n@triton.jit\ndef _scale(x_ptr):\n    pass\n')
    kernels = defined_kernels(src)
    assert kernels == {"pack_rows", "zero_tail", "_scale"}
    assert launched_own_kernel(kernels, ["Memcpy HtoD (Pageable -> Device)", "void pack_rows<4>(float const*)"])
    assert launched_own_kernel(kernels, ["_scale"])
    torch_only = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                  "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"]
    assert not launched_own_kernel(kernels, torch_only)
    assert not launched_own_kernel(frozenset({"add"}), torch_only)  # a whole identifier, not a part of one
    assert defined_kernels((BACKENDS / "dummy_triton.py").read_text()) == {"_unused"}
    assert {"pack_gather", "scatter_rows"} <= defined_kernels((SOLUTIONS / "fast_vec16.py").read_text())
