"""A build cache for torch.utils.cpp_extension, installed in build and evaluation workers.

Each `load_inline`/`load` call is keyed by its arguments (sources, flags, names) and by everything
else that changes the binary (torch, CUDA and Python versions, target architectures, compilers,
flag variables). A hit imports the cached shared library directly, with no compiler and no ninja; a
miss builds into the key's folder under a file lock, keeps the library and drops the object files.
The global precompiled header is left alone: candidates cannot delete or rebuild it mid-run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import sys
import time
from pathlib import Path

CACHE_VERSION = "1"
KEY_ENV = ("TORCH_CUDA_ARCH_LIST", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_APPEND_FLAGS",
           "NVCC_PREPEND_FLAGS", "CUDA_HOME", "KBH_TOOLCHAIN")
IGNORED_ARGS = ("build_directory", "verbose", "keep_intermediates", "use_pch")

events: list[dict] = []


def environment_key() -> dict:
    import torch

    return {
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", ""),
        "cuda": torch.version.cuda,
        "python": sys.version,
        "machine": platform.machine(),
        "env": {k: os.environ.get(k) for k in KEY_ENV},
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


def _cached(orig, fn_name: str, cache_dir: Path, env_key: dict):
    sig = inspect.signature(orig)

    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        material = {k: v for k, v in a.items() if k not in IGNORED_ARGS}
        if fn_name == "load":
            srcs = a["sources"] if isinstance(a["sources"], list) else [a["sources"]]
            material["source_digests"] = [_file_digest(s) for s in srcs]
        key = _digest([CACHE_VERSION, fn_name, material, env_key])[:32]
        folder = cache_dir / key[:2] / key
        name = a["name"]
        lib = folder / f"{name}.so"
        meta = folder / "meta.json"
        t0 = time.perf_counter()
        if not (meta.is_file() and lib.is_file()):
            folder.mkdir(parents=True, exist_ok=True)
            with _locked(folder.parent / f"{key}.lock"):
                if not (meta.is_file() and lib.is_file()):
                    a["build_directory"] = str(folder)
                    a["verbose"] = False
                    if "use_pch" in a:
                        a["use_pch"] = False
                    try:
                        result = orig(**a)
                    except BaseException as e:
                        events.append({"name": name, "key": key, "cached": False, "ok": False,
                                       "seconds": time.perf_counter() - t0, "message": str(e)})
                        raise
                    for obj in folder.glob("*.o"):
                        obj.unlink()
                    tmp = folder / "meta.json.tmp"
                    tmp.write_text(json.dumps({"name": name, "function": fn_name,
                                               "seconds": time.perf_counter() - t0}))
                    tmp.replace(meta)
                    events.append({"name": name, "key": key, "cached": False, "ok": True,
                                   "seconds": time.perf_counter() - t0})
                    return result
        result = _import(name, lib, a["is_python_module"])
        events.append({"name": name, "key": key, "cached": True, "ok": True,
                       "seconds": time.perf_counter() - t0})
        return result

    wrapper.__wrapped__ = orig
    return wrapper


def install(cache_dir: str | Path) -> None:
    import torch.utils.cpp_extension as ce

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    env_key = environment_key()
    ce.remove_extension_h_precompiler_headers = lambda: None
    ce._check_and_build_extension_h_precompiler_headers = lambda *a, **k: None
    ce.load_inline = _cached(ce.load_inline, "load_inline", cache_dir, env_key)
    ce.load = _cached(ce.load, "load", cache_dir, env_key)


def build_pch() -> None:
    """Build torch/extension.h's precompiled header if it is missing or stale (C++-only builds use it)."""
    import torch.utils.cpp_extension as ce

    ce._check_and_build_extension_h_precompiler_headers(None, None)


if __name__ == "__main__":
    if sys.argv[1:] == ["--pch"]:
        build_pch()
