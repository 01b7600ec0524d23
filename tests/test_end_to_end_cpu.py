"""The whole path on the CPU with a real C++ build: config, build, check, time, files, seeds, resume, batches."""

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, judged
from harness.stats import T975

FIELDS = {"solution", "problem", "level", "shape", "status", "flags", "message", "speedup", "speedup_compile", "speedup_ci",
          "speedup_compile_ci", "check", "timing", "floors", "diagnostics", "device", "node", "lane", "solution_path", "log",
          "schema_version"}
PY = str(CANDIDATES / "honest" / "python_cpu.py")


@pytest.fixture(scope="module")
def bundled(run_eval):
    return run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--seed", "1234")


def test_bundled_cpu_solution_is_correct_on_every_shape(bundled):
    assert bundled.rc == 0, bundled.stderr
    assert [(r["solution"], r["shape"]) for r in bundled.records] == [("cpu_cpp", "tiny"), ("cpu_cpp", "padded")]
    for r in bundled.records:
        assert r["status"] == "correct" and judged(r) == [], json.dumps(r)
        assert set(r) == FIELDS  # no profile without --profile
        t = r["timing"]
        assert r["speedup"] > 0 and t["time_us"] > 0 and t["ref_time_us"] > 0
        assert r["check"]["max_abs_err"] == 0.0
        assert t["runs"] >= 5 and t["iqr_us"] >= 0
        assert t["verified_calls"] >= min(t["runs"], 20) and t["verified_calls"] >= 0.1 * t["runs"]
        floors = r["floors"]
        assert all(floors[k] > 0 for k in ("launch_us", "read_us", "copy_us"))  # floors per shape
        assert floors["hidden_us"] is None  # a CPU call's host work is all on the clock
        assert_rounds_explain_speedup(r, rounds=5)


def assert_rounds_explain_speedup(r: dict, rounds: int) -> None:
    """The record's speedup and time over a copy are the 10th percentiles of every call of each side, pooled over
    its rounds, from the raw times kept beside the records; each round's medians are in the record, and the launch
    floor is the empty launch timed in those rounds."""
    rs = r["diagnostics"]["rounds"]
    assert len(rs) == rounds == r["timing"]["speedup_rounds"]
    assert all(x["launch_us"] > 0 and x["reference_us"] > 0 and x["copy_us"] > 0 for x in rs)
    raw = json.loads(Path(r["diagnostics"]["times_file"]).read_text())
    assert len(raw) == len(rs)
    for x, calls in zip(rs, raw):
        assert x["time_us"] == pytest.approx(statistics.median(calls["candidate"]), abs=1e-3)
        assert x["launch_us"] == pytest.approx(statistics.median(calls["launch"]), abs=1e-3)

    def every(side: str) -> list[float]:
        return [v for c in raw for v in c[side]]

    def q10(side: str) -> float:
        return statistics.quantiles(every(side), n=10, method="inclusive")[0]

    assert r["speedup"] == pytest.approx(q10("reference") / q10("candidate"), rel=1e-4)
    assert r["timing"]["copy_ratio"] == pytest.approx(q10("candidate") / q10("copy"), rel=1e-4)
    logs = [math.log(statistics.quantiles(c["reference"], n=10, method="inclusive")[0]
                     / statistics.quantiles(c["candidate"], n=10, method="inclusive")[0]) for c in raw]
    half = T975[len(logs) - 2] * statistics.stdev(logs) / math.sqrt(len(logs))  # the rounds' t interval
    assert r["speedup_ci"] == pytest.approx([r["speedup"] * math.exp(-half), r["speedup"] * math.exp(half)], rel=1e-3)
    assert r["timing"]["ref_time_us"] == pytest.approx(statistics.median(every("reference")), abs=1e-3)
    assert r["floors"]["launch_us"] == pytest.approx(statistics.median(every("launch")), abs=1e-3)
    assert r["floors"]["copy_us"] == pytest.approx(statistics.median(every("copy")), abs=1e-3)


def test_one_round_gives_the_plain_ratios(run_eval, tmp_path):
    text = (CONFIGS / "cpu_tiny.yaml").read_text().replace("  budget_s: 0.2\n", "  budget_s: 0.2\n  rounds: 1\n")
    config = CONFIGS / f"_one_round_{tmp_path.name}.yaml"  # beside cpu_tiny.yaml: its paths are relative
    config.write_text(text)
    try:
        res = run_eval(config, "--device", "cpu", "--shapes", "tiny")
    finally:
        config.unlink()
    assert res.rc == 0, res.stderr
    r = res.by("cpu_cpp", "tiny")
    t = r["timing"]
    assert r["status"] == "correct" and t["speedup_rounds"] is None and r["diagnostics"] is None
    assert r["speedup"] == pytest.approx(t["ref_time_us"] / t["time_us"], rel=1e-4)
    lo, hi = r["speedup_ci"]  # from the two medians' standard errors where no rounds exist
    assert lo < r["speedup"] < hi
    assert t["copy_ratio"] == pytest.approx(t["time_us"] / r["floors"]["copy_us"], rel=1e-4)


