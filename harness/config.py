"""Load and validate a YAML run config; every error is one line naming file, key and value."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

STATIC_POLICIES = ("strict", "warn", "off")
SPEEDUP_METRICS = ("time_us", "gpu_time_us")
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Tolerance:
    atol: float = 0.0
    rtol: float = 0.0

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0


@dataclass(frozen=True)
class Shape:
    name: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class CheckSettings:
    seeds: int = 5
    tolerance: Mapping[str, Tolerance] = field(default_factory=lambda: {"default": Tolerance()})
    verify_timed: int = 16

    def tolerance_for(self, dtype: str) -> Tolerance:
        return self.tolerance.get(dtype, self.tolerance.get("default", Tolerance()))


@dataclass(frozen=True)
class TimingSettings:
    target_rse: float = 0.005
    warmup_ms: float = 25.0
    min_runs: int = 20
    max_runs: int = 2000
    budget_s: float = 2.0
    speedup_metric: str = "time_us"
    compile_reference: bool = True
    graph: bool = True
    rounds: int = 5
    speedup_quantile: float = 0.1
    phase_slack: float = 1.2
    phase_extra_rounds: int = 5
    phase_min_rounds: int = 3


@dataclass(frozen=True)
class BuildSettings:
    timeout_s: float = 600.0
    jobs: int = 0
    pch: bool = True


@dataclass(frozen=True)
class Timeouts:
    load_s: float = 600.0
    shape_s: float = 300.0


@dataclass(frozen=True)
class Config:
    path: Path
    problem: Path
    solutions: Mapping[str, tuple[Path, ...]]
    shapes: tuple[Shape, ...]
    check: CheckSettings
    timing: TimingSettings
    build: BuildSettings
    timeouts: Timeouts
    static_checks: str = "strict"
    cpu_shapes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["problem"] = str(self.problem)
        d["solutions"] = {k: [str(p) for p in v] for k, v in self.solutions.items()}
        d["shapes"] = {s.name: dict(s.params) for s in self.shapes}
        return d


class _Reader:
    """Typed access to one mapping of the YAML file, with errors that name the key."""

    def __init__(self, file: Path, data: Any, prefix: str = ""):
        self.file, self.prefix = file, prefix
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail(prefix.rstrip(".") or "(top level)", "expected a mapping", data)
        self.data = data

    def fail(self, key: str, want: str, got: Any) -> None:
        raise UsageError(f"{self.file}: {key}: {want}, got {got!r}")

    def only(self, known: tuple[str, ...]) -> None:
        for k in self.data:
            if k not in known:
                where = f"{self.prefix}{k}"
                raise UsageError(f"{self.file}: unknown key '{where}' (known: {', '.join(known)})")

    def key(self, k: str) -> str:
        return f"{self.prefix}{k}"

    def number(self, k: str, default: float, lo: float, hi: float = math.inf, lo_open: bool = False) -> float:
        v = self.data.get(k, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if ok:
            ok = (v > lo if lo_open else v >= lo) and v <= hi
        if not ok:
            bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi != math.inf else "")
            self.fail(self.key(k), f"expected a number {bound}", v)
        return float(v)

    def integer(self, k: str, default: int, lo: int) -> int:
        v = self.data.get(k, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            self.fail(self.key(k), f"expected an integer >= {lo}", v)
        return int(v)

    def boolean(self, k: str, default: bool) -> bool:
        v = self.data.get(k, default)
        if not isinstance(v, bool):
            self.fail(self.key(k), "expected true or false", v)
        return v

    def choice(self, k: str, default: str, choices: tuple[str, ...]) -> str:
        v = self.data.get(k, default)
        if v not in choices:
            self.fail(self.key(k), f"expected one of {', '.join(choices)}", v)
        return v

    def sub(self, k: str) -> _Reader:
        return _Reader(self.file, self.data.get(k), f"{self.prefix}{k}.")


def _resolve(base: Path, value: Any, file: Path, key: str) -> Path:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{file}: {key}: expected a file path, got {value!r}")
    p = Path(value)
    if not p.is_absolute():
        p = base / p
    p = p.resolve()
    if not p.is_file():
        raise UsageError(f"{file}: {key}: file not found: {value}")
    return p


def _tolerances(r: _Reader) -> dict[str, Tolerance]:
    out = {"default": Tolerance()}
    for dtype, spec in r.data.items():
        t = _Reader(r.file, spec, f"{r.prefix}{dtype}.")
        t.only(("atol", "rtol"))
        out[str(dtype)] = Tolerance(atol=t.number("atol", 0.0, 0.0), rtol=t.number("rtol", 0.0, 0.0))
    return out


def _shapes(r: _Reader) -> tuple[Shape, ...]:
    shapes = []
    for name, params in r.data.items():
        if params is None:
            params = {}
        if not isinstance(params, dict):
            r.fail(r.key(str(name)), "expected a mapping of get_inputs arguments", params)
        for k, v in params.items():
            if not isinstance(v, (int, float, str, bool)) and v is not None:
                r.fail(f"{r.key(str(name))}.{k}", "expected a number, string, boolean or null", v)
        shapes.append(Shape(str(name), dict(params)))
    return tuple(shapes)


def load_config(path: str | Path) -> Config:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    top = _Reader(file, data)
    top.only(("problem", "solutions", "shapes", "cpu_shapes", "check", "timing", "build", "timeouts",
              "static_checks"))
    base = file.resolve().parent
    if "problem" not in top.data:
        raise UsageError(f"{path}: missing key 'problem'")
    problem = _resolve(base, top.data["problem"], file, "problem")

    sol = top.sub("solutions")
    sol.only(DEVICES)
    solutions: dict[str, tuple[Path, ...]] = {}
    for dev in DEVICES:
        items = sol.data.get(dev) or []
        if not isinstance(items, list):
            sol.fail(sol.key(dev), "expected a list of files", items)
        solutions[dev] = tuple(_resolve(base, v, file, f"solutions.{dev}[{i}]") for i, v in enumerate(items))

    shp = top.sub("shapes")
    shapes = _shapes(shp) or (Shape("default", {}),)

    chk = top.sub("check")
    chk.only(("seeds", "tolerance", "verify_timed"))
    check = CheckSettings(
        seeds=chk.integer("seeds", 5, 1),
        tolerance=_tolerances(chk.sub("tolerance")),
        verify_timed=chk.integer("verify_timed", 16, 1),
    )

    tim = top.sub("timing")
    tim.only(("target_rse", "warmup_ms", "min_runs", "max_runs", "budget_s", "speedup_metric",
              "compile_reference", "graph", "rounds", "speedup_quantile", "phase_slack",
              "phase_extra_rounds", "phase_min_rounds"))
    timing = TimingSettings(
        target_rse=tim.number("target_rse", 0.005, 0.0, 1.0, lo_open=True),
        warmup_ms=tim.number("warmup_ms", 25.0, 0.0),
        min_runs=tim.integer("min_runs", 20, 2),
        max_runs=tim.integer("max_runs", 2000, 2),
        budget_s=tim.number("budget_s", 2.0, 0.0, lo_open=True),
        speedup_metric=tim.choice("speedup_metric", "time_us", SPEEDUP_METRICS),
        compile_reference=tim.boolean("compile_reference", True),
        graph=tim.boolean("graph", True),
        rounds=tim.integer("rounds", 5, 1),
        speedup_quantile=tim.number("speedup_quantile", 0.1, 0.0, 0.5, lo_open=True),
        phase_slack=tim.number("phase_slack", 1.2, 1.0),
        phase_extra_rounds=tim.integer("phase_extra_rounds", 5, 0),
        phase_min_rounds=tim.integer("phase_min_rounds", 3, 1),
    )
    if timing.max_runs < timing.min_runs:
        tim.fail("timing.max_runs", f"expected at least timing.min_runs ({timing.min_runs})", timing.max_runs)

    bld = top.sub("build")
    bld.only(("timeout_s", "jobs", "pch"))
    build = BuildSettings(timeout_s=bld.number("timeout_s", 600.0, 0.0, lo_open=True),
                          jobs=bld.integer("jobs", 0, 0), pch=bld.boolean("pch", True))

    tmo = top.sub("timeouts")
    tmo.only(("load_s", "shape_s"))
    timeouts = Timeouts(load_s=tmo.number("load_s", 600.0, 0.0, lo_open=True),
                        shape_s=tmo.number("shape_s", 300.0, 0.0, lo_open=True))

    static = top.choice("static_checks", "strict", STATIC_POLICIES)
    cpu_shapes = top.data.get("cpu_shapes") or []
    names = {s.name for s in shapes}
    if not isinstance(cpu_shapes, list) or any(n not in names for n in cpu_shapes):
        top.fail("cpu_shapes", f"expected a list of shape names ({', '.join(names)})", cpu_shapes)
    return Config(path=file.resolve(), problem=problem, solutions=solutions, shapes=shapes, check=check,
                  timing=timing, build=build, timeouts=timeouts, static_checks=static, cpu_shapes=tuple(cpu_shapes))
