"""GPU tests (marker gpu), run on the H200: bundled solutions on every shape, GPU-only cheats, honest
variants, graph timing, graph safety, launch-bound detection, floors, two lanes on one GPU."""

import json
import os
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, RunResult, init_worker, judged, probe_problem

pytestmark = pytest.mark.gpu
GPU = CANDIDATES / "gpu"
BUNDLED = REPO / "configs" / "pack_tokens.yaml"


@pytest.fixture(scope="module")
def bundled(run_eval):
    """A run of the bundled config; KBH_BUNDLED_RUN names one already made (the device session makes one)."""
    done = os.environ.get("KBH_BUNDLED_RUN")
    if done:
        out = Path(done)
        recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        return RunResult(0, "", "", out, recs)
    return run_eval(BUNDLED, "--device", "cuda")


def test_fast_solution_is_correct_on_every_shape(bundled):
    assert bundled.rc == 0, bundled.stderr
    for shape in ("seed", "wide", "mixtral", "deepseek", "odd"):
        r = bundled.by("fast_vec16", shape)
        assert r["status"] == "correct", r
        assert judged(r) == []
        assert r["speedup"] > 1.0 and r["timing"]["bandwidth_gbps"] > 0


def test_original_kernel_correct_on_seed_and_wide_and_failing_with_reasons_elsewhere(bundled):
    for shape in ("seed", "wide"):
        r = bundled.by("original_warp_float4", shape)
        assert r["status"] == "correct" and judged(r) == [], r
        assert "not_graph_safe" in r["flags"]
    for shape in ("mixtral", "deepseek"):
        r = bundled.by("original_warp_float4", shape)
        assert r["status"] == "runtime_error" and "Float" in r["message"], r
    odd = bundled.by("original_warp_float4", "odd")
    assert odd["status"] == "runtime_error" and "misaligned" in odd["message"], odd


def test_reference_timed_eager_and_compiled(bundled):
    timings = bundled.run_json["reference_timings"]["0"]
    for shape in ("seed", "wide", "mixtral", "deepseek", "odd"):
        assert timings[shape]["eager"]["median_us"] > 0
        assert timings[shape]["compiled"] is not None or timings[shape]["compile_error"]
    assert bundled.by("fast_vec16", "wide")["speedup_compile"] > 0


def test_floors_and_flush_size(bundled):
    run = bundled.run_json
    dev = run["devices"]["0"]
    assert dev["flush_bytes"] >= 2 * dev["l2_bytes"] > 0
    assert dev["l2_reset"] == "ok"
    wide = bundled.by("fast_vec16", "wide")
    assert 0 < wide["floors"]["launch_us"] < 200 and wide["floors"]["copy_us"] > 0
    if run["config"]["timing"]["launch_behind_flush"]:
        assert wide["floors"]["hidden_us"] > 20  # launches queue behind the flush (256 MB: 60-100 us)
    assert wide["timing"]["bytes_min"] / wide["floors"]["copy_us"] / 1e3 > 1000  # GB/s of a copy of the same bytes


CHEATS = CANDIDATES / "cheats"


@pytest.fixture(scope="module")
def gpu_cheats(run_eval):
    """The GPU-only cheats, and the CPU suite's cheats whose defences differ on a device (streams, events,
    device memory); every CPU cheat also runs in CI."""
    return run_eval(CONFIGS / "gpu_adversarial.yaml", "--device", "cuda", "--solution",
                    str(GPU / "side_stream.py"), str(GPU / "stale_device_memory.py"),
                    str(GPU / "pointer_cache_device.py"), str(CHEATS / "replay_pointer.py"),
                    str(CHEATS / "count_switch.py"), str(CHEATS / "mutate_input.py"), str(CHEATS / "patch_timer.py"),
                    str(CHEATS / "background_thread.py"), str(CHEATS / "stale_memory.py"))


@pytest.mark.parametrize("cheat, shape, flag, statuses", [
    ("side_stream", "small", "work_outside_timing", ("rejected",)),
    ("stale_device_memory", "padded", "uninitialized_output", ("incorrect", "rejected")),
    ("pointer_cache_device", "small", "replayed_output", ("rejected",)),
    ("replay_pointer", "small", "replayed_output", ("rejected",)),
    ("count_switch", "small", "timed_output_mismatch", ("rejected",)),
    ("mutate_input", "small", "input_mutated", ("rejected",)),
    ("stale_memory", "small", "uninitialized_output", ("incorrect", "rejected")),
    ("patch_timer", "small", "patched_runtime", ("rejected",)),
    ("background_thread", "small", "work_outside_timing", ("rejected",)),
])
def test_gpu_cheats_are_caught(gpu_cheats, cheat, shape, flag, statuses):
    r = gpu_cheats.by(cheat, shape)
    assert r["status"] in statuses, r
    assert flag in r["flags"], r


@pytest.fixture(scope="module")
def rewritten_reports(run_eval):
    """Cheats that rewrite what their own worker reports (class 12), with the reference's own code as the
    honest control, at a launch-bound shape and a large one."""
    return run_eval(BUNDLED, "--device", "cuda", "--shapes", "seed", "wide", "--static-checks", "off", "--solution",
                    str(CHEATS / "rewrite_stack.py"), str(CHEATS / "rewrite_gc.py"), str(CHEATS / "rewrite_globals.py"),
                    str(REPO / "bench" / "reference_candidate.py"))


