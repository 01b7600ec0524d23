"""The Python API returns the records the command line writes, from paths or source text, and an Evaluator called
again and again in one process leaves no process behind; a KernelBench problem file runs without a YAML config."""

import json
from pathlib import Path

import pytest

import harness
from conftest import CANDIDATES, CONFIGS, REPO, live_children
from harness.errors import UsageError

pytestmark = pytest.mark.slow
HONEST = CANDIDATES / "cpu" / "vadd_cpp.py"
WRONG = CANDIDATES / "cpu" / "vsub_wrong_cpp.py"


def test_evaluate_takes_paths_and_source_text_and_returns_the_records(build_cache, tmp_path):
    before = live_children()
    records = harness.evaluate(CONFIGS / "cpu_vadd.yaml",
                               {"honest": HONEST, "honest_text": HONEST.read_text(), "wrong": WRONG.read_text()},
                               device="cpu", seed=11, cache=str(build_cache), out=str(tmp_path / "out"))
    by = {r["solution"]: r for r in records}
    assert [by[n]["status"] for n in ("honest", "honest_text", "wrong")] == ["correct", "correct", "incorrect"]
    assert by["honest"]["shape"] == "small" and by["honest"]["speedup"] > 0
    written = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(written) == len(records) == 3
    assert live_children() == before


def test_an_evaluator_called_repeatedly_gives_the_same_verdicts_and_leaks_no_process(build_cache):
    before = live_children()
    with harness.Evaluator(device="cpu", cache=str(build_cache), seed=5) as ev:
        first = ev.evaluate(CONFIGS / "cpu_vadd.yaml", [HONEST.read_text(), str(WRONG)])
        again = ev.evaluate(CONFIGS / "cpu_vadd.yaml", [HONEST.read_text(), str(WRONG)])
        one = ev.evaluate(CONFIGS / "cpu_vadd.yaml", str(HONEST))
    assert [r["status"] for r in first] == [r["status"] for r in again] == ["correct", "incorrect"]
    assert [r["solution"] for r in first] == ["candidate_0", "vsub_wrong_cpp"]
    assert [(r["solution"], r["status"]) for r in one] == [("vadd_cpp", "correct")]
    assert live_children() == before


def test_an_evaluator_compiles_a_reference_once_and_reuses_its_figure(build_cache, tmp_path):
    config = tmp_path / "vadd.yaml"
    config.write_text((CONFIGS / "cpu_vadd.yaml").read_text().replace("compile_reference: false", "compile_reference: true")
                      .replace("../problems/", f"{CONFIGS.parent / 'problems'}/"))
    with harness.Evaluator(device="cpu", cache=str(build_cache), seed=5) as ev:
        first = ev.evaluate(config, [str(HONEST)], out=str(tmp_path / "first"))
        again = ev.evaluate(config, [str(HONEST)], out=str(tmp_path / "again"))

    def reference(run: str) -> dict:
        return json.loads((tmp_path / run / "run.json").read_text())["reference_timings"]["0"]["small"]

    assert reference("first")["compiled_from"] == "timed" and reference("first")["compiled"]["runs"] > 0
    assert reference("again")["compiled_from"] == "baseline"  # no torch.compile the second time
    assert [r["status"] for r in first] == [r["status"] for r in again] == ["correct"]
    assert again[0]["speedup_compile"] > 0


def test_api_bad_input_names_the_problem(build_cache):
    with pytest.raises(UsageError, match="missing.py"):
        harness.evaluate(CONFIGS / "cpu_vadd.yaml", [str(REPO / "missing.py")], device="cpu", cache=str(build_cache))
    with pytest.raises(UsageError, match="candidate name"):
        harness.evaluate(CONFIGS / "cpu_vadd.yaml", {"../up": HONEST.read_text()}, device="cpu")
    with pytest.raises(TypeError, match="unknown option"):
        harness.evaluate(CONFIGS / "cpu_vadd.yaml", [str(HONEST)], device="cpu", budget=3)


@pytest.mark.parametrize("options, needle", [
    ({"device": "tpu"}, "invalid choice: 'tpu'"), ({"seeds": "many"}, "--seeds"), ({"static_checks": "some"}, "some"),
    ({"precision": "fp8"}, "fp8"), ({"gpus": "x", "device": "cpu"}, "--gpus x")])
def test_api_options_are_checked_like_the_flags(options, needle):
    with pytest.raises(UsageError, match=needle):
        harness.evaluate(CONFIGS / "cpu_vadd.yaml", [str(HONEST)], **options)


@pytest.mark.parametrize("option, value", [("device", "tpu"), ("seeds", "many"), ("seed", True), ("jobs", "2x"),
                                           ("static_checks", "some"), ("precision", "fp8")])
def test_a_bad_option_reads_the_same_from_the_api_and_the_command_line(option, value):
    import subprocess
    import sys

    flag = "--" + option.replace("_", "-")
    cli = subprocess.run([sys.executable, str(REPO / "run_eval.py"), str(CONFIGS / "cpu_vadd.yaml"), flag,
                          str(value)], capture_output=True, text=True, timeout=120)
    with pytest.raises(UsageError) as api:
        harness.Evaluator(**{option: value})
    if value is not True:  # a flag's text cannot be a bool: only the API can be given one
        assert cli.returncode == 2 and cli.stderr.strip() == f"run_eval.py: error: {api.value}"
    assert flag in str(api.value)


def test_api_records_name_no_file_that_is_gone(build_cache, tmp_path):
    """Without out=, the run's folder is removed when the call returns: no record points into it."""
    [r] = harness.evaluate(CONFIGS / "cpu_vadd.yaml", {"text": HONEST.read_text()}, device="cpu", seed=4,
                           cache=str(build_cache))
    assert r["status"] == "correct"

    def paths(value):
        if isinstance(value, dict):
            return [p for v in value.values() for p in paths(v)]
        if isinstance(value, list):
            return [p for v in value for p in paths(v)]
        return [value] if isinstance(value, str) and value.startswith("/") else []

    assert all(Path(p).exists() for p in paths(r)), paths(r)
    [kept] = harness.evaluate(CONFIGS / "cpu_vadd.yaml", [str(HONEST)], device="cpu", seed=4, cache=str(build_cache),
                              out=str(tmp_path / "out"))
    assert kept["log"] and Path(kept["log"]).exists()


def test_a_kernelbench_problem_file_runs_without_a_config(run_eval):
    res = run_eval(REPO / "tests" / "problems" / "vector_add.py", "--device", "cpu", "--seed", "3",
                   "--solution", str(HONEST), str(WRONG))
    assert res.rc == 0, res.stderr
    assert res.by("vadd_cpp", "default")["status"] == "correct"
    assert res.by("vsub_wrong_cpp", "default")["status"] == "incorrect"
    assert res.run_json["config"]["shapes"] == {"default": {}}
