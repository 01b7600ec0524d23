"""The build pool's scheduling: the GPU architecture read before any CUDA context, builds niced in the order
they were submitted, and a stopped run leaving no build behind."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from harness.build import BuildPool, build_nice, run_build, snapshot_candidate
from harness.envinfo import gpu_arch_hint

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
