"""Candidates that include <torch/extension.h> themselves build, with the cache's precompiled header and
without it (load_inline already puts that include first; gcc uses a precompiled header for the first only)."""

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, fresh_cache_with_header, judged

SELF_INCLUDE = str(CANDIDATES / "includes" / "cpp_self_include.py")


@pytest.mark.slow
def test_self_including_source_builds_with_the_precompiled_header(run_eval, build_cache, tmp_path):
    cache = fresh_cache_with_header(build_cache, tmp_path / "cache")
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--shapes", "tiny", "--cache", str(cache),
                   "--solution", SELF_INCLUDE)
    assert res.rc == 0, res.stderr
    r = res.by("cpp_self_include")
    assert r["status"] == "correct" and judged(r) == [], r
    if res.run_json["pch"]["status"] == "none":
        pytest.skip("torch builds no precompiled header with this compiler")
    build = res.run_json["builds"]["cpp_self_include"]
    assert build["pch"] is True and build["cached"] is False, build


@pytest.mark.slow
def test_self_including_source_builds_without_the_precompiled_header(run_eval, tmp_path):
    config = tmp_path / "no_pch.yaml"
    text = (CONFIGS / "cpu_tiny.yaml").read_text().replace("../../", f"{REPO}/")
    config.write_text(text + "build:\n  pch: false\n")
    res = run_eval(config, "--device", "cpu", "--shapes", "tiny", "--cache", str(tmp_path / "cache"),
                   "--solution", SELF_INCLUDE)
    assert res.rc == 0, res.stderr
    assert res.by("cpp_self_include")["status"] == "correct"
    assert res.run_json["builds"]["cpp_self_include"]["pch"] is False
