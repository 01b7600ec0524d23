"""The whole path on the CPU with a real C++ build: config, build, check, time, files, seeds, resume, batches."""

import csv
import json
import statistics
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO

FIELDS = {"solution", "problem", "shape", "status", "speedup", "speedup_compile", "time_us", "ref_time_us",
          "max_abs_err", "flags", "message", "gpu_time_us", "timing", "seed", "bandwidth_gbps"}
PY = str(CANDIDATES / "honest" / "python_cpu.py")


@pytest.fixture(scope="module")
def bundled(run_eval):
    return run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--seed", "1234")


def test_bundled_cpu_solution_is_correct_on_every_shape(bundled):
    assert bundled.rc == 0, bundled.stderr
    assert [(r["solution"], r["shape"]) for r in bundled.records] == [("cpu_cpp", "tiny"), ("cpu_cpp", "padded")]
    for r in bundled.records:
        assert r["status"] == "correct" and r["flags"] == [], json.dumps(r)
        assert r["speedup"] > 0 and r["time_us"] > 0 and r["ref_time_us"] > 0
        assert r["max_abs_err"] == 0.0
        assert r["timing"]["runs"] >= 5 and r["timing"]["iqr_us"] >= 0
        assert FIELDS <= set(r)
        assert r["floor_launch_us"] > 0 and r["floor_read_us"] > 0 and r["floor_copy_us"] > 0  # floors per shape
        assert_rounds_explain_speedup(r, rounds=5)
        phases = r["phase_seconds"]
        assert {"checks", "timing", "verify", "judge_clock"} <= set(phases)
        assert min(v for k, v in phases.items() if k != "worker_wait") > 0  # a ready spare is no wait at all
        assert sum(phases.values()) <= r["eval_seconds"] + 1e-3
        spent = r["worker_seconds"]  # each command's time inside the worker, within the judge's stages that send it
        assert 0 < spent["check"] <= phases["checks"] + phases["verify"] + 1e-3  # the post-timing check is in verify
        assert 0 < spent["time"] <= phases["timing"] + 1e-3
    first = bundled.records[0]["phase_seconds"]
    assert first["worker_load"] > 0 and first["worker_wait"] >= 0  # the worker starts with the first shape
    assert not {"worker_load", "worker_wait"} & set(bundled.records[1]["phase_seconds"])


def assert_rounds_explain_speedup(r: dict, rounds: int) -> None:
    """The record's speedup and time over a copy are the 10th percentiles of every call of each side, pooled
    over its rounds, from the raw times kept beside the records; each round's medians are in the record."""
    rs = r["rounds"]
    assert all(x["launch_us"] > 0 and x["reference_us"] > 0 and x["copy_us"] > 0 for x in rs)
    raw = json.loads(Path(r["times_file"]).read_text())
    assert len(raw) == len(rs)
    launch = [statistics.median(calls["launch"]) for calls in raw]
    # Extra rounds (timing.phase_extra_rounds: 5) only while every round so far was over 1.5x the lane's
    # fastest launch, or fewer than 3 (timing.phase_min_rounds) were within 1.2x the fastest round's; none after.
    lane = r["lane_launch_us"]
    assert lane is not None and lane > 0

    def short(ms: list[float]) -> bool:
        return all(m > 1.5 * lane for m in ms) or sum(m <= 1.2 * min(ms) for m in ms) < min(3, rounds)

    extra = len(rs) - rounds
    assert 0 <= extra <= 5
    assert all(short(launch[:j]) for j in range(rounds, len(rs)))
    assert extra == 5 or not short(launch)
    # Rounds in a slow host phase are left out of the speedup.
    assert [x["kept"] for x in rs] == [m <= 1.2 * min(launch) for m in launch]  # timing.phase_slack: 1.2
    assert r["speedup_rounds"] == sum(x["kept"] for x in rs) >= 1
    for x, calls in zip(rs, raw):
        assert x["time_us"] == pytest.approx(statistics.median(calls["candidate"]), abs=1e-3)
        assert x["launch_us"] == pytest.approx(statistics.median(calls["launch"]), abs=1e-3)
    kept = [calls for x, calls in zip(rs, raw) if x["kept"]]

    def q10(side: str) -> float:
        return statistics.quantiles([v for c in kept for v in c[side]], n=10, method="inclusive")[0]

    assert r["speedup"] == pytest.approx(q10("reference") / q10("candidate"), rel=1e-4)
    assert r["copy_ratio"] == pytest.approx(q10("candidate") / q10("copy"), rel=1e-4)


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
    assert r["status"] == "correct" and r["speedup_rounds"] is None
    assert r["speedup"] == pytest.approx(r["ref_time_us"] / r["time_us"], rel=1e-4)
    assert r["copy_ratio"] == pytest.approx(r["time_us"] / r["floor_copy_us"], rel=1e-4)


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
    assert run["calibration"]["0"]["copy_gbps"] > 0
    line = run["timeline_s"]
    order = ["runner_started", "builds_started", "references_started", "lane0_reference_done",
             "lane0_first_candidate", "evaluations_done", "run_json"]
    assert [line[k] for k in order] == sorted(line[k] for k in order) and line["runner_started"] > 0
    steps = run["lane_seconds"]["0"]
    assert set(steps) == {"records", "writing records", "progress display", "closing workers", "waiting for a build",
                          "other", "closing spare workers"}
    assert steps["records"] == pytest.approx(sum(r["eval_seconds"] for r in bundled.records), rel=0.05, abs=0.05)
    assert sum(steps.values()) <= line["evaluations_done"] - line["lane0_reference_done"] + 0.05
    assert steps["other"] >= -0.01
    spares = run["spares"]  # the worker the record used was a spare: its start is listed
    assert spares and all(x["lane"] == 0 and x["ready_s"] >= x["spawned_s"] >= 0 for x in spares)
    assert any(x.get("init_s", 0) > 0 for x in spares)
    assert (bundled.out / "logs" / "cpu_cpp.build.log").exists()
    summary = json.loads((bundled.out / "summary.json").read_text())
    assert summary["fast_p"]["0"] == 1.0


