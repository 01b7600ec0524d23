"""The judge's side of the build cache (layout, keys: harness.cachekeys): its record of whole builds, which
lets an unchanged candidate skip its build process, and under --isolate adopting what a build staged."""

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..cachekeys import EXT_KEY, EXT_NAME, ext_folder, extension_ready
from .isolation import open_regular


def _memo_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "builds" / f"{key}.json"


def memo_lookup(cache_dir: Path, key: str) -> list[dict] | None:
    """The extensions an earlier build of the same candidate made, if every one is still in the cache: the
    candidate goes straight to checking, with no build process (no interpreter, no torch import)."""
    try:
        exts = json.loads(_memo_path(cache_dir, key).read_text())["extensions"]
        return exts if all(extension_ready(cache_dir, e["name"], e["key"]) for e in exts) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def memo_store(cache_dir: Path, key: str, build_events: list[dict]) -> None:
    """Remember a build whose every extension call succeeded (written by the judge, after the build)."""
    exts = [{"name": str(ev.get("name")), "key": str(ev.get("key"))} for ev in build_events]
    if not all(ev.get("ok") for ev in build_events) or not all(
            EXT_KEY.fullmatch(e["key"]) and re.fullmatch(r"[\w.-]+", e["name"]) for e in exts):
        return
    path = _memo_path(cache_dir, key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"extensions": exts}))
        tmp.replace(path)


def _read_plain(path: Path, inside: str) -> bytes | None:
    """A regular file's bytes, opened without following a link, from a folder another user controls."""
    with contextlib.suppress(OSError, ValueError):
        if os.path.realpath(path.parent).startswith(inside + os.sep):
            with open_regular(path) as f:
                return f.read()
    return None


def adopt_staged(cache_dir: Path, staging: Path, build_events: list[dict]) -> list[str]:
    """--isolate, in the judge: copy each extension a build compiled into its staging folder into cache_dir
    (the candidate's own folder of the cache) as the judge's files. The events come from the build process,
    so a lie there can only place a library in that candidate's own folder."""
    adopted = []
    inside = os.path.realpath(staging)
    for ev in build_events:
        name, key = str(ev.get("name")), str(ev.get("key"))
        if (not ev.get("ok") or ev.get("cached") or not EXT_NAME.fullmatch(name) or not EXT_KEY.fullmatch(key)
                or extension_ready(cache_dir, name, key)):
            continue
        blobs = {f: _read_plain(ext_folder(staging, key) / f, inside) for f in (f"{name}.so", "meta.json")}
        if any(b is None for b in blobs.values()):
            continue
        dst = ext_folder(cache_dir, key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=".adopt-"))
        for f, b in blobs.items():
            (tmp / f).write_bytes(b)
            (tmp / f).chmod(0o644)
        tmp.chmod(0o755)
        try:
            tmp.rename(dst)
            adopted.append(name)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return adopted
