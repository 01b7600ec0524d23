"""The build cache's keys: a change of source, flag or target architecture rebuilds, an unchanged call does not;
and the judge's record of whole builds (extcache.memo_*), which lets an unchanged candidate skip its build
process only while every extension it made is still in the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import build, extcache
from harness.build import run_build, snapshot_candidate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_load_inline(tmp_path, monkeypatch):
    """extcache's wrapper around a stand-in for load_inline that records its calls and leaves a library file; the
    import of a cached library is stubbed, so keys are tested without a compiler."""
    built: list[dict] = []

    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                    extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
                    verbose=False, with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                    keep_intermediates=True, use_pch=False):
        built.append({"name": name, "flags": extra_cflags})
        Path(build_directory, f"{name}.so").write_bytes(b"lib")
        return "built"

    monkeypatch.setattr(extcache, "_import", lambda name, so, is_python_module: "cached")
    extcache.events.clear()
    cache = tmp_path / "cache"
    monkeypatch.setitem(extcache._roots, "cache", cache)
    monkeypatch.setitem(extcache._roots, "staging", None)

    def call(src: str = "int f() { return 1; }", flags=("-O2",), **kw):
        wrapped = extcache._cached(load_inline, "load_inline", extcache.environment_key())
        return wrapped("ext", cpp_sources=src, extra_cflags=list(flags), **kw)

    yield call, built
    extcache.events.clear()


def test_unchanged_call_is_a_hit_and_any_change_rebuilds(fake_load_inline, monkeypatch):
    call, built = fake_load_inline
    assert call() == "built" and call() == "cached"
    assert call(flags=("-O3",)) == "built"
    assert call(src="int f() { return 2; }") == "built"
    assert call(verbose=True) == "cached"  # how it is built, not what: same binary
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert call() == "built"
    assert [b["flags"] for b in built] == [["-O2"], ["-O3"], ["-O2"], ["-O2"]]
    keys = [ev["key"] for ev in extcache.events]
    assert len(set(keys)) == 4 and keys[0] == keys[1] == keys[4]


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
    memo = extcache.build_memo_key("0" * 64, {})
    extcache.memo_store(cache, memo, [{"name": "ext", "key": key, "ok": True}])
    assert extcache.memo_lookup(cache, memo) == [{"name": "ext", "key": key}]
    (folder / "ext.so").unlink()
    assert extcache.memo_lookup(cache, memo) is None


@pytest.mark.parametrize("event", [
    {"name": "ext", "key": "ab" * 16, "ok": False},
    {"name": "../ext", "key": "ab" * 16, "ok": True},
    {"name": "ext", "key": "../../x", "ok": True},
])
def test_a_build_with_a_failed_or_odd_extension_is_not_remembered(tmp_path, event):
    memo = extcache.build_memo_key("1" * 64, {})
    extcache.memo_store(tmp_path, memo, [event])
    assert not (tmp_path / "builds").exists() or not any((tmp_path / "builds").iterdir())


def test_memo_key_follows_the_build_environment():
    a = extcache.build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert a == extcache.build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0", "UNRELATED": "x"})
    assert a != extcache.build_memo_key("2" * 64, {"TORCH_CUDA_ARCH_LIST": "8.0"})
    assert a != extcache.build_memo_key("3" * 64, {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert build.BuildResult("built").memo is False


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
    assert extcache.adopt_staged(root, staging, events) == ["ext"]
    assert extcache.extension_ready(root, "ext", good)
    assert (root / good[:2] / good / "ext.so").read_bytes() == b"lib"
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["ext.so", "meta.json"]
