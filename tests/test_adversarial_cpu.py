"""The adversarial suite on the CPU: one cheat per class, each caught with its flag (docs/integrity.md)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, judged
from harness import sandbox
from harness.settings import JUDGE_RECHECK_PAUSES_S

PROTECTED = [REPO / "problems" / "pack_tokens.py", *sorted((REPO / "harness").rglob("*.py"))]


def digest() -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in PROTECTED}


@pytest.fixture(scope="module")
def adversarial(run_eval):
    before = digest()
    res = run_eval(CONFIGS / "cpu_adversarial.yaml", "--device", "cpu", "--solution", str(CANDIDATES / "cheats"),
                   str(CANDIDATES / "honest" / "python_cpu.py"), str(CANDIDATES / "honest" / "temp_files.py"))
    res.tree_before, res.tree_after = before, digest()
    res.forged_file_left = (REPO / "harness" / "zz_forged.py").exists()
    return res


@pytest.mark.parametrize("cheat, flag", [
    ("replay_pointer", "replayed_output"),          # 1
    ("replay_shape", "replayed_output"),            # 1
    ("reused_buffer", "replayed_output"),           # 1: an earlier call's output overwritten by the next
    ("mark_overwritten", "replayed_output"),        # 2: a call the worker says was overwritten is not exempt
    ("count_switch", "timed_output_mismatch"),      # 2
    ("fast_tail", "timed_output_mismatch"),         # 2: every one of the fastest calls is verified
    ("mutate_input", "input_mutated"),              # 3
    ("patch_timer", "patched_runtime"),             # 5
    ("code_swap", "patched_runtime"),               # 5: the clock's __code__ replaced, its identity kept
    ("subclass_output", "not_plain_tensor"),        # 6
    ("proxy_output", "not_plain_tensor"),           # 6
    ("alias_input", "output_aliases_input"),        # 6
    ("background_thread", "work_outside_timing"),   # 7
    ("rewrite_stack", "timed_output_mismatch"),     # 12: the judge's clock answered without calling the model
    ("rewrite_gc", "timer_mismatch"),               # 12: replies rewritten on their way to the socket
    ("rewrite_globals", "timer_mismatch"),          # 12: the worker's json module swapped
    ("garbled_fingerprints", "timed_output_mismatch"),  # 12: replies' fingerprints that do not decode
    ("gc_fill", "patched_runtime"),                 # 17: a collector callback finishes the call after the clock
    ("audit_fill", "patched_runtime"),              # 17: an audit hook, woken by the harness's hooks going off
    ("signal_fill", "patched_runtime"),             # 17: a timer's handler, run between the harness's steps
    ("profile_once", "patched_runtime"),            # 17: a profile function that acts once and removes itself
    ("guard_off", "patched_runtime"),               # 17: the worker's hooks-off guard rebound on its instance
    ("draw_hook", "patched_runtime"),               # 18: get_inputs wrapped in the worker's problem namespace
    ("seed_hook", "patched_runtime"),               # 18: random.seed replaced, run first by every draw
])
def test_cheat_is_rejected_with_its_flag(adversarial, cheat, flag):
    r = adversarial.by(cheat, "tiny")
    assert r["status"] == "rejected", r
    assert flag in r["flags"]
    assert r["speedup"] is None


@pytest.mark.parametrize("cheat, flags", [
    # 4: stale memory reads as poison where the host allocator hands back a released output, and as whatever
    # the allocator gave (fresh pages are zeros) where it does not: never as the reference's answer
    ("stale_memory", {"uninitialized_output", "mismatch"}),
    ("gc_scan", {"mismatch"}),                         # 4: no reference output exists in its process
    ("fixed_seed", {"mismatch"}),                      # 8: seeds come from os.urandom
])
def test_cheat_is_incorrect_with_its_flag(adversarial, cheat, flags):
    r = adversarial.by(cheat, "tiny")
    assert r["status"] in ("incorrect", "rejected")
    assert flags & set(r["flags"]), r


def test_patched_timer_is_also_caught_by_the_judges_clock(adversarial):
    r = adversarial.by("patch_timer", "tiny")
    assert "timer_mismatch" in r["flags"], json.dumps(r)
    assert "harness.worker.clocks._perf_ns" in r["message"] and "torch.allclose" in r["message"]


@pytest.mark.parametrize("cheat", ["rewrite_gc", "rewrite_globals"])
def test_the_judges_clock_accuses_only_where_windows_seconds_apart_all_contradict(adversarial, cheat):
    """A host busy with work no build pause reaches can hold the judge's round trips up for a while: a forged
    report is rejected on every window the settings name, the last one their pauses later than the first."""
    r = adversarial.by(cheat, "tiny")
    windows = r["diagnostics"]["judge_clock"]["windows"]
    pauses = JUDGE_RECHECK_PAUSES_S["cpu"]
    assert len(windows) == 1 + len(pauses), windows
    assert windows[-1]["at_s"] - windows[0]["at_s"] >= sum(pauses), windows
    best = min(w["us"] - w["noise_us"] for w in windows)
    assert abs(best - (r["timing"]["judge_us"] - r["timing"]["judge_noise_us"])) < 0.5, (windows, r["timing"])


def test_no_cheat_is_ever_correct_where_it_cheats(adversarial):
    for r in adversarial.records:
        if r["solution"] not in ("python_cpu", "temp_files", "alias_input", "escaped_daemon", "read_run"):
            assert r["status"] != "correct", r


@pytest.mark.parametrize("honest", ["python_cpu", "temp_files"])
def test_honest_candidates_in_the_same_batch_are_correct_and_unflagged(adversarial, honest):
    for shape in ("tiny", "padded"):
        r = adversarial.by(honest, shape)
        assert r["status"] == "correct" and judged(r) == [], json.dumps(r)


def test_forged_writes_are_refused_where_the_sandbox_runs_and_undone_where_not(adversarial):
    r = adversarial.by("forge_results", "tiny")
    sandbox = json.loads((adversarial.out / "run.json").read_text())["write_sandbox"]
    if sandbox.startswith("landlock"):
        assert r["status"] == "runtime_error", r
        refused = r["message"].split("refused: ", 1)[1].split("; ")
        for end in ("harness/zz_forged.py", "problems/pack_tokens.py", "/results.jsonl", "/summary.md", "/extra.txt",
                    "times/forged.json"):
            assert any(x.endswith(f"{end}: Permission denied") for x in refused), (end, refused)
        assert any(x.startswith("/proc/1/root/") and x.endswith("results.jsonl: Permission denied") for x in refused)
    else:
        assert r["status"] == "rejected" and "tampered_files" in r["flags"], r


def _named(comm: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                found.append(int(entry))
        except OSError:
            pass
    return found


def test_a_daemon_left_outside_the_worker_never_runs_while_it_is_stopped_nor_outlives_the_run(adversarial):
    r = adversarial.by("escaped_daemon", "tiny")
    assert r["status"] == "correct", r  # its answers are honest; what it left behind is killed
    log = (adversarial.out / "logs" / "escaped_daemon.log").read_text()
    assert "ran while the worker was stopped" not in log
    assert _named("kbh-escaped") == []


def test_nothing_of_the_run_is_readable_while_candidates_run_and_every_seed_is_once_the_run_is_over(adversarial):
    """read_run reads what it finds of its run while it runs (run.json, results.jsonl, other processes' output
    slots) and fails naming it: under Landlock nothing is readable; without it, at least no seed. The commitment
    written at the start is a salted hash of the master seed written at the end."""
    landlock = json.loads((adversarial.out / "run.json").read_text())["write_sandbox"].startswith("landlock")
    for shape in ("tiny", "padded"):
        r = adversarial.by("read_run", shape)
        if landlock:
            assert r["status"] == "correct", r
        else:
            assert "read while running" in r["message"] and "seeds readable" not in r["message"], r
    seeds = json.loads((adversarial.out / "run.json").read_text())["seeds"]
    digest = hashlib.sha256(f"{seeds['salt']}:{seeds['master']}".encode()).hexdigest()
    assert seeds["commitment"] == digest and len(seeds["shapes"]["tiny"]["check"]) == 3


def test_work_left_to_a_hook_for_after_the_clock_stops_is_never_correct(adversarial):
    for shape in ("tiny", "padded"):  # 17: a torch function mode fills the output when the harness touches it
        assert adversarial.by("python_cpu", shape)["status"] == "correct"
        r = adversarial.by("lazy_fill", shape)
        assert r["status"] in ("rejected", "runtime_error", "incorrect"), r


def test_frames_written_into_inherited_descriptors_are_never_read_as_figures(adversarial):
    r = adversarial.by("fd_write", "tiny")
    assert r["status"] != "correct" or r["speedup"] < 10, r
    assert [x["status"] for x in adversarial.records if x["solution"] == "python_cpu"] == ["correct", "correct"]


@pytest.mark.skipif(sandbox.abi_version() < 6, reason="signals are scoped from Landlock ABI 6 on")
def test_a_candidate_cannot_stop_the_judge_or_other_workers_nor_write_its_own_memory(run_eval):
    res = run_eval(CONFIGS / "cpu_adversarial.yaml", "--device", "cpu", "--shapes", "tiny", "--solution",
                   str(CANDIDATES / "signals" / "signal_others.py"), str(CANDIDATES / "signals" / "proc_mem.py"),
                   str(CANDIDATES / "honest" / "python_cpu.py"))
    assert res.rc == 0, res.stderr[-2000:]
    assert res.by("python_cpu", "tiny")["status"] == "correct"
    log = (res.out / "logs" / "signal_others.log").read_text()
    assert "signal_others: refused" in log and "signal_others: stopped" not in log
    # and the allowlist leaves /proc/self/mem unwritable: nothing in the worker is rewritten past its checks
    log = (res.out / "logs" / "proc_mem.log").read_text()
    assert "proc_mem: refused" in log and "proc_mem: wrote" not in log


def test_forgery_leaves_no_trace(adversarial):
    assert adversarial.tree_before == adversarial.tree_after
    assert not adversarial.forged_file_left
    assert not (adversarial.out / "extra.txt").exists()
    assert not (adversarial.out / "times" / "forged.json").exists()
    kept = [r["diagnostics"] for r in adversarial.records if r["diagnostics"]]
    assert kept, "no record kept its raw times"
    for d in kept:  # the judge's raw times read as it wrote them, whatever the cheat overwrote
        assert len(json.loads(Path(d["times_file"]).read_text())) == len(d["rounds"]) > 0
    forged = [r for r in adversarial.records if r["solution"] == "forge_results" and r["status"] == "correct"]
    assert forged == []
    log = (adversarial.out / "logs" / "forge_results.log").read_text()
    assert "100.00x" in log
    assert "100.00x" not in (adversarial.out / "summary.md").read_text()


def test_reply_path_rewrites_are_reported_by_the_runtime_watch_under_the_strict_sandbox(adversarial):
    """Besides the judge's clock: a method of the worker or of its connection shadowed by an instance attribute."""
    for cheat, route in (("rewrite_gc", "worker_conn.send_bytes"), ("rewrite_stack", "worker.send")):
        r = adversarial.by(cheat, "tiny")
        assert "patched_runtime" in r["flags"] and route in r["message"], json.dumps(r)
