"""A build cache for torch.utils.cpp_extension, installed in build and evaluation workers (layout and keys:
harness.cachekeys).

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
import shlex
import sys
import time
from pathlib import Path

from ..cachekeys import CACHE_VERSION, digest, environment_key, ext_folder, extension_ready, partial_header

IGNORED_ARGS = ("build_directory", "verbose", "keep_intermediates", "use_pch")

events: list[dict] = []
_roots: dict = {"cache": None, "staging": None}
_torch_pch = None  # torch's header builder, kept when install() disables it for candidates


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


def call_key(fn_name: str, arguments: dict, env_key: dict) -> str:
    """A load_inline or load call's key: its arguments (those that change the binary; for `load`, the source files'
    contents too) and env_key (cachekeys.environment_key)."""
    material = {k: v for k, v in arguments.items() if k not in IGNORED_ARGS}
    if fn_name == "load":
        srcs = arguments["sources"] if isinstance(arguments["sources"], list) else [arguments["sources"]]
        material["source_digests"] = [_file_digest(s) for s in srcs]
    return digest([CACHE_VERSION, fn_name, material, env_key])[:32]


def _cached(orig, fn_name: str, env_key: dict):
    sig = inspect.signature(orig)

    def wrapper(*args, **kwargs):
        cache_dir, staging = _roots["cache"], _roots["staging"]
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        key = call_key(fn_name, a, env_key)
        name = a["name"]
        ready = extension_ready(cache_dir, name, key)
        if staging is not None and not ready:
            cache_dir = staging  # --isolate: the cache is read-only here; misses build in the worker's own folder
            ready = extension_ready(cache_dir, name, key)
        folder = ext_folder(cache_dir, key)
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
    return Path(cache_dir) / "pch" / digest([CACHE_VERSION, args[:i] + args[i + 2:], toolchain])[:24]


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
