"""The build pool's scheduling: the GPU architecture read before any CUDA context, builds niced in the order
they were submitted, a stopped run leaving no build behind; the cache's precompiled header found only once
complete, and its build stopped with the run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.judge.builds import BuildPool, HeaderBuild, build_nice, run_build, snapshot_candidate
from harness.judge.envinfo import gpu_arch_hint
from harness.worker import extcache

REPO = Path(__file__).resolve().parents[1]


def fake_nvidia_smi(tmp_path: Path, monkeypatch, stdout: str, rc: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nprintf '{stdout}'\nexit {rc}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("stdout, rc, expected", [
    ("9.0\\n9.0\\n", 0, "9.0"),
    ("9.0\\n8.0\\n", 0, None),
    ("Field \"compute_cap\" is not a valid field to query.\\n", 2, None),
    ("[N/A]\\n", 0, None),
    ("9.0\\n", 1, None),
])
def test_arch_hint_only_when_every_gpu_agrees(tmp_path, monkeypatch, stdout, rc, expected):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout, rc)
    assert gpu_arch_hint() == expected


def test_no_arch_hint_without_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_arch_hint() is None


def test_earlier_builds_get_higher_priority_and_all_yield_to_the_judge():
    nices = [build_nice(k) for k in range(40)]
    assert nices == sorted(nices) and nices[0] > 0 and nices[1] > nices[0] and max(nices) == 19


def _candidate(tmp_path: Path, body: str):
    src = tmp_path / "cand.py"
    src.write_text(body)
    return snapshot_candidate(src, "cand", tmp_path / "src")


def _kwargs(tmp_path: Path, **extra) -> dict:
    return dict(repo_root=REPO, cache_dir=tmp_path / "cache", env={"CUDA_VISIBLE_DEVICES": ""}, timeout_s=120,
                log_path=tmp_path / "build.log", scratch=tmp_path, cores=None) | extra


def test_build_process_runs_at_the_nice_it_was_given(tmp_path):
    seen = tmp_path / "nice.txt"
    cand = _candidate(tmp_path, f"import os\nopen({str(seen)!r}, 'w').write(str(os.nice(0)))\n"
                                "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    result = run_build(cand, **_kwargs(tmp_path, nice=7))
    assert result.status in ("built", "deferred"), result.message
    assert int(seen.read_text()) == max(7, os.nice(0))


def test_shutdown_kills_a_running_build(tmp_path):
    started = tmp_path / "started"
    cand = _candidate(tmp_path, f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(3600)\n")
    pool = BuildPool(1)
    fut = pool.submit(run_build, cand, **_kwargs(tmp_path))
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    pool.shutdown()
    result = fut.result(timeout=60)
    assert result.status == "deferred" and "exit code -9" in result.message


def test_pch_command_is_torchs_header_command_and_patches_nothing_for_good():
    before = (subprocess.check_output, os.path.isfile)
    args = extcache.pch_command()
    assert (subprocess.check_output, os.path.isfile) == before
    if args is None:
        pytest.skip("torch builds no precompiled header with this compiler")
    i = args.index("-o")
    assert "c++-header" in args and args[i - 1].endswith("extension.h") and args[i + 1].endswith("extension.h.gch")
    assert args[i + 1].startswith(os.path.dirname(args[i - 1]))  # where torch would write it; ensure_pch redirects it


def test_header_found_only_when_complete_and_only_for_its_compiler(tmp_path, monkeypatch):
    args = extcache.pch_command()
    if args is None:
        pytest.skip("torch builds no precompiled header with this compiler")
    monkeypatch.setenv("KBH_TOOLCHAIN", "gcc-a")
    header = extcache.pch_folder(tmp_path, args, "gcc-a") / "torch"
    header.mkdir(parents=True)
    (header / "tmp-123.gch").write_bytes(b"partial")
    assert extcache.ready_pch(tmp_path) is None
    (header / "extension.h.gch").write_bytes(b"complete")
    assert extcache.ready_pch(tmp_path) is None  # no shim: a second include of the header would find nothing
    (header / "extension.h").write_text(extcache.SHIM)
    assert extcache.ready_pch(tmp_path) == header.parent
    in_build_worker = subprocess.run(  # as a build worker sees it: after install() disabled torch's own header
        [sys.executable, "-c", "import sys; from harness.worker import extcache; extcache.install(sys.argv[1]); "
                               "print(extcache.ready_pch(sys.argv[1]))", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, env=dict(os.environ, KBH_TOOLCHAIN="gcc-a"))
    assert in_build_worker.stdout.strip() == str(header.parent), in_build_worker.stderr
    monkeypatch.setenv("KBH_TOOLCHAIN", "gcc-b")
    assert extcache.ready_pch(tmp_path) is None
    monkeypatch.setenv("KBH_TOOLCHAIN", "gcc-a")
    (header.parent / "ATen").mkdir()  # a planted header folder would shadow torch's in every later build
    assert extcache.ready_pch(tmp_path) is None
    (header.parent / "ATen").rmdir()
    (header / "extension.h").write_text("#error planted\n")
    assert extcache.ready_pch(tmp_path) is None
    (header / "extension.h").write_text(extcache.SHIM)
    assert extcache.ready_pch(tmp_path) == header.parent


def test_header_build_stopped_with_the_run_leaves_no_partial_file(tmp_path):
    partial = tmp_path / "pch" / "k" / "torch"
    partial.mkdir(parents=True)
    hb = HeaderBuild(tmp_path, "tc", REPO, {}, tmp_path / "pch.log", timeout_s=600)
    hb._args = [sys.executable, "-c", f"import os, time\nopen(os.path.join({str(partial)!r}, f'tmp-{{os.getpid()}}.gch'), "
                                      "'w').close()\ntime.sleep(600)"]
    hb.start()
    deadline = time.monotonic() + 60
    while not list(partial.glob("tmp-*.gch")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(partial.glob("tmp-*.gch"))
    hb.stop()
    hb.wait()
    assert hb.info()["status"] == "stopped" and not list(partial.glob("tmp-*.gch"))
