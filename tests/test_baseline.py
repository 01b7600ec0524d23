"""Reference baselines (CPU): --reference-only writes the references' timings with the machine they were timed
on; --baseline reuses torch.compile's figure from them, and is refused when timed elsewhere."""

import json

import pytest

from conftest import REPO

PROBLEM = REPO / "tests" / "suite" / "problems" / "level1" / "vadd.py"
CANDIDATE = REPO / "tests" / "suite" / "solutions" / "vadd" / "vadd_cpp.py"


@pytest.fixture(scope="module")
def timed(run_eval):
    res = run_eval(PROBLEM, "--device", "cpu", "--reference-only")
    assert res.rc == 0, res.stderr
    return res


def test_reference_only_writes_the_references_and_evaluates_nothing(timed):
    data = json.loads((timed.out / "baseline.json").read_text())
    assert data["machine"]["device"] == "cpu" and data["machine"]["torch"]
    (entry,) = data["entries"].values()
    assert entry["problem"] == "vadd" and entry["shape"] == "default"
    assert entry["eager"]["median_us"] > 0 and entry["compiled"]["median_us"] > 0
    assert timed.records == []


def test_a_run_with_the_baseline_takes_torch_compile_from_it(timed, run_eval):
    res = run_eval(PROBLEM, "--device", "cpu", "--baseline", str(timed.out / "baseline.json"),
                   "--solution", str(CANDIDATE))
    assert res.rc == 0, res.stderr
    ref = json.loads((res.out / "run.json").read_text())["reference_timings"]["0"]["default"]
    assert ref["compiled_from"] == "baseline"
    base = next(iter(json.loads((timed.out / "baseline.json").read_text())["entries"].values()))
    ratio = base["compiled"]["median_us"] / base["eager"]["median_us"]
    assert ref["compiled"]["median_us"] == pytest.approx(ref["eager"]["median_us"] * ratio, rel=1e-3)
    (r,) = res.records
    assert r["status"] == "correct" and r["speedup_compile"] is not None


@pytest.mark.parametrize("key, value", [("torch", "0.0.1"), ("model", "another CPU")])
def test_a_baseline_from_another_machine_is_refused_in_one_line(timed, run_eval, tmp_path, key, value):
    data = json.loads((timed.out / "baseline.json").read_text())
    data["machine"][key] = value
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    res = run_eval(PROBLEM, "--device", "cpu", "--baseline", str(other), "--solution", str(CANDIDATE))
    assert res.rc == 2 and res.records == []
    line = res.stderr.strip()
    assert "\n" not in line and str(other) in line and f"{key} '{value}'" in line
