"""Builds for a cluster's lanes: a Ray task builds a candidate into its node's cache and packs the build; a lane
whose node lacks it unpacks it into its own cache under the same key (same content and environment, same
binary)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import tarfile
import tempfile
from pathlib import Path

from ..cachekeys import build_memo_key, ext_folder
from .builds import build_env, run_build, snapshot_candidate
from .forkserver import worker_env
from .plan import Plan

CACHE_FALLBACK = Path.home() / ".cache" / "kbh"
REPO = Path(__file__).resolve().parents[2]


def node_cache(wanted: Path) -> Path:
    """The plan's build cache where this node can write it (a shared path, or one host), else ~/.cache/kbh."""
    for d in (wanted, CACHE_FALLBACK):
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise RuntimeError(f"no writable build cache on {socket.gethostname()}")


def pack_build(cache_dir: Path, memo_key: str) -> bytes | None:
    """The cache's record of a whole build and the extensions it names, as a tar archive (None: no record)."""
    memo = cache_dir / "builds" / f"{memo_key}.json"
    try:
        exts = json.loads(memo.read_text())["extensions"]
    except (OSError, ValueError, KeyError):
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for e in exts:
            folder = ext_folder(cache_dir, e["key"])
            tar.add(folder, arcname=str(folder.relative_to(cache_dir)))
        tar.add(memo, arcname=f"builds/{memo_key}.json")  # last: a reader sees the record only once all is there
    return buf.getvalue()


def unpack_build(cache_dir: Path, blob: bytes | None) -> None:
    """A packed build into this node's cache, where its record is not there yet (same key, same binary)."""
    if not blob:
        return
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        names = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        memo = next((m.name for m in names if m.name.startswith("builds/")), None)
        if memo is None or (cache_dir / memo).exists():
            return
        tar.extractall(cache_dir, members=names, filter="data")


def build_task(plan: Plan, name: str, source: str, arch: str | None, toolchain: str) -> tuple[str, bytes | None]:
    """A Ray task: the candidate built into this node's cache (no candidate code runs in this process: the
    build is a process of its own), then packed. Returns (status, packed build or None)."""
    cache_dir = node_cache(plan.cache_dir)
    with tempfile.TemporaryDirectory(prefix="kbh-build-") as tmp:
        path = Path(tmp) / "src" / f"{name.replace('/', '_')}.py"
        path.parent.mkdir()
        path.write_text(source)
        cand = snapshot_candidate(path, name, Path(tmp) / "copy")
        (Path(tmp) / "tmp").mkdir()
        env = build_env(arch, toolchain, Path(tmp))
        result = run_build(cand, repo_root=REPO, cache_dir=cache_dir, env=env, timeout_s=plan.config.build.timeout_s,
                           log_path=Path(tmp) / "build.log", scratch=Path(tmp), cores=None)
        return result.status, pack_build(cache_dir, source_memo_key(source, env)) if result.status == "built" else None


def source_memo_key(source: str, env: dict[str, str]) -> str:
    """The key builds.run_build files a build of `source` under, with env."""
    return build_memo_key(hashlib.sha256(source.encode()).hexdigest(), worker_env(REPO, env))
