"""CUDA candidates that include <torch/extension.h> themselves (in cuda_sources, and in both sources) build and
are correct where the cache holds the precompiled header, whose folder is on CPATH for nvcc's compiles too."""

import pytest

from conftest import CANDIDATES, CONFIGS, fresh_cache_with_header

pytestmark = pytest.mark.gpu


def test_cuda_sources_that_include_the_torch_header_build(run_eval, build_cache, tmp_path):
    cache = fresh_cache_with_header(build_cache, tmp_path / "cache")
    res = run_eval(CONFIGS / "gpu_vadd.yaml", "--device", "cuda", "--shapes", "tiny", "--cache", str(cache),
                   "--solution", str(CANDIDATES / "gpu" / "vadd_includes.py"),
                   str(CANDIDATES / "gpu" / "vadd_cuda_include.py"))
    assert res.rc == 0, res.stderr
    for name in ("vadd_includes", "vadd_cuda_include"):
        r = res.by(name)
        assert r["status"] == "correct", r
        assert res.run_json["builds"][name]["cached"] is False
    if res.run_json["pch"]["status"] == "ready" and (build_cache / "pch").is_dir():
        assert any(b["pch"] for b in res.run_json["builds"].values()), res.run_json["builds"]