REWRITE_GC_HOLE = pytest.mark.xfail(strict=False, reason=(
    "docs/integrity.md, what is not defended: on the GPU the judge's clock is uncertain by the two workers' "
    "no-op disagreement (up to 250 us on an H100), so a 3x rewrite of the reports alone can pass"))


@pytest.mark.parametrize("shape", ["seed", "wide"])
@pytest.mark.parametrize("cheat, flag", [("rewrite_stack", "timed_output_mismatch"),
                                         pytest.param("rewrite_gc", "timer_mismatch", marks=REWRITE_GC_HOLE),
                                         ("rewrite_globals", "patched_runtime")])
def test_rewritten_reports_are_caught_at_launch_bound_and_large_shapes(rewritten_reports, cheat, flag, shape):
    r = rewritten_reports.by(cheat, shape)
    assert r["status"] == "rejected" and flag in r["flags"], r


@pytest.mark.parametrize("shape", ["seed", "wide"])
def test_the_references_own_code_beside_the_rewrites_is_correct(rewritten_reports, shape):
    control = rewritten_reports.by("reference_candidate", shape)
    assert control["status"] == "correct" and judged(control) == [], control


def test_stale_device_memory_is_honest_where_no_padding_exists(gpu_cheats):
    r = gpu_cheats.by("stale_device_memory", "small")
    assert r["status"] == "correct" and judged(r) == [], r


@pytest.fixture(scope="module")
def honest_variants(run_eval):
    return run_eval(BUNDLED, "--device", "cuda", "--shapes", "seed", "odd", "--solution", str(GPU / "two_kernels.py"),
                    str(GPU / "cublas_mm.py"), str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))


def test_honest_variants_are_correct_with_no_integrity_flag(honest_variants):
    assert honest_variants.rc == 0, honest_variants.stderr
    for r in honest_variants.records:
        assert r["status"] == "correct", r
        assert judged(r) == [], r


@pytest.fixture(scope="module")
def vadd(run_eval):
    return run_eval(CONFIGS / "gpu_vadd.yaml", "--device", "cuda", "--solution", str(GPU / "vadd_current_stream.py"),
                    str(GPU / "vadd_legacy_stream.py"))


def test_graph_replay_time_for_a_graph_safe_kernel(vadd):
    for shape in ("tiny", "large"):
        r = vadd.by("vadd_current_stream", shape)
        assert r["status"] == "correct" and "not_graph_safe" not in r["flags"], r
        assert r["timing"]["gpu_time_us"] is not None and r["timing"]["gpu_time_us"] > 0
    large = vadd.by("vadd_current_stream", "large")["timing"]
    assert large["gpu_time_us"] <= large["time_us"] * 1.1


def test_legacy_stream_kernel_is_not_graph_safe(vadd):
    for shape in ("tiny", "large"):
        r = vadd.by("vadd_legacy_stream", shape)
        assert r["status"] == "correct", r
        assert "not_graph_safe" in r["flags"] and r["timing"]["gpu_time_us"] is None


def test_launch_bound_flag_on_tiny_not_on_large(vadd):
    assert "launch_bound" in vadd.by("vadd_current_stream", "tiny")["flags"]
    assert "launch_bound" not in vadd.by("vadd_current_stream", "large")["flags"]


def test_two_lanes_share_one_gpu(run_eval):
    res = run_eval(CONFIGS / "gpu_vadd.yaml", "--device", "cuda", "--gpus", "0,0", "--shapes", "large",
                   "--solution", str(GPU / "vadd_current_stream.py"), str(GPU / "vadd_legacy_stream.py"))
    assert res.rc == 0, res.stderr
    assert {r["lane"] for r in res.records} == {0, 1}
    assert all(r["status"] == "correct" for r in res.records), [
        (r["solution"], r["status"], r["flags"], r["message"]) for r in res.records]


def test_the_runs_workers_were_forked_from_a_server_without_the_cuda_driver(bundled):
    """Every worker of the bundled run is a fork of the judge's fork server, which imported torch but never started
    the CUDA driver (a fork after that cannot use the GPU): the records above came from forked workers."""
    server = bundled.run_json["fork_server"]
    assert server["status"] == "ready" and server["cuda_loaded"] is False, server
    builds = bundled.run_json["builds"].values()
    # the reference's worker, one worker for each candidate, and each build not found in the cache's record
    assert server["forks"] >= 1 + len(builds) + sum(not b["memo"] for b in builds) and server["declined"] == 0, server


def test_a_forked_worker_gets_the_gpu_and_runs_cpu_work_on_many_threads(tmp_path):
    """A fork of the server (torch, dynamo and the worker imported, 16 native threads there on the H200 host)
    creates its CUDA context and runs torch's CPU thread pool."""
    from harness.judge import forkserver
    from harness.judge.processes import WorkerHandle

    problem = probe_problem("torch.set_num_threads(8)\na = torch.randn(3000, 3000)\nCHECK = float((a @ a).sum())\n",
                            device="cuda")
    server = forkserver.start(REPO)
    try:
        w = WorkerHandle(repo_root=REPO, env={}, log_path=tmp_path / "w.log", cwd=tmp_path, trusted=True)
        try:
            assert w.forked
            reply = init_worker(w, tmp_path, problem, timeout=120, device="cuda")
            assert reply["ok"], reply
            assert server.summary()["cuda_loaded"] is False
        finally:
            w.kill()
    finally:
        forkserver.stop()
