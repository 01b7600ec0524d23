"""The plan: config plus command line resolved into what this run will do, with every seed derived."""

import glob
import hashlib
import secrets
from collections import Counter
from dataclasses import dataclass, field
from functools import partialmethod
from pathlib import Path

from ..errors import UsageError
from ..problem import ProblemSource
from ..seeds import derive
from ..settings import STRICT_SANDBOX, Config, LoopSettings, Shape


@dataclass(frozen=True)
class Plan:
    config: Config
    problem: ProblemSource
    device: str
    shapes: tuple[Shape, ...]
    solutions: tuple[tuple[str, Path], ...]
    master_seed: int
    seed_given: bool
    seeds: int
    static_policy: str
    lanes: tuple[str, ...]
    jobs: int
    out_dir: Path
    cache_dir: Path
    run_id: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    build_only: bool = False
    isolate: bool = False  # build and evaluation workers run as users of their own (harness.judge.isolation)
    profile: bool = False  # records and run.json say where the wall time went
    reference_only: bool = False  # time the references, write baseline_out, evaluate nothing
    baseline: dict | None = None  # a --baseline file's entries (harness.judge.baseline)
    baseline_out: Path | None = None
    seed_salt: str = field(default_factory=lambda: secrets.token_hex(16))

    def baseline_for(self, shape: Shape) -> dict | None:
        from .baseline import entry_key

        return (self.baseline or {}).get(entry_key(self.problem.text, shape.name, dict(shape.params),
                                                   self.config.check.precision))

    @property
    def loop(self) -> LoopSettings:
        return self.config.timing.loop()

    def check_seeds(self, shape: str) -> list[int]:
        return [derive(self.master_seed, shape, "check", k) for k in range(self.seeds)]

    def _seed(self, shape: str, purpose: str) -> int:
        return derive(self.master_seed, shape, purpose)

    post_seed = partialmethod(_seed, purpose="post")
    time_seed = partialmethod(_seed, purpose="time")
    graph_seed = partialmethod(_seed, purpose="graph")
    judge_seed = partialmethod(_seed, purpose="judge")
    init_seed = partialmethod(_seed, purpose="init")

    @property
    def strict_sandbox(self) -> bool:
        """Whether candidate code runs under the strict sandbox (settings.STRICT_SANDBOX), each process with a
        folder of its own."""
        return self.device in STRICT_SANDBOX

    @property
    def fp_seed(self) -> int:
        return derive(self.master_seed, "fingerprint")

    def command_json(self) -> dict:
        """The flags that repeat this run, by name: what `--resume DIR` alone reads back from run.json."""
        return {"config": str(self.config.path), "solution": [str(p) for _, p in self.solutions],
                "device": self.device, "shapes": [s.name for s in self.shapes], "seeds": self.seeds,
                "static_checks": self.static_policy, "precision": self.config.check.precision}

    @property
    def seed_commitment(self) -> str:
        """SHA-256 of `salt:master`: what run.json and the terminal show of the seeds while candidates run."""
        return hashlib.sha256(f"{self.seed_salt}:{self.master_seed}".encode()).hexdigest()

    def seeds_json(self, reveal: bool = True) -> dict:
        """The run's seeds for run.json. While candidates run, run.json (which they can read) holds only a
        salted hash of the master seed: every later seed derives from it. Once the run is over, the master, the
        salt and every shape's seeds are written, and the hash shows they are the ones the run used."""
        head = {"commitment": self.seed_commitment, "given": self.seed_given}
        if not reveal:
            return head
        shapes = {s.name: {"check": self.check_seeds(s.name), "post": self.post_seed(s.name),
                           "time_base": self.time_seed(s.name), "init": self.init_seed(s.name)}
                  for s in self.shapes}
        return {**head, "master": self.master_seed, "salt": self.seed_salt, "shapes": shapes}


def work_root() -> Path:
    """Where results/ and .cache/kbh go by default: the checkout when run from one, else the current folder."""
    checkout = Path(__file__).resolve().parents[2]
    return checkout if (checkout / "run_eval.py").is_file() else Path.cwd()


def expand_solutions(values: list[str]) -> list[Path]:
    """Files, folders (their *.py files) and globs, in order, each once; a miss is a usage error."""
    out: list[Path] = []
    for v in values:
        if any(ch in v for ch in "*?["):
            found = sorted(Path(m) for m in glob.glob(v, recursive=True) if m.endswith(".py"))
            miss = "the pattern matches no .py file"
        elif Path(v).is_dir():
            found = sorted(p for p in Path(v).glob("*.py") if not p.name.startswith(("_", ".")))
            miss = "the folder holds no .py file"
        else:
            found = [Path(v)] if Path(v).is_file() else []
            miss = "no such file"
        if not found:
            raise UsageError(f"--solution {v}: {miss}")
        out.extend(found)
    return list(dict.fromkeys(p.resolve() for p in out))


def name_solutions(paths: list[Path]) -> tuple[tuple[str, Path], ...]:
    """Short unique names: the file's stem, or parent/stem where stems collide."""
    stems = Counter(p.stem for p in paths)
    return tuple((p.stem if stems[p.stem] == 1 else f"{p.parent.name}/{p.stem}", p) for p in paths)


def select_shapes(shapes: tuple[Shape, ...], names: list[str] | None) -> tuple[Shape, ...]:
    by_name = {s.name: s for s in shapes}
    for n in names or ():
        if n not in by_name:
            raise UsageError(f"--shapes {n}: no such shape in the config (it has: {', '.join(by_name)})")
    return tuple(by_name[n] for n in names) if names else shapes


def parse_lanes(value: str | None, device: str) -> tuple[str, ...]:
    """--gpus: a count ('2') or device indices ('0,1'; '0,0' runs two lanes on GPU 0). On the CPU, a count."""
    if not value:
        return ("0",) if device == "cuda" else ("cpu",)
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise UsageError(f"--gpus {value}: expected a count or a comma-separated list of device indices")
    if len(parts) == 1:
        n = int(parts[0])
        if n < 1:
            raise UsageError(f"--gpus {value}: expected at least 1")
        return tuple(str(i) for i in range(n)) if device == "cuda" else ("cpu",) * n
    if device != "cuda":
        raise UsageError(f"--gpus {value}: device lists need --device cuda")
    return tuple(parts)
