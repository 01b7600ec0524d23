"""The build cache's layout and keys, shared by the judge (which looks builds up) and the workers (which build
into it and import from it). An extension lives in `<cache>/<key[:2]>/<key>/` as `<name>.so`, with a
`meta.json` written once the build has returned; a key covers a call's arguments and environment_key."""

import contextlib
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

CACHE_VERSION = "1"
KEY_ENV = ("TORCH_CUDA_ARCH_LIST", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_APPEND_FLAGS",
           "NVCC_PREPEND_FLAGS", "CUDA_HOME", "KBH_TOOLCHAIN")
EXT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
EXT_KEY = re.compile(r"[0-9a-f]{32}")


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def environment_key(environ=None) -> dict:
    """Everything besides a call's arguments that changes the binary; environ: the build process's
    environment (default: this process's), so the judge can key a build it has not started."""
    import torch

    environ = os.environ if environ is None else environ
    return {"torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", ""),
            "cuda": torch.version.cuda, "python": sys.version, "machine": platform.machine(),
            "env": {k: environ.get(k) for k in KEY_ENV}}


def ext_folder(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / key[:2] / key


def extension_ready(cache_dir: Path, name: str, key: str) -> bool:
    """The library is complete: meta.json is written only after the build has returned."""
    folder = ext_folder(cache_dir, key)
    return (folder / "meta.json").is_file() and (folder / f"{name}.so").is_file()


def build_memo_key(source_sha256: str, environ) -> str:
    """A candidate's whole build, keyed by what the judge knows without running it (source, environment):
    arguments that depend on anything else only miss, and the worker then builds at import."""
    return digest([CACHE_VERSION, "candidate", source_sha256, environment_key(environ)])[:32]


def partial_header(pid: int | str) -> str:
    """The name process pid compiles a precompiled header under, renamed to extension.h.gch once complete."""
    return f"tmp-{pid}.gch"


def toolchain_id(device: str) -> str:
    """Compiler versions (KBH_TOOLCHAIN, part of every key): c++ and, for CUDA runs, nvcc."""
    parts = []
    for cmd in [["c++", "--version"], ["nvcc", "--version"]][:2 if device == "cuda" else 1]:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired, IndexError):  # OSError: not installed
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
            parts.append(out[0] if cmd[0] == "c++" else out[-1])
    return " | ".join(parts)
