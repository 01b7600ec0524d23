"""JIT caches under the write sandbox: a candidate writing where Triton, inductor and the CUDA driver keep their
caches works on a fresh machine whose home folder the sandbox protects (a repo under the home folder), and none
can write the reference's own caches."""

import tempfile
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, judged
from harness import sandbox

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel")]


def test_jit_caches_are_writable_and_the_references_are_not(run_eval, build_cache):
    home = Path(tempfile.mkdtemp(prefix="home-", dir=REPO / "tests"))  # inside the repo: protected
    planted = build_cache.with_name(build_cache.name + "-reference") / "triton" / "planted.txt"
    try:
        res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--static-checks", "off", "--shapes", "tiny",
                       "--solution", str(CANDIDATES / "honest" / "jit_caches.py"),
                       str(CANDIDATES / "isolation" / "plant_reference_cache.py"),
                       env={"HOME": str(home), "PLANT_AT": str(planted)})
        assert res.rc == 0, res.stderr[-2000:]
        r = res.by("jit_caches", "tiny")
        assert r["status"] == "correct", r["message"]
        assert not planted.exists()
        assert not (home / ".triton").exists() and not (home / ".nv").exists()
    finally:
        for p in sorted(home.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        home.rmdir()


def test_a_torch_compile_candidate_is_correct_with_no_flag(run_eval):
    """What torch.compile changes in its process at first use (nn.Module.__init__ rewrapped, a compile thread)
    is done before the worker's watch takes its snapshot: none of it reads as the candidate's."""
    res = run_eval(CONFIGS / "cpu_compile.yaml", "--device", "cpu", "--solution",
                   str(CANDIDATES / "backends" / "compiled_cpu.py"))
    assert res.rc == 0, res.stderr[-2000:]
    r = res.by("compiled_cpu", "tiny")
    assert r["status"] == "correct" and judged(r) == [], r
    assert r["speedup_compile"] is not None
