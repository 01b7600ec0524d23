"""A suite of KernelBench-format problems in one run (--problems/--solutions): a record per problem x candidate x
shape with its problem and level, per-problem folders, the suite's tables, and the same verdicts through the
Python API."""

import json

import pytest

import harness
from conftest import REPO

pytestmark = pytest.mark.slow
SUITE = REPO / "tests" / "suite"


@pytest.fixture(scope="module")
def suite(run_eval):
    return run_eval(None, "--problems", str(SUITE / "problems"), "--solutions", str(SUITE / "solutions"),
                    "--suite", str(SUITE / "fast.yaml"), "--device", "cpu", "--seed", "21")


def test_every_problem_and_candidate_gets_its_verdict(suite):
    assert suite.rc == 0, suite.stderr
    recs = {(r["problem"], r["solution"]): r for d in ("vadd", "relu", "rowsum")
            for r in map(json.loads, (suite.out / d / "results.jsonl").read_text().splitlines())}
    assert {k: r["status"] for k, r in recs.items()} == {
        ("vadd", "vadd_cpp"): "correct", ("relu", "relu_cpp"): "correct", ("relu", "relu_wrong_cpp"): "incorrect",
        ("rowsum", "rowsum_cpp"): "correct"}
    assert {r["level"] for k, r in recs.items() if k[0] != "rowsum"} == {"1"} and recs["rowsum", "rowsum_cpp"]["level"] == "2"
    assert all(r["shape"] == "default" for r in recs.values())


def test_suite_settings_reach_each_problem(suite):
    vadd = json.loads((suite.out / "vadd" / "run.json").read_text())
    rowsum = json.loads((suite.out / "rowsum" / "run.json").read_text())
    assert vadd["config"]["timing"]["budget_s"] == rowsum["config"]["timing"]["budget_s"] == 0.1
    assert vadd["config"]["check"]["seeds"] == 2 and rowsum["config"]["check"]["seeds"] == 3
    assert rowsum["config"]["check"]["tolerance"]["float32"]["atol"] == 1e-4


def test_suite_tables_group_by_level(suite):
    s = json.loads((suite.out / "suite.json").read_text())
    assert len(s["rows"]) == 4
    groups = s["groups"]
    assert groups["overall"]["rows"] == 4 and groups["overall"]["correct_rate"] == 0.75
    assert groups["level 1"]["rows"] == 3 and groups["level 2"]["correct_rate"] == 1.0
    ranked = [r for r in s["rows"] if r["ranked"]]  # correct and stable (a busy host widens intervals)
    assert all(r["correct"] for r in ranked) and groups["overall"]["fast_p"]["0"] == len(ranked) / 4
    md = (suite.out / "suite.md").read_text()
    assert "| relu | 1 | relu_wrong_cpp | incorrect |" in md


def test_the_api_gives_the_suite_verdicts_from_paths_and_text(build_cache):
    relu = SUITE / "solutions" / "relu"
    records = harness.evaluate(SUITE / "problems" / "level1" / "relu.py",
                               {"honest": relu / "relu_cpp.py", "wrong": (relu / "relu_wrong_cpp.py").read_text()},
                               device="cpu", cache=str(build_cache), seed=21)
    assert [(r["solution"], r["status"], r["level"]) for r in records] == [("honest", "correct", "1"),
                                                                          ("wrong", "incorrect", "1")]


def test_suite_input_errors_are_one_line(run_eval, tmp_path):
    res = run_eval(None, "--problems", str(tmp_path / "none"), "--solutions", str(SUITE / "solutions"),
                   "--device", "cpu")
    assert res.rc == 2 and res.stderr.count("\n") == 1 and "no problem files" in res.stderr
    res = run_eval(SUITE / "problems" / "level1" / "vadd.py", "--problems", str(SUITE / "problems"), "--device", "cpu")
    assert res.rc == 2 and "not both" in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("problems:\n  nosuch: {}\n")
    res = run_eval(None, "--problems", str(SUITE / "problems"), "--solutions", str(SUITE / "solutions"),
                   "--suite", str(bad), "--device", "cpu")
    assert res.rc == 2 and "problems.nosuch" in res.stderr


def test_suite_terminal_output_has_one_footnote_and_fits_120_columns(suite):
    lines = suite.stdout.splitlines()
    assert sum("summary.md" in line for line in lines) == 1
    assert max(len(line) for line in lines) <= 120


def test_a_suite_builds_every_candidate_ahead_once(suite):
    """Every problem's candidates are built together before the first is evaluated, so each problem's own run
    finds its builds in the cache."""
    assert "suite builds: 4 candidate(s) of 3 problem(s)" in suite.stdout
    for d in ("vadd", "relu", "rowsum"):
        builds = json.loads((suite.out / d / "run.json").read_text())["builds"]
        assert builds and all(b["status"] == "built" and b["cached"] for b in builds.values()), builds