def test_same_seed_reproduces_the_seeds_and_verdicts(run_eval, bundled):
    again = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--seed", "1234")
    assert again.run_json["seeds"] == bundled.run_json["seeds"]
    assert [r["status"] for r in again.records] == [r["status"] for r in bundled.records]


def test_cpu_builds_compile_with_the_caches_precompiled_header(bundled):
    """C++ builds wait for the header, so every compile of this run used it."""
    if bundled.run_json["pch"]["status"] == "none":
        pytest.skip("torch builds no precompiled header with this compiler")
    assert bundled.run_json["pch"]["status"] == "ready", bundled.run_json["pch"]
    assert all(b["pch"] or b["cached"] for b in bundled.run_json["builds"].values())


def test_unchanged_candidate_reuses_its_build(run_eval, bundled):
    again = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu")
    build = again.run_json["builds"]["cpu_cpp"]
    assert build["status"] == "built" and build["cached"] is True and build["memo"] is True
    assert not (again.out / "logs" / "cpu_cpp.build.log").exists()  # no build process ran


def test_a_runs_workers_are_forks_of_one_server(run_eval):
    """The reference worker, the candidate's worker and its build (unless the cache's record of earlier builds
    made it) are forked from the judge's fork server, not started afresh."""
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny")
    assert res.rc == 0, res.stderr
    assert res.by("python_cpu")["status"] == "correct"
    server = res.run_json["fork_server"]
    builds = sum(not b["memo"] for b in res.run_json["builds"].values())
    assert server["status"] == "ready" and server["forks"] == 2 + builds and server["declined"] == 0, server
    assert res.run_json["spares"][0]["early"] is False


def test_a_spare_started_with_the_judge_evaluates_a_candidate(run_eval):
    """Without a fork server (KBH_FORK_SERVER=0, or --isolate for the reference), workers start with the judge."""
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--solution", PY, "--shapes", "tiny",
                   env={"KBH_EARLY_SPARES": "1", "KBH_FORK_SERVER": "0"})
    assert res.rc == 0, res.stderr
    assert res.by("python_cpu")["status"] == "correct"
    spares = res.run_json["spares"]
    assert spares[0]["early"] is True and spares[0]["init_s"] > 0
    assert spares[0]["spawned_s"] < res.run_json["timeline_s"]["runner_started"]
    assert (res.out / "logs" / "python_cpu.log").exists()


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


def test_batch_of_folders_and_globs_with_parallel_builds(run_eval):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--jobs", "2", "--shapes", "tiny", "--solution",
                   str(REPO / "solutions" / "pack_tokens" / "cpu_*.py"), str(CANDIDATES / "honest"))
    assert res.rc == 0, res.stderr
    assert {r["solution"] for r in res.records} == {"cpu_cpp", "cpp_loop", "python_cpu", "reused_buffer"}
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
