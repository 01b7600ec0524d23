"""Config validation and usage errors: one line naming file, key and value; exit code 2; no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.judge.config import load_config

REPO = Path(__file__).resolve().parents[1]
GOOD = """
problem: {problem}
solutions:
  cpu: [{solution}]
shapes:
  small: {num_tokens: 8, hidden_dim: 4, num_experts: 2, dtype: float32}
"""


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text.replace("{problem}", str(REPO / "problems" / "pack_tokens.py"))
                 .replace("{solution}", str(REPO / "solutions" / "pack_tokens" / "cpu_cpp.py")))
    return p


def test_bundled_config_loads_with_required_shapes():
    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    names = [s.name for s in cfg.shapes]
    for required in ("seed", "wide", "mixtral", "deepseek", "odd"):
        assert required in names
    odd = next(s for s in cfg.shapes if s.name == "odd").params
    assert odd["hidden_dim"] * 4 % 16 != 0 and odd["pad_to"] == 8
    assert cfg.check.tolerance_for("bfloat16").exact
    assert cfg.solutions["cuda"] and cfg.solutions["cpu"]


def test_defaults_fill_in(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.check.seeds == 5
    assert cfg.build.timeout_s == 600
    assert cfg.static_checks == "strict"
    assert cfg.timing.speedup_metric == "time_us"


def test_tolerance_per_dtype_by_default_and_as_configured(tmp_path):
    plain = load_config(write(tmp_path, GOOD)).check
    assert (plain.tolerance_for("float32").atol, plain.tolerance_for("float32").rtol) == (1e-4, 1e-4)
    assert plain.tolerance_for("bfloat16").rtol == plain.tolerance_for("float16").rtol == 1e-2
    assert plain.tolerance_for("int64").exact and plain.tolerance_for("bool").exact
    assert plain.tolerances()["float32"] == [1e-4, 1e-4] and plain.tolerances()["default"] == [0.0, 0.0]
    (tmp_path / "b").mkdir()
    own = load_config(write(tmp_path / "b", GOOD + "\ncheck: {tolerance: {default: {atol: 0.5}, float16: {rtol: 0.1}}}\n"))
    assert own.check.tolerance_for("float32").atol == 0.5 and own.check.tolerance_for("float32").rtol == 0.0
    assert own.check.tolerance_for("float16").rtol == 0.1 and own.check.tolerance_for("float16").atol == 0.0
    assert own.check.tolerances()["float32"] == [0.5, 0.0] and own.check.tolerances()["default"] == [0.5, 0.0]
    problem_file = load_config(REPO / "tests" / "problems" / "vector_add.py").check
    assert problem_file.tolerance_for("float32").rtol == 1e-4


@pytest.mark.parametrize("extra, needle", [
    ("timng: {}", "unknown key 'timng'"),
    ("timing: {target_rse: fast}", "timing.target_rse"),
    ("timing: {target_rse: 0}", "timing.target_rse"),
    ("check: {seeds: 0}", "check.seeds"),
    ("check: {tolerance: {float32: {atol: -1}}}", "check.tolerance.float32.atol"),
    ("static_checks: maybe", "static_checks"),
    ("timing: {speedup_metric: wall}", "timing.speedup_metric"),
    ("build: {timeout_s: -5}", "build.timeout_s"),
    ("timing: {min_runs: 50, max_runs: 10}", "timing.max_runs"),
    ("timing: {rounds: 0}", "timing.rounds"),
    ("timing: {speedup_quantile: 0.9}", "timing.speedup_quantile"),
    ("timing: {budget_s: .inf}", "timing.budget_s"),
    ("timing: {phase_slack: 1.2}", "unknown key 'timing.phase_slack'"),
])
def test_bad_values_name_the_key(tmp_path, extra, needle):
    with pytest.raises(UsageError) as e:
        load_config(write(tmp_path, GOOD + extra + "\n"))
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_files_are_named(tmp_path):
    text = GOOD.replace("{solution}", "nowhere.py")
    with pytest.raises(UsageError, match=r"solutions.cpu\[0\]: file not found: nowhere.py"):
        load_config(write(tmp_path, text))
    with pytest.raises(UsageError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")


def test_invalid_yaml_is_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("problem: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_config(p)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


@pytest.mark.parametrize("args, needle", [
    (["configs/pack_tokens.yaml", "--solution", "missing.py", "--device", "cpu"], "--solution missing.py: no such file"),
    (["configs/absent.yaml"], "configs/absent.yaml: config file not found"),
    (["configs/pack_tokens.yaml", "--device", "cpu", "--shapes", "huge"], "--shapes huge: no such shape"),
    (["configs/pack_tokens.yaml", "--device", "cpu", "--seeds", "0"], "--seeds 0"),
    (["configs/pack_tokens.yaml", "--device", "tpu"], "invalid choice: 'tpu'"),
    (["configs/pack_tokens.yaml", "--device", "cpu", "--gpus", "x"], "--gpus x"),
    (["configs/pack_tokens.yaml", "--device", "cpu", "--solution", "tests/*.nothing"], "matches no .py file"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, needle):
    p = cli(*args)
    assert p.returncode == 2
    assert needle in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr + p.stdout


BINARY = bytes(range(128, 256)) * 4


@pytest.mark.parametrize("what", ["problem file", "config file", "--out"])
def test_unreadable_input_is_one_line_and_exit_2(tmp_path, what):
    problem, config = tmp_path / "bin_problem.py", tmp_path / "bin.yaml"
    problem.write_bytes(BINARY)
    config.write_bytes(BINARY)
    args = {"problem file": [str(problem), "--device", "cpu"], "config file": [str(config), "--device", "cpu"],
            "--out": ["configs/pack_tokens.yaml", "--device", "cpu", "--out", "/proc/kbh-cannot-be-made"]}[what]
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr + p.stdout
    assert (args[0] if what != "--out" else "/proc/kbh-cannot-be-made") in p.stderr


def test_problem_shape_keys_are_checked(tmp_path):
    text = GOOD.replace("num_experts: 2", "num_expertz: 2")
    p = cli(str(write(tmp_path, text)), "--device", "cpu")
    assert p.returncode == 2
    assert "shapes.small.num_expertz" in p.stderr and "takes no argument" in p.stderr


def test_help_documents_every_option():
    out = cli("--help").stdout
    for opt in ("--solution", "--device", "--shapes", "--seeds", "--seed", "--out", "--strict", "--static-checks",
                "--jobs", "--gpus", "--resume", "--cache", "--isolate", "--build-only", "--profile"):
        assert opt in out
