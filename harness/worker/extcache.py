"""A build cache for torch.utils.cpp_extension in build and evaluation workers (layout, keys: cachekeys): a
hit imports the library with no compiler or ninja; a miss builds under a file lock and keeps only the library.
torch's own precompiled header is left alone (candidates could delete or rebuild it mid-run); with KBH_PCH=1
a miss uses the cache's own (ensure_pch) once complete, which does not change the binary, so is not keyed."""

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
from ..settings import CLEAR_STALE_LOCK_ENV

IGNORED_ARGS = ("build_directory", "verbose", "keep_intermediates", "use_pch")

events: list[dict] = []
_roots: dict = {"cache": None, "staging": None}
_torch_pch = None  # torch's header builder, kept when install() disables it for candidates


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
    """A load_inline or load call's key: env_key and the arguments that change the binary (for `load`, the
    source files' contents too)."""
    material = {k: v for k, v in arguments.items() if k not in IGNORED_ARGS}
    if fn_name == "load":
        srcs = arguments["sources"] if isinstance(arguments["sources"], list) else [arguments["sources"]]
        material["source_digests"] = digests = []
        for src in srcs:
            try:
                digests.append(hashlib.sha256(Path(src).read_bytes()).hexdigest())
            except OSError:
                digests.append("missing")
    return digest([CACHE_VERSION, fn_name, material, env_key])[:32]


def _cached(orig, fn_name: str, env_key: dict):
    sig = inspect.signature(orig)

    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        name, key = a["name"], call_key(fn_name, a, env_key)
        cache_dir = _roots["cache"]
        if _roots["staging"] is not None and not extension_ready(cache_dir, name, key):
            cache_dir = _roots["staging"]  # --isolate: the cache is read-only, so misses build in staging
        folder = ext_folder(cache_dir, key)
        t0 = time.perf_counter()
        if not extension_ready(cache_dir, name, key):
            folder.mkdir(parents=True, exist_ok=True)
            with _locked(folder.parent / f"{key}.lock"):
                if not extension_ready(cache_dir, name, key):
                    if os.environ.get(CLEAR_STALE_LOCK_ENV) == "1":  # ours is held: torch's lock is a dead build's
                        (folder / "lock").unlink(missing_ok=True)
                    a.update(build_directory=str(folder), verbose=False)
                    if "use_pch" in a:
                        a["use_pch"] = False
                    header = ready_pch(cache_dir) if os.environ.get("KBH_PCH") == "1" else None
                    event = {"name": name, "key": key, "cached": False, "ok": True, "pch": bool(header)}
                    try:
                        with _on_cpath(header) if header else contextlib.nullcontext():
                            result = orig(**a)
                    except BaseException as e:
                        events.append(event | {"ok": False, "seconds": time.perf_counter() - t0,
                                               "message": str(e)})
                        raise
                    for obj in folder.glob("*.o"):
                        obj.unlink()
                    tmp = folder / "meta.json.tmp"
                    tmp.write_text(json.dumps({"name": name, "function": fn_name,
                                               "seconds": time.perf_counter() - t0}))
                    tmp.replace(folder / "meta.json")
                    events.append(event | {"seconds": time.perf_counter() - t0})
                    return result
        result = _import(name, folder / f"{name}.so", a["is_python_module"])
        events.append({"name": name, "key": key, "cached": True, "ok": True,
                       "seconds": time.perf_counter() - t0})
        return result

    wrapper.__wrapped__ = orig
    wrapper._kbh_cached = True
    return wrapper


def install(cache_dir: str | Path) -> None:
    """Wrap load_inline and load (once) to build into and import from cache_dir; with $KBH_STAGING
    (--isolate), misses build into that folder instead, the cache being read-only to this process."""
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
    """torch's command for torch/extension.h's precompiled header (flags paired with those of its main.cpp
    compiles), or None where torch builds none (not Linux, not gcc). Captured, not run: torch would write the
    header into its install. It patches subprocess and os.path meanwhile, so only processes doing nothing else
    call it: the header's own (`--pch`) and a build about to compile."""
    import subprocess

    import torch.utils.cpp_extension as ce

    class _Captured(Exception):
        pass

    def capture(cmd, *args, **kwargs):
        if "c++-header" in (cmd if isinstance(cmd, str) else " ".join(map(str, cmd))):
            raise _Captured(cmd)
        return real_check(cmd, *args, **kwargs)

    real_check, real_isfile = subprocess.check_output, os.path.isfile
    subprocess.check_output = capture
    os.path.isfile = lambda p: False if str(p).endswith((".gch", ".sign")) else real_isfile(p)
    try:
        (_torch_pch or ce._check_and_build_extension_h_precompiler_headers)(None, None)
        return None
    except _Captured as e:
        cmd = e.args[0]
    finally:
        subprocess.check_output, os.path.isfile = real_check, real_isfile
    args = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    return args if "-o" in args[:-1] else None


def pch_folder(cache_dir: Path, args: list[str], toolchain: str) -> Path:
    """The header's folder for this command (its output aside) and compiler."""
    i = args.index("-o")
    return Path(cache_dir) / "pch" / digest([CACHE_VERSION, args[:i] + args[i + 2:], toolchain])[:24]


SHIM = "#include_next <torch/extension.h>\n"
"""Text beside the .gch: gcc uses a precompiled header for the first include only, and any later or
mismatched include of torch/extension.h (a candidate's own, an nvcc compile) then reads the header's folder
for the text; the shim hands it on to torch's own header."""


def ready_pch(cache_dir: Path) -> Path | None:
    """The cache's header for this torch and compiler if complete (it appears by rename) with only its shim: on
    CPATH, its folder precedes torch's, so any other header in it (ATen/, torch/...) would replace theirs."""
    try:
        args = pch_command()
        if args is None:
            return None
        folder = pch_folder(cache_dir, args, os.environ.get("KBH_TOOLCHAIN", ""))
        top, inner = set(os.listdir(folder)), os.listdir(folder / "torch")
    except Exception:
        return None
    only_header = top <= {"torch", "meta.json", "build.lock"} and all(
        n in ("extension.h.gch", "extension.h") or fnmatch.fnmatchcase(n, partial_header("*")) for n in inner)
    try:
        shim_ok = (folder / "torch" / "extension.h").read_text() == SHIM
    except OSError:
        return None
    return folder if only_header and shim_ok and (folder / "torch" / "extension.h.gch").is_file() else None


@contextlib.contextmanager
def _on_cpath(folder: Path):
    """gcc searches CPATH like -I, before torch's -isystem folder: main.cpp's `#include <torch/extension.h>`
    finds the .gch there. A header built with other flags is skipped by gcc, which then reads the text."""
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
    """Build the precompiled header into the cache unless it is there: the folder for CPATH, or None."""
    import subprocess

    args = pch_command()
    if args is None:
        return None
    folder = pch_folder(cache_dir, args, toolchain)
    target = folder / "torch" / "extension.h.gch"
    if target.is_file() and target.with_name("extension.h").is_file():
        return folder
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder / "build.lock"):
        shim = target.with_name("extension.h")
        if not shim.is_file():
            tmp = shim.with_name(partial_header(os.getpid()))
            tmp.write_text(SHIM)
            tmp.replace(shim)
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
