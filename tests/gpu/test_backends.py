"""Candidates in kernel DSLs run under default strict checks, as on a new user's machine (a new home folder, no
~/.triton in it): Triton kernels are correct with no flag; a Triton kernel that forward never
launches, torch doing the work, is flagged from the kernels the profiler saw launched."""

import pytest

from conftest import CANDIDATES, CONFIGS

pytestmark = pytest.mark.gpu
BACKENDS = CANDIDATES / "backends"


def test_triton_candidates_are_correct_and_a_dummy_kernel_is_flagged(run_eval, tmp_path):
    pytest.importorskip("triton")
    home = tmp_path / "home"
    home.mkdir()
    res = run_eval(CONFIGS / "gpu_vadd.yaml", "--device", "cuda", "--shapes", "tiny", "large", "--solution",
                   *(str(BACKENDS / f"{n}.py") for n in ("vadd_triton", "vadd_triton_aliased", "dummy_triton")),
                   env={"HOME": str(home)})
    assert res.rc == 0, res.stderr
    for name in ("vadd_triton", "vadd_triton_aliased"):
        for shape in ("tiny", "large"):
            r = res.by(name, shape)
            assert r["status"] == "correct" and not [f for f in r["flags"] if f.startswith("static:")], r
            assert "own_kernel_not_launched" not in r["flags"], r
            assert r["speedup"] > 0
    for shape in ("tiny", "large"):
        dummy = res.by("dummy_triton", shape)
        assert dummy["status"] == "correct", dummy
        assert "own_kernel_not_launched" in dummy["flags"], dummy
        assert not [f for f in dummy["flags"] if f.startswith("static:torch_compute_in_forward")], dummy