def test_output_files(bundled):
    rows = list(csv.DictReader(open(bundled.out / "summary.csv")))
    assert [row["status"] for row in rows] == ["correct", "correct"]
    md = (bundled.out / "summary.md").read_text()
    assert "| cpu_cpp | tiny | correct |" in md and "median of 'runs' timed calls" in md
    run = bundled.run_json
    assert run["seeds"]["master"] == 1234 and run["seeds"]["given"] is True
    assert len(run["seeds"]["shapes"]["tiny"]["check"]) == 3
    assert run["host"]["torch"] and run["host"]["git_commit"]
    ref = run["reference_timings"]["0"]["tiny"]
    assert ref["seconds"] > 0 and ref["floor_copy"]["runs"] > 0 and ref["eager"]["median_us"] > 0
    assert run["config"]["timing"]["budget_s"] == 0.2 and run["complete"] is True
    assert ref["empty_gap_us"] is not None
    assert "profile" not in run
    if not run["builds"]["cpu_cpp"]["cached"]:  # a build found in the cache compiles nothing, so logs nothing
        assert (bundled.out / "logs" / "cpu_cpp.build.log").exists()
    summary = json.loads((bundled.out / "summary.json").read_text())
    ranked = any(r["status"] == "correct" and "unstable" not in r["flags"] for r in bundled.records)
    assert summary["fast_p"]["0"] == (1.0 if ranked else 0.0)  # the geomean of the ranked shapes' lower bounds


def test_same_seed_reproduces_the_seeds_and_verdicts(run_eval, bundled):
    again = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--seed", "1234")
    same = ("master", "given", "shapes")
    assert {k: again.run_json["seeds"][k] for k in same} == {k: bundled.run_json["seeds"][k] for k in same}
    assert [r["status"] for r in again.records] == [r["status"] for r in bundled.records]


def test_cpu_builds_compile_with_the_caches_precompiled_header(bundled):
    """C++ builds that compile wait for the header, so every compile of this run used it; a run whose builds
    are all in the cache makes none."""
    if bundled.run_json["pch"]["status"] == "none":
        pytest.skip("torch builds no precompiled header with this compiler")
    builds = bundled.run_json["builds"].values()
    if all(b["memo"] for b in builds):
        assert bundled.run_json["pch"]["status"] == "not started", bundled.run_json["pch"]
    else:
        assert bundled.run_json["pch"]["status"] == "ready", bundled.run_json["pch"]
        assert all(b["pch"] or b["cached"] for b in builds)


def test_unchanged_candidate_reuses_its_build(run_eval, bundled):
    again = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu")
    build = again.run_json["builds"]["cpu_cpp"]
    assert build["status"] == "built" and build["cached"] is True and build["memo"] is True
    assert not (again.out / "logs" / "cpu_cpp.build.log").exists()  # no build process ran
    assert again.run_json["pch"]["status"] == "not started"  # nor the header's: nothing compiles


def test_a_runs_workers_are_forks_of_one_server_and_the_profile_says_where_time_went(run_eval):
    """The reference worker, the candidate's worker and its build (unless the cache's record of earlier builds made
    it) are forked from the judge's fork server, not started afresh; --profile adds each stage's seconds."""
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny", "--profile")
    assert res.rc == 0, res.stderr
    r = res.by("python_cpu")
    assert r["status"] == "correct"
    server = res.run_json["fork_server"]
    builds = sum(not b["memo"] for b in res.run_json["builds"].values())
    assert server["status"] == "ready" and server["forks"] == 2 + builds and server["declined"] == 0, server
    profile = res.run_json["profile"]
    assert profile["spares"] and all(x["forked"] and x["ready_s"] >= x["started_s"] >= 0 for x in profile["spares"])
    line = profile["timeline_s"]
    order = ["runner_started", "builds_started", "references_started", "lane0_reference_done",
             "lane0_first_candidate", "evaluations_done", "run_json"]
    assert [line[k] for k in order] == sorted(line[k] for k in order) and line["runner_started"] > 0
    stages, spent = r["profile"]["stage_seconds"], r["profile"]["worker_seconds"]
    assert {"worker_wait", "worker_load", "setup", "checks", "timing", "verify", "judge_clock"} <= set(stages)
    assert sum(stages.values()) <= r["profile"]["eval_seconds"] + 1e-3
    assert 0 < spent["check"] <= stages["checks"] + stages["verify"] + 1e-3  # the post-timing check is in verify
    assert 0 < spent["time"] <= stages["timing"] + 1e-3


