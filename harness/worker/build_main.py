"""A build: `python -m harness.worker.build_main CANDIDATE RESULT CACHE` (or a fork) imports the candidate
with the build cache installed and no GPU visible; the judge enforces the time limit and reads RESULT."""

import hashlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

ERROR_LINE = re.compile(r"(error|undefined reference|undefined symbol)", re.IGNORECASE)


def import_candidate(path: str):
    """Import a candidate file as a fresh module (its folder on sys.path for sibling helpers)."""
    name = "kbh_candidate_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.append(str(Path(path).parent))
    spec.loader.exec_module(module)
    return module


def import_on_this_gpu(path: str, cache_dir) -> object:
    """Import a candidate into this GPU process with the keys a lane's worker uses (this device's arch, this
    toolchain) and the build cache installed: for tests and benches that call a kernel directly."""
    import torch

    from ..cachekeys import toolchain_id
    from . import extcache

    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    os.environ["KBH_TOOLCHAIN"] = toolchain_id("cuda")
    extcache.install(cache_dir)
    return import_candidate(path)


def first_error_lines(text: str, limit: int = 6) -> str:
    """The compiler's first error lines, with build folders cut from paths."""
    lines = [re.sub(r"\S*/(\w+\.(cu|cpp|h|cuh|so))", r"\1", ln.strip()) for ln in text.splitlines()
             if ERROR_LINE.search(ln) and "Error building extension" not in ln]
    lines = lines or [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[:limit])


def main(candidate: str, result_path: str, cache: str, sandbox_spec: str = "null") -> int:
    """sandbox_spec: JSON of `harness.sandbox.restrict`'s arguments, applied before the candidate is imported."""
    from .. import sandbox
    from . import extcache

    t0 = time.perf_counter()
    extcache.install(cache)
    result: dict = {"status": "built", "message": ""}
    try:
        spec = json.loads(sandbox_spec)
        if spec:
            sandbox.restrict(**spec)
        module = import_candidate(candidate)
        if not hasattr(module, "ModelNew"):
            result = {"status": "no_modelnew", "message": "candidate defines no ModelNew"}
    except BaseException as e:
        traceback.print_exc()
        failed = [ev for ev in extcache.events if not ev["ok"]]
        if failed:
            result = {"status": "compile_error", "message": first_error_lines(failed[-1]["message"])}
        else:
            result = {"status": "import_error", "message": f"{type(e).__name__}: {e}"[:2000]}
    result["events"] = [{k: v for k, v in ev.items() if k != "message"} for ev in extcache.events]
    result["seconds"] = time.perf_counter() - t0
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
