"""--isolate on the CPU: workers that import candidates run as users of their own, so the build cache is
read-only to candidate code; a build's library is copied in by the judge, into the candidate's own folder,
and found there by the next run. Needs root and a Python that other users can start (skipped otherwise:
an interpreter under /root, mode 0700, is not)."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO
from harness.errors import UsageError
from harness.judge import isolation

PLANTER = CANDIDATES / "isolation" / "plant_cache.py"
HONEST = REPO / "solutions" / "pack_tokens" / "cpu_cpp.py"


def open_folder() -> Path:
    d = Path(tempfile.mkdtemp(prefix="kbh-iso-test-"))
    d.chmod(0o755)
    return d


def run(cache: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "run_eval.py"), str(CONFIGS / "cpu_tiny.yaml"), "--device",
                           "cpu", "--cache", str(cache), "--out", str(out), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=1800, env=dict(os.environ, KBH_TEST_PLANT=str(cache)))


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def planted(cache: Path) -> list[Path]:
    return sorted(cache.rglob("planted-*"))


@pytest.fixture(scope="module")
def isolated():
    cache = open_folder()
    try:
        isolation.check_available(REPO, {"cache": cache})
    except UsageError as e:
        pytest.skip(str(e))
    first, second = open_folder(), open_folder()
    r1 = run(cache, first, "--isolate", "--solution", str(HONEST), str(PLANTER))
    r2 = run(cache, second, "--isolate", "--solution", str(HONEST))
    return cache, (r1, first), (r2, second)


def test_isolated_run_is_correct_and_the_cache_is_read_only_to_candidates(isolated):
    cache, (r1, out), _ = isolated
    assert r1.returncode == 0, r1.stderr[-2000:]
    recs = records(out)
    assert recs and all(r["status"] == "correct" for r in recs), [(r["solution"], r["status"], r["message"]) for r in recs]
    assert planted(cache) == []
    log = (out / "logs" / "plant_cache.build.log").read_text() + (out / "logs" / "plant_cache.log").read_text()
    assert "plant_cache: PermissionError" in log and "plant_cache: planted" not in log


def test_the_judge_adopts_the_build_into_the_candidates_own_folder_and_the_next_run_finds_it(isolated):
    cache, (r1, out1), (r2, out2) = isolated
    built = json.loads((out1 / "run.json").read_text())["builds"]["cpu_cpp"]
    root = Path(built["ext_root"])
    assert root.parent == cache / "by-source" and not built["memo"]
    libs = list(root.glob("*/*/*.so"))
    assert libs and all(p.stat().st_uid == 0 and not p.stat().st_mode & 0o022 for p in libs)
    assert r2.returncode == 0, r2.stderr[-2000:]
    again = json.loads((out2 / "run.json").read_text())["builds"]["cpu_cpp"]
    assert again["memo"] and again["ext_root"] == built["ext_root"]
    assert all(r["status"] == "correct" for r in records(out2))


def test_without_isolate_the_same_candidate_writes_into_the_cache(isolated):
    """The control: the planter's write lands when its workers run as the judge's user."""
    cache = open_folder()
    r = run(cache, open_folder(), "--solution", str(PLANTER))
    assert r.returncode == 0, r.stderr[-2000:]
    assert planted(cache)


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal for a non-root judge comes first")
def test_a_cache_other_users_cannot_reach_is_refused_in_one_line(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    r = run(closed / "cache", open_folder(), "--isolate")
    assert r.returncode == 2
    assert "--isolate" in r.stderr and str(closed) in r.stderr and "Traceback" not in r.stderr
