"""Problem files in KernelBench's format: `Model`, `get_inputs(**shape)`, `get_init_inputs()`. The judge
ships the text it read once to workers, so a candidate that rewrites the file cannot change the reference."""

import contextlib
import functools
import inspect
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError, read_text
from .settings import Shape

PRECISION_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class ProblemSource:
    name: str
    path: str
    text: str


def level_of(path: str | Path) -> str | None:
    """The KernelBench level a problem's path names (a folder level1, level_2, ...), else None."""
    hits = [m.group(1) for part in Path(path).parts if (m := re.fullmatch(r"level[_-]?(\d+)", part, re.I))]
    return hits[-1] if hits else None


def read_problem(path: Path) -> ProblemSource:
    return ProblemSource(name=path.stem, path=str(path), text=read_text(path, "Python problem file"))


def load_namespace(src: ProblemSource) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"kbh_problem_{src.name}", "__file__": src.path}
    exec(compile(src.text, src.path, "exec"), ns)
    return ns


def validate(src: ProblemSource, shapes: tuple[Shape, ...]) -> None:
    """Fail with one line if the problem cannot be run with these shapes."""
    try:
        ns = load_namespace(src)
    except Exception as e:
        raise UsageError(f"{src.path}: problem file failed to load: {type(e).__name__}: {e}") from None
    if not inspect.isclass(ns.get("Model")):
        raise UsageError(f"{src.path}: problem file defines no class Model")
    gi = ns.get("get_inputs")
    if not callable(gi):
        raise UsageError(f"{src.path}: problem file defines no get_inputs()")
    params = inspect.signature(gi).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for shape in shapes:
        if "device" in shape.params and "device" in params:
            raise UsageError(f"shapes.{shape.name}.device: get_inputs() in {src.path} is given `device` by "
                             "the harness; a shape cannot set it")
        for key in shape.params:
            if not takes_any and key not in params:
                raise UsageError(f"shapes.{shape.name}.{key}: get_inputs() in {src.path} takes no argument "
                                 f"'{key}' (it takes: {', '.join(params) or 'none'})")


_SEEDERS: tuple | None = None


def _seeders() -> tuple:
    import numpy as np
    import torch

    return random.seed, np.random.seed, torch.default_generator.manual_seed, torch.cuda.manual_seed_all


def bind_seeders() -> None:
    """Bind the seeding functions now, before any candidate is imported (a strict-sandbox worker's init): a
    candidate that replaces `random.seed` later is not called by a draw (and the worker's watch reports it)."""
    global _SEEDERS
    _SEEDERS = _seeders()


def seed_everything(seed: int, device: str = "cpu") -> None:
    """What `torch.manual_seed` seeds here (Python, numpy, torch's CPU and CUDA generators), without its other
    backends' hops: 138 us a call on the CPU machine, where a timed call draws its inputs every call."""
    py, np_seed, torch_seed, cuda_seed = _SEEDERS or _seeders()
    py(seed)
    np_seed(seed % 2**32)
    torch_seed(seed)
    if device.startswith("cuda"):
        cuda_seed(seed)


def to_device(x: Any, device: str) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


@functools.lru_cache(maxsize=64)
def takes_device(fn: Any) -> bool:
    """Whether get_inputs places its tensors itself: it takes a `device` argument."""
    try:
        return "device" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class DrawNotRepeatable(RuntimeError):
    """get_inputs called an op that has no deterministic implementation on this device."""


@contextlib.contextmanager
def deterministic_draw(fill_uninitialized: bool, warn_only: bool = False):
    """torch's deterministic mode around a draw (the caller's restored after): judge and candidate draw each
    seed apart and compare fingerprints; outside it, float cumsums on the H200 differed in 1 of 2,000 draws,
    inside none (bench/draws.py repeat). Filling new tensors (0.12-0.15 ms of a 0.4-0.8 ms draw on the H200,
    bench/draws.py cost) is off unless fill_uninitialized: the reference worker draws its checks both ways.
    warn_only lets an op torch only warns about run (cuBLAS, whose deterministic mode needs a workspace setting
    that changes every later GEMM's timing, so workers never get it): the reference's double draw and the
    fingerprints still prove the draw repeats."""
    import torch
    import torch.utils.deterministic as det

    was, fills = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    det.fill_uninitialized_memory = fill_uninitialized
    quiet = warnings.catch_warnings() if warn_only else contextlib.nullcontext()
    try:
        with quiet:
            if warn_only:
                warnings.simplefilter("ignore")
            yield
    except RuntimeError as e:
        if "deterministic" not in str(e):
            raise
        what = str(e).strip().splitlines()[0].split(", but you set")[0]
        raise DrawNotRepeatable(f"get_inputs is not repeatable: {what} (a draw must repeat bit for bit "
                                "on the device: README, Problems)") from None
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn_only)
        det.fill_uninitialized_memory = fills


def make_inputs(ns: dict[str, Any], params: dict[str, Any], seed: int, device: str, *,
                fill_uninitialized: bool = False, precision: str = "as_written") -> list:
    """Seed every RNG, draw one input set under `deterministic_draw`, move stragglers. A get_inputs that takes
    `device` gets it, as `torch.device(device)` puts a Python hop (about 3 us on the CPU machine) before every
    torch call of the draw; any other runs under it, so its factories default to the device."""
    import torch

    get_inputs = ns["get_inputs"]
    device_kw = {"device": device} if takes_device(get_inputs) else {}
    for warn_only in (False, True):
        seed_everything(seed, device)
        try:
            with deterministic_draw(fill_uninitialized, warn_only), \
                    contextlib.nullcontext() if device_kw else torch.device(device):
                inputs = get_inputs(**params, **device_kw)
            break
        except DrawNotRepeatable as e:
            if warn_only or "CuBLAS" not in str(e):
                raise
    dtype = getattr(torch, PRECISION_NAMES[precision]) if precision in PRECISION_NAMES else None
    return [x.to(dtype) if dtype is not None and isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in (to_device(x, device) for x in inputs)]


def build_model(cls: type, ns: dict[str, Any], seed: int, device: str, precision: str = "as_written") -> Any:
    """Build Model or ModelNew from the problem's init inputs under one seed, as KernelBench does; with a
    precision, its floating parameters and buffers are cast to it (`Module.to(dtype)`)."""
    seed_everything(seed, device)
    init = ns.get("get_init_inputs", lambda: [])()
    model = cls(*init)
    model = model.to(device) if hasattr(model, "to") else model
    dtype = PRECISION_NAMES.get(precision)
    return model.to(getattr(__import__("torch"), dtype)) if dtype is not None and hasattr(model, "to") else model
