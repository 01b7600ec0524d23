"""A build cache for torch.utils.cpp_extension, installed in build and evaluation workers.

Each `load_inline`/`load` call is keyed by its arguments (sources, flags, names) and by everything
else that changes the binary (torch, CUDA and Python versions, target architectures, compilers,
flag variables). A hit imports the cached shared library directly, with no compiler and no ninja; a
miss builds into the key's folder under a file lock, keeps the library and drops the object files.
torch's own precompiled header (in its install) is left alone: candidates cannot delete or rebuild it mid-run.
The harness keeps its own in the cache (`ensure_pch`, made by the judge with torch's command): with
KBH_PCH=1 a miss compiles with it on CPATH once it is complete. It does not change the binary, so it is
not part of the key.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .isolation import open_regular

CACHE_VERSION = "1"
KEY_ENV = ("TORCH_CUDA_ARCH_LIST", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_APPEND_FLAGS",
           "NVCC_PREPEND_FLAGS", "CUDA_HOME", "KBH_TOOLCHAIN")
IGNORED_ARGS = ("build_directory", "verbose", "keep_intermediates", "use_pch")

events: list[dict] = []
_roots: dict = {"cache": None, "staging": None}
_torch_pch = None  # torch's header builder, kept when install() disables it for candidates


def environment_key(environ=None) -> dict:
    """Everything besides a call's arguments that changes the binary; environ: the build process's environment
    (default: this process's), so the judge can key a build it has not started."""
    import torch

    environ = os.environ if environ is None else environ
    return {
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", ""),
        "cuda": torch.version.cuda,
        "python": sys.version,
        "machine": platform.machine(),
        "env": {k: environ.get(k) for k in KEY_ENV},
    }


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _import(name: str, so: Path, is_python_module: bool):
    if not is_python_module:
        import torch

        torch.ops.load_library(str(so))
        return str(so)
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ext_folder(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / key[:2] / key


def extension_ready(cache_dir: Path, name: str, key: str) -> bool:
    """The library is complete: meta.json is written only after the build has returned."""
    folder = _ext_folder(cache_dir, key)
    return (folder / "meta.json").is_file() and (folder / f"{name}.so").is_file()


def _cached(orig, fn_name: str, env_key: dict):
    sig = inspect.signature(orig)

    def wrapper(*args, **kwargs):
        cache_dir, staging = _roots["cache"], _roots["staging"]
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        material = {k: v for k, v in a.items() if k not in IGNORED_ARGS}
        if fn_name == "load":
            srcs = a["sources"] if isinstance(a["sources"], list) else [a["sources"]]
            material["source_digests"] = [_file_digest(s) for s in srcs]
        key = _digest([CACHE_VERSION, fn_name, material, env_key])[:32]
        name = a["name"]
        ready = extension_ready(cache_dir, name, key)
        if staging is not None and not ready:
            cache_dir = staging  # --isolate: the cache is read-only here; misses build in the worker's own folder
            ready = extension_ready(cache_dir, name, key)
        folder = _ext_folder(cache_dir, key)
        lib = folder / f"{name}.so"
        meta = folder / "meta.json"
        t0 = time.perf_counter()
        if not ready:
            folder.mkdir(parents=True, exist_ok=True)
            with _locked(folder.parent / f"{key}.lock"):
                if not extension_ready(cache_dir, name, key):
                    a["build_directory"] = str(folder)
                    a["verbose"] = False
                    if "use_pch" in a:
                        a["use_pch"] = False
                    header = ready_pch(cache_dir) if os.environ.get("KBH_PCH") == "1" else None
                    try:
                        with _on_cpath(header):
                            result = orig(**a)
                    except BaseException as e:
                        events.append({"name": name, "key": key, "cached": False, "ok": False, "pch": bool(header),
                                       "seconds": time.perf_counter() - t0, "message": str(e)})
                        raise
                    for obj in folder.glob("*.o"):
                        obj.unlink()
                    tmp = folder / "meta.json.tmp"
                    tmp.write_text(json.dumps({"name": name, "function": fn_name,
                                               "seconds": time.perf_counter() - t0}))
                    tmp.replace(meta)
                    events.append({"name": name, "key": key, "cached": False, "ok": True, "pch": bool(header),
                                   "seconds": time.perf_counter() - t0})
                    return result
        result = _import(name, lib, a["is_python_module"])
        events.append({"name": name, "key": key, "cached": True, "ok": True,
                       "seconds": time.perf_counter() - t0})
        return result

    wrapper.__wrapped__ = orig
    wrapper._kbh_cached = True
    return wrapper


def build_memo_key(source_sha256: str, environ) -> str:
    """A candidate's whole build, keyed by its source and the build process's environment: what the judge can
    know without running it. A candidate whose extension's arguments depend on anything else (a file, the
    clock) only misses: its worker then builds at import, and the verdict is the same."""
    return _digest([CACHE_VERSION, "candidate", source_sha256, environment_key(environ)])[:32]


def _memo_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "builds" / f"{key}.json"


def memo_lookup(cache_dir: Path, key: str) -> list[dict] | None:
    """The extensions an earlier build of the same candidate made, if every one is still in the cache: the
    candidate goes straight to checking, with no build process (no interpreter, no torch import)."""
    try:
        exts = json.loads(_memo_path(cache_dir, key).read_text())["extensions"]
        if all(extension_ready(cache_dir, e["name"], e["key"]) for e in exts):
            return exts
    except (OSError, ValueError, KeyError, TypeError):
        pass
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


def install(cache_dir: str | Path) -> None:
    """Wrap load_inline and load (once) to build into and import from cache_dir; with $KBH_STAGING (--isolate),
    misses build into that folder instead, the cache being read-only to this process."""
    import torch.utils.cpp_extension as ce

    global _torch_pch
    set_root(cache_dir)
    if _roots["staging"] is None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    if getattr(ce.load_inline, "_kbh_cached", False):
        return
    env_key = environment_key()
    _torch_pch = _torch_pch or ce._check_and_build_extension_h_precompiler_headers
    ce.remove_extension_h_precompiler_headers = lambda: None
    ce._check_and_build_extension_h_precompiler_headers = lambda *a, **k: None
    ce.load_inline = _cached(ce.load_inline, "load_inline", env_key)
    ce.load = _cached(ce.load, "load", env_key)


def set_root(cache_dir: str | Path) -> None:
    """Where extensions are looked up (and, without staging, built): an evaluation worker under --isolate gets
    its candidate's own folder of the cache with the candidate, after its start."""
    staging = os.environ.get("KBH_STAGING")
    _roots.update(cache=Path(cache_dir), staging=Path(staging) if staging else None)


EXT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
EXT_KEY = re.compile(r"[0-9a-f]{32}")


def _read_plain(path: Path, inside: str) -> bytes | None:
    """A regular file's bytes, opened without following a link, from a folder another user controls."""
    if not os.path.realpath(path.parent).startswith(inside + os.sep):
        return None
    try:
        with open_regular(path) as f:
            return f.read()
    except (OSError, ValueError):
        return None


def adopt_staged(cache_dir: Path, staging: Path, build_events: list[dict]) -> list[str]:
    """--isolate, in the judge: copy each extension a build compiled into its own staging folder into cache_dir
    (the candidate's own folder of the cache), as the judge's files. The events come from the build process,
    so a lie there can only place a library in that candidate's own folder."""
    adopted = []
    inside = os.path.realpath(staging)
    for ev in build_events:
        name, key = str(ev.get("name")), str(ev.get("key"))
        if not ev.get("ok") or ev.get("cached") or not EXT_NAME.fullmatch(name) or not EXT_KEY.fullmatch(key):
            continue
        if extension_ready(cache_dir, name, key):
            continue
        src = _ext_folder(staging, key)
        blobs = {f: _read_plain(src / f, inside) for f in (f"{name}.so", "meta.json")}
        if any(b is None for b in blobs.values()):
            continue
        dst = _ext_folder(cache_dir, key)
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


def pch_command() -> list[str] | None:
    """torch's own command for torch/extension.h's precompiled header, the flags it pairs with the flags its
    builds compile main.cpp with, or None where torch builds none (not Linux, not gcc). Captured, not run:
    torch would write the header into its install. It patches subprocess and os.path for the moment it runs,
    so it is called only in processes doing nothing else meanwhile: the header's own (`python -m
    harness.extcache --pch CACHE TOOLCHAIN`) and a build worker about to compile."""
    import subprocess

    import torch.utils.cpp_extension as ce

    seen: list[str] = []

    class _Captured(Exception):
        pass

    def capture(cmd, *args, **kwargs):
        if "c++-header" not in (cmd if isinstance(cmd, str) else " ".join(map(str, cmd))):
            return real_check(cmd, *args, **kwargs)
        seen.append(cmd)
        raise _Captured

    real_check, real_isfile = subprocess.check_output, os.path.isfile
    subprocess.check_output = capture
    os.path.isfile = lambda p: False if str(p).endswith((".gch", ".sign")) else real_isfile(p)
    try:
        (_torch_pch or ce._check_and_build_extension_h_precompiler_headers)(None, None)
    except _Captured:
        pass
    finally:
        subprocess.check_output, os.path.isfile = real_check, real_isfile
    if not seen:
        return None
    args = shlex.split(seen[0]) if isinstance(seen[0], str) else list(seen[0])
    return args if "-o" in args[:-1] else None


def pch_folder(cache_dir: Path, args: list[str], toolchain: str) -> Path:
    """Where the header for this command and compiler lives: put on CPATH, gcc finds
    torch/extension.h.gch there before torch's own include folder (-isystem)."""
    i = args.index("-o")
    return Path(cache_dir) / "pch" / _digest([CACHE_VERSION, args[:i] + args[i + 2:], toolchain])[:24]


def _header_file(folder: Path) -> Path:
    return folder / "torch" / "extension.h.gch"


def ready_pch(cache_dir: Path) -> Path | None:
    """The cache's precompiled header for this torch and compiler, if it is complete (it appears by rename)."""
    try:
        args = pch_command()
    except Exception:
        return None
    if args is None:
        return None
    folder = pch_folder(cache_dir, args, os.environ.get("KBH_TOOLCHAIN", ""))
    return folder if _header_file(folder).is_file() and _only_the_header(folder) else None


def _only_the_header(folder: Path) -> bool:
    """The folder goes on CPATH ahead of torch's headers, so any other header in it (a torch/extension.h, an
    ATen/ folder) would replace torch's in every later build: such a folder is not used."""
    try:
        top = set(os.listdir(folder))
        inner = os.listdir(folder / "torch")
    except OSError:
        return False
    return top <= {"torch", "meta.json", "build.lock"} and all(
        n == _header_file(folder).name or fnmatch.fnmatchcase(n, partial_header("*")) for n in inner)


def partial_header(pid: int | str) -> str:
    """The name a header is compiled under by process pid, renamed to extension.h.gch once complete."""
    return f"tmp-{pid}.gch"


@contextlib.contextmanager
def _on_cpath(folder: Path | None):
    """gcc searches CPATH like -I, so before torch's -isystem folder: main.cpp's `#include <torch/extension.h>`
    finds the .gch there. A header built with other flags is skipped by gcc, which then reads the text."""
    if folder is None:
        yield
        return
    before = os.environ.get("CPATH")
    os.environ["CPATH"] = os.pathsep.join(filter(None, [str(folder), before]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CPATH", None)
        else:
            os.environ["CPATH"] = before


def ensure_pch(cache_dir: Path, toolchain: str) -> Path | None:
    """Build the precompiled header into the cache unless it is there; the folder to put on CPATH, or None."""
    import subprocess

    args = pch_command()
    if args is None:
        return None
    folder = pch_folder(cache_dir, args, toolchain)
    target = _header_file(folder)
    if target.is_file():
        return folder
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder / "build.lock"):
        if not target.is_file():
            tmp = target.with_name(partial_header(os.getpid()))
            i = args.index("-o")
            t0 = time.perf_counter()
            try:
                subprocess.run(args[:i + 1] + [str(tmp)] + args[i + 2:], check=True)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(target)
            (folder / "meta.json").write_text(json.dumps({"command": args, "toolchain": toolchain,
                                                          "seconds": time.perf_counter() - t0}))
    return folder


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--pch":
        found = ensure_pch(Path(sys.argv[2]), sys.argv[3])
        print(f"PCH {found or ''}")
