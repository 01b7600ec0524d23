"""bench/compile_check.py on this machine (nvcc, no GPU): the bundled CUDA solution's sources compile as
load_inline would build them, and a source that would not build on the GPU machine fails here."""

import shutil
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import compile_check  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

BROKEN = '''
from torch.utils.cpp_extension import load_inline

FLAT_ITEMS = 8
source = r"""
__global__ void k(float* x) { x[threadIdx.x] = KBH_FLAT_ITEMS; }
torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }
"""
for key, value in {"FLAT": 1, "FLAT_ITEMS": FLAT_ITEMS}.items():  # the wrong order: KBH_FLAT_ITEMS -> 1_ITEMS
    source = source.replace(f"KBH_{key}", str(value))
ext = load_inline(name="broken", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=source,
                  functions=["f"])
'''


def test_the_fast_solution_compiles_as_load_inline_would_build_it():
    results = compile_check.check(REPO / "solutions" / "pack_tokens" / "fast_vec16.py")
    assert [part.split()[-1] for part, _, _ in results] == ["cuda", "c++"]
    assert all(ok for _, ok, _ in results), results


def test_a_constant_substituted_into_the_wrong_name_fails(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    results = dict((part.split()[-1], (ok, msg)) for part, ok, msg in compile_check.check(path))
    ok, message = results["cuda"]
    assert not ok and "literal" in message, message
    assert results["c++"][0] is True