def test_build_only_and_isolated_runs_start_no_fork_server(run_eval):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--build-only")
    assert res.rc == 0, res.stderr
    assert res.records == [] and res.run_json["fork_server"] is None
    assert res.run_json["builds"]["python_cpu"]["status"] in ("built", "deferred")


def test_fresh_seeds_differ_between_runs(run_eval):
    a = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny")
    b = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny")
    assert a.run_json["seeds"]["master"] != b.run_json["seeds"]["master"]
    assert a.run_json["seeds"]["given"] is False


def test_resume_skips_finished_records(run_eval, tmp_path):
    out = tmp_path / "run"
    first = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny", out=out)
    assert len(first.records) == 1
    line = (out / "results.jsonl").read_text()
    second = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--resume", str(out), out=out)
    assert second.rc == 0, second.stderr
    assert [(r["shape"]) for r in second.records] == ["tiny", "padded"]
    assert (out / "results.jsonl").read_text().startswith(line)
    assert second.run_json["seeds"]["master"] == first.run_json["seeds"]["master"]


def test_a_run_into_a_used_out_says_which_records_it_keeps(run_eval, tmp_path):
    """Without --resume, records already in --out are kept and not evaluated again, and the run says so on its
    first lines and in run.json: a repeated command never passes old records off as new in silence."""
    out = tmp_path / "run"
    first = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny", out=out)
    assert first.rc == 0 and len(first.records) == 1, first.stderr
    assert not [n for n in first.run_json["notes"] if n.startswith("kept")]
    second = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny", out=out)
    assert second.rc == 0, second.stderr
    assert second.records == first.records
    assert "kept 1 record(s)" in second.stdout
    assert [n for n in second.run_json["notes"] if n.startswith("kept 1 record(s)")]


def test_resume_alone_repeats_the_command_and_keeps_earlier_logs(run_eval, tmp_path):
    """An interrupted run (here: its last record removed) continues from --resume DIR alone, with its own
    candidates, shapes and seeds; what its earlier pass wrote (records, logs) is neither flagged nor moved."""
    out = tmp_path / "run"
    raises = str(CANDIDATES / "broken" / "raises.py")
    first = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, raises, "--shapes", "tiny",
                     out=out)
    assert first.rc == 0 and len(first.records) == 2, first.stderr
    kept = [r for r in first.records if r["solution"] == "python_cpu"]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    second = run_eval(None, "--resume", str(out), out=out)
    assert second.rc == 0, second.stderr
    assert [(r["solution"], r["shape"]) for r in second.records] == [("python_cpu", "tiny"), ("raises", "tiny")]
    assert second.records[0] == kept[0]
    assert second.by("raises")["status"] == "runtime_error" and second.by("raises")["flags"] == []
    assert not (out / "quarantine").exists()
    assert second.run_json["seeds"] == first.run_json["seeds"]


def test_batch_of_folders_and_globs_with_parallel_builds(run_eval):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--jobs", "2", "--shapes", "tiny", "--solution",
                   str(REPO / "solutions" / "pack_tokens" / "cpu_*.py"), str(CANDIDATES / "honest"))
    assert res.rc == 0, res.stderr
    assert {r["solution"] for r in res.records} == {"cpu_cpp", "cpp_loop", "jit_caches", "python_cpu", "temp_files"}
    assert all(r["status"] == "correct" for r in res.records), res.records
    assert res.run_json["build_jobs"] == 2
    assert "fast_p over solutions" in (res.out / "summary.md").read_text()


def test_two_lanes_feed_from_one_queue(run_eval):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--gpus", "2", "--shapes", "tiny", "--solution",
                   PY, str(CANDIDATES / "broken" / "raises.py"), str(CANDIDATES / "cheats" / "mutate_input.py"))
    assert res.rc == 0, res.stderr
    assert len(res.records) == 3
    assert {r["lane"] for r in res.records} <= {0, 1}
    assert res.by("python_cpu")["status"] == "correct"
    assert res.by("raises")["status"] == "runtime_error"
    assert res.run_json["lanes"] == ["cpu", "cpu"]


def test_terminal_table_fits_120_columns_with_one_footnote(bundled):
    """The terminal shows what ranks (status, speedup with its interval, vs compile, time, flags); summary.md
    holds the rest."""
    lines = bundled.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, "\n".join(line for line in lines if len(line) > 120)
    header = next(line for line in lines if "solution" in line and "status" in line)
    for col in ("shape", "speedup [95% CI]", "vs compile", "time_us", "flags"):
        assert col in header
    assert sum("summary.md" in line for line in lines) == 1
    sandbox = json.loads((bundled.out / "run.json").read_text())["write_sandbox"]
    first = " ".join(bundled.stdout.split("\n\n")[0].split())  # the run's first line, as rich wrapped it
    assert "write sandbox: " + ("Landlock ABI" if sandbox.startswith("landlock") else "none") in first
