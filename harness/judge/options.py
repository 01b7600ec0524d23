"""One run's options. The command line fills `RunOptions` from its flags, the Python API from keyword options;
both read the same table (`FLAGS`), so a value is checked, and a bad one named, the same way from either."""

import argparse
import sys
from dataclasses import dataclass, fields

from ..errors import UsageError
from ..settings import PRECISIONS, STATIC_POLICIES

DEVICES = ("cuda", "cpu")
FLAGS: dict[str, dict] = {
    "problems": dict(metavar="DIR|GLOB", help="a suite: every KernelBench problem file there (instead of CONFIG), "
                     "each with the candidates in --solutions DIR/<problem file's stem>/*.py"),
    "solutions": dict(metavar="DIR", help="with --problems: the candidates' folder"),
    "suite": dict(metavar="FILE", help="with --problems: YAML of settings for every problem (`defaults`) and per "
                  "problem (`problems: {stem: ...}`), keyed as in a run config"),
    "solution": dict(nargs="+", action="extend", metavar="FILE", help="candidate files, folders (their *.py) or "
                     "globs; default: the config's solutions for the device"),
    "device": dict(choices=DEVICES, help="where to run; default: cuda when a GPU is visible, else cpu (C++ "
                   "candidates)"),
    "shapes": dict(nargs="+", metavar="NAME", help="run only these shapes of the config"),
    "seeds": dict(type=int, metavar="N", help="correctness seeds per shape (default: the config's, 5)"),
    "seed": dict(type=int, metavar="S", help="master seed, to reproduce a run; default: fresh from os.urandom, "
                 "recorded in run.json"),
    "out": dict(metavar="DIR", help="output folder (default: results/<run-id>)"),
    "strict": dict(action="store_true", help="exit 1 when any record is not correct"),
    "static_checks": dict(choices=STATIC_POLICIES, help="strict rejects on a finding, warn only flags, off skips "
                          "(default: the config's)"),
    "jobs": dict(type=int, metavar="N", help="parallel builds (default: from cores and memory)"),
    "gpus": dict(metavar="N|LIST", help="evaluation lanes: a count, or device indices like 0,1 (0,0 = two lanes "
                 "on GPU 0)"),
    "resume": dict(metavar="DIR", help="continue an interrupted run in DIR, skipping finished records; alone, with "
                   "the command its run.json names"),
    "cache": dict(metavar="DIR", help="build cache folder (default: .cache/kbh, or $KBH_CACHE)"),
    "isolate": dict(action="store_true", help="run the workers that import candidates (builds, evaluations) as "
                    "users of their own, so the build cache and the run's files are read-only to candidate code "
                    "(the judge must be root)"),
    "build_only": dict(action="store_true", help="build every candidate into the cache (in parallel) and stop: "
                       "no checks, no timing"),
    "precision": dict(choices=PRECISIONS, help="cast every floating input and the models' weights to fp32, fp16 "
                      "or bf16, as KernelBench's precision option (default: the config's check.precision)"),
    "reference_only": dict(action="store_true", help="time the references only (eager, torch.compile, graph "
                           "replay) and write them to OUT/baseline.json, for --baseline"),
    "baseline": dict(metavar="FILE", help="a --reference-only run's baseline.json: torch.compile's figures come "
                     "from it (refused if timed on another GPU, driver, torch or CUDA)"),
    "cluster": dict(metavar="ray[:ADDRESS]", help="evaluate on a Ray cluster, a lane per GPU: RAY_ADDRESS's, else "
                    "a running local one, else a new local instance; ray:ADDRESS names one (pip install '.[ray]')"),
    "profile": dict(action="store_true", help="records and run.json also say where the wall time went (stages, "
                    "worker starts, timeline)"),
}
RUN_ONLY = ("problems", "solutions", "suite", "solution", "strict", "resume", "build_only", "reference_only")
"""Flags of a command-line run that the Python API does not take (it gives the problem and the candidates)."""


@dataclass(frozen=True)
class RunOptions:
    """Every flag of run_eval.py, by its name (--static-checks is static_checks); None: not given."""

    config: str | None = None
    problems: str | None = None
    solutions: str | None = None
    suite: str | None = None
    solution: tuple[str, ...] | None = None
    device: str | None = None
    shapes: tuple[str, ...] | None = None
    seeds: int | None = None
    seed: int | None = None
    out: str | None = None
    strict: bool = False
    static_checks: str | None = None
    jobs: int | None = None
    gpus: str | None = None
    resume: str | None = None
    cache: str | None = None
    isolate: bool = False
    build_only: bool = False
    precision: str | None = None
    reference_only: bool = False
    baseline: str | None = None
    cluster: str | None = None
    profile: bool = False
    baseline_out: str | None = None  # a suite's: one baseline.json for all its problems

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "RunOptions":
        """The parsed command line, each value checked (UsageError naming the flag and the value)."""
        return cls(**{f.name: _checked(f.name, getattr(ns, f.name, None)) if f.name in FLAGS
                      else getattr(ns, f.name, f.default) for f in fields(cls)})

    @classmethod
    def from_keywords(cls, options: dict) -> "RunOptions":
        """The Python API's keyword options, each checked as its flag's value is (UsageError naming the flag);
        an unknown name is a TypeError, as for any keyword."""
        known = [k for k in FLAGS if k not in RUN_ONLY]
        unknown = set(options) - set(known)
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}")
        return cls(**{k: _checked(k, v) for k, v in options.items()})


def _tupled(value) -> tuple | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _checked(name: str, value):
    """An option's value, from a flag's text or a keyword, in its flag's type and among its choices."""
    spec, flag = FLAGS[name], "--" + name.replace("_", "-")
    if value is None:
        return None
    if spec.get("action") == "store_true":
        return bool(value)
    if spec.get("nargs") == "+":
        return tuple(_one(flag, spec, v) for v in _tupled(value))
    return _one(flag, spec, value)


def _one(flag: str, spec: dict, value):
    kind = spec.get("type", str)
    try:
        if isinstance(value, bool) or isinstance(value, (list, tuple, dict)):
            raise TypeError
        value = kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"argument {flag}: invalid {kind.__name__} value: {value!r}") from None
    choices = spec.get("choices")
    if choices and value not in choices:
        raise UsageError(f"argument {flag}: invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The flags' shapes (how many values, which are switches); their values are checked by `_checked`."""
    p = _Parser(prog="run_eval.py", description="Build, check and time kernel candidates against a reference "
                "PyTorch Model, and write a speedup table under results/.")
    p.add_argument("config", nargs="?", help="YAML run config (e.g. configs/pack_tokens.yaml), or a KernelBench "
                   "problem file (its get_inputs() as written is the one shape, default settings)")
    for name, spec in FLAGS.items():
        shape = {k: v for k, v in spec.items() if k not in ("type", "choices")}
        if "choices" in spec:
            shape["metavar"] = "{" + ",".join(spec["choices"]) + "}"
        p.add_argument("--" + name.replace("_", "-"), **shape)
    return p


def parse(argv: list[str] | None = None) -> RunOptions:
    """The command line's options; a bad value raises UsageError, a malformed line exits 2 (argparse)."""
    return RunOptions.from_namespace(build_parser().parse_args(argv))
