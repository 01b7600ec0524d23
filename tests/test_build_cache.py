"""The build cache's keys: a change of source, flag or target architecture rebuilds, an unchanged call does not;
and the judge's record of whole builds (harness.judge.buildcache), which lets an unchanged candidate skip its build
process only while every extension it made is still in the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cachekeys import build_memo_key, environment_key, extension_ready
from harness.judge import buildcache
from harness.judge.builds import BuildResult, build_env, run_build, snapshot_candidate
from harness.worker import extcache

REPO = Path(__file__).resolve().parents[1]


def test_unchanged_call_keeps_its_key_and_any_change_of_the_binary_changes_it(tmp_path, monkeypatch):
    def key(**changes):
        args = {"name": "ext", "cpp_sources": "int f() { return 1; }", "extra_cflags": ["-O2"], "verbose": False,
                "build_directory": None} | changes
        return extcache.call_key("load_inline", args, environment_key())

    base = key()
    assert key() == base
    assert key(verbose=True) == key(build_directory=str(tmp_path)) == base  # how it is built, not what
    assert key(extra_cflags=["-O3"]) != base and key(cpp_sources="int f() { return 2; }") != base
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert key() != base
    src = tmp_path / "k.cpp"
    src.write_text("int f() { return 1; }")
    first = extcache.call_key("load", {"name": "ext", "sources": [str(src)]}, environment_key())
    src.write_text("int f() { return 3; }")
    assert extcache.call_key("load", {"name": "ext", "sources": [str(src)]}, environment_key()) != first


PY_CANDIDATE = """
import os
open(os.path.join({marks!r}, "imported-" + str(os.getpid())), "w").close()
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""


def _build(tmp_path: Path, text: str, env: dict | None = None):
    src = tmp_path / "cand.py"
    src.write_text(text)
    cand = snapshot_candidate(src, "cand", tmp_path / "src")
    return run_build(cand, repo_root=REPO, cache_dir=tmp_path / "cache", env=env or {"CUDA_VISIBLE_DEVICES": ""},
                     timeout_s=300, log_path=tmp_path / "build.log", scratch=tmp_path, cores=None)


def test_an_unchanged_candidate_skips_its_build_process(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    text = PY_CANDIDATE.format(marks=str(marks))
    first = _build(tmp_path, text)
    assert first.status == "built" and not first.memo, first.message
    assert len(list(marks.iterdir())) == 1
    again = _build(tmp_path, text)
    assert again.status == "built" and again.memo and again.cached
    assert len(list(marks.iterdir())) == 1  # no process imported it
    changed = _build(tmp_path, text + "\n# changed\n")
    assert not changed.memo and len(list(marks.iterdir())) == 2
    other_arch = _build(tmp_path, text, env={"CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": "8.0"})
    assert not other_arch.memo and len(list(marks.iterdir())) == 3


def test_a_failed_build_is_never_remembered(tmp_path):
    text = "raise RuntimeError('no')\n"
    assert _build(tmp_path, text).status == "deferred"
    assert _build(tmp_path, text).memo is False


def test_the_record_holds_only_while_every_extension_is_in_the_cache(tmp_path):
    cache = tmp_path / "cache"
    key = "ab" * 16
    folder = cache / key[:2] / key
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text("{}")
    (folder / "ext.so").write_bytes(b"lib")
    memo = build_memo_key("0" * 64, {})
    buildcache.memo_store(cache, memo, [{"name": "ext", "key": key, "ok": True}])
    assert buildcache.memo_lookup(cache, memo) == [{"name": "ext", "key": key}]
    (folder / "ext.so").unlink()
    assert buildcache.memo_lookup(cache, memo) is None


@pytest.mark.parametrize("event", [
    {"name": "ext", "key": "ab" * 16, "ok": False},
    {"name": "../ext", "key": "ab" * 16, "ok": True},
    {"name": "ext", "key": "../../x", "ok": True},
])
def test_a_build_with_a_failed_or_odd_extension_is_not_remembered(tmp_path, event):
    memo = build_memo_key("1" * 64, {})
    buildcache.memo_store(tmp_path, memo, [event])
    assert not (tmp_path / "builds").exists() or not any((tmp_path / "builds").iterdir())


def test_memo_key_follows_the_build_environment():
    a = build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert a == build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0", "UNRELATED": "x"})
    assert a != build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "8.0"})
    assert a != build_memo_key("3" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert BuildResult("built").memo is False


def staged(staging: Path, name: str, key: str, so: bytes = b"lib") -> Path:
    folder = staging / key[:2] / key
    folder.mkdir(parents=True)
    (folder / f"{name}.so").write_bytes(so)
    (folder / "meta.json").write_text("{}")
    return folder


def test_adopt_copies_a_staged_build_into_its_root_and_nothing_else(tmp_path):
    """--isolate: the judge copies what a build compiled into the candidate's own folder of the cache; an event
    with a key or name that is not one, a failed or cached one, or a library that is a link, is left out."""
    staging, root = tmp_path / "staging", tmp_path / "root"
    good, bad_key, link = "a" * 32, "B" * 32, "c" * 32
    staged(staging, "ext", good)
    staged(staging, "ext", bad_key)
    staged(staging, "ext", "d" * 32)
    folder = staged(staging, "ext", link)
    (folder / "ext.so").unlink()
    (folder / "ext.so").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_bytes(b"not a library")
    events = [{"name": "ext", "key": good, "ok": True, "cached": False},
              {"name": "ext", "key": bad_key, "ok": True, "cached": False},
              {"name": "../ext", "key": "d" * 32, "ok": True, "cached": False},
              {"name": "ext", "key": "d" * 32, "ok": False, "cached": False},
              {"name": "ext", "key": link, "ok": True, "cached": False}]
    assert buildcache.adopt_staged(root, staging, events) == ["ext"]
    assert extension_ready(root, "ext", good)
    assert (root / good[:2] / good / "ext.so").read_bytes() == b"lib"
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["ext.so", "meta.json"]


CPP_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline("kbh_stale_lock", cpp_sources="int answer() { return 42; }", functions=["answer"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * ext.answer()
"""


@pytest.mark.slow
def test_a_build_killed_midway_leaves_no_lock_that_stops_the_next_build(tmp_path):
    """A build killed at its limit or by Ctrl-C leaves torch's own lock file in the extension's folder; the next
    build of that source must not wait on it (a CPU run's builds remove it under the cache's file lock)."""
    env = build_env(None, "", tmp_path)
    first = _build(tmp_path, CPP_CANDIDATE, env=env)
    assert first.status == "built", first.message
    folders = [m.parent for m in (tmp_path / "cache").glob("*/*/meta.json")]
    assert folders
    for folder in folders:  # what a build killed before it finished leaves: no library, torch's lock held
        for f in [*folder.glob("*.so"), folder / "meta.json"]:
            f.unlink()
        (folder / "lock").touch()
    src = tmp_path / "cand.py"
    cand = snapshot_candidate(src, "cand", tmp_path / "src")
    again = run_build(cand, repo_root=REPO, cache_dir=tmp_path / "cache", env=env, timeout_s=120,
                      log_path=tmp_path / "build2.log", scratch=tmp_path, cores=None)
    assert again.status == "built" and not again.cached, (again.status, again.message)
    assert all((f / "meta.json").exists() for f in folders)
