"""Every way a candidate can fail gets its status and a message, and the run goes on (issue: failure paths)."""

import pytest

from conftest import CANDIDATES, CONFIGS, REPO, judged


@pytest.fixture(scope="module")
def failures(run_eval, tmp_path_factory):
    binary = tmp_path_factory.mktemp("binary") / "not_utf8.py"
    binary.write_bytes(bytes(range(128, 256)) * 8)  # a file no one can read as source
    return run_eval(CONFIGS / "cpu_failures.yaml", "--device", "cpu", "--solution", str(CANDIDATES / "broken"),
                    str(binary), str(CANDIDATES / "honest" / "python_cpu.py"))


def test_run_completes_with_every_record(failures):
    assert failures.rc == 0, failures.stderr
    names = {r["solution"] for r in failures.records}
    assert len(names) == 12 and len(failures.records) == 12


@pytest.mark.parametrize("solution, status, needle", [
    ("compile_error", "compile_error", "undeclared_thing"),
    ("import_error", "runtime_error", "missing configuration"),
    ("no_modelnew", "runtime_error", "no ModelNew"),
    ("raises", "runtime_error", "forward: ValueError: this kernel does not support that routing"),
    ("segfault", "runtime_error", "SIGSEGV"),
    ("hangs", "timeout", "forward: no answer within the time limit (timeouts.shape_s: 40 s)"),
    ("slow_build", "timeout", "build exceeded"),
    ("wrong_shape", "incorrect", "shape (65, 32), expected (64, 32)"),
    ("wrong_dtype", "incorrect", "dtype float64, expected float32"),
    ("one_wrong_value", "incorrect", "1 of 2048 elements differ"),
    ("not_utf8", "runtime_error", "not a Python source file (byte 0 is not UTF-8)"),
])
def test_failure_status_and_message(failures, solution, status, needle):
    r = failures.by(solution)
    assert r["status"] == status
    assert needle in r["message"]
    assert r["speedup"] is None


def test_one_wrong_value_reports_error_and_index(failures):
    r = failures.by("one_wrong_value")
    assert r["check"]["max_abs_err"] == pytest.approx(1.0, abs=1e-5)
    assert r["check"]["first_mismatch"] is not None and r["check"]["first_mismatch"][1] == 0
    assert r["check"]["seed"] in failures.run_json["seeds"]["shapes"]["tiny"]["check"]


def test_honest_candidate_after_failures_is_still_correct(failures):
    r = failures.by("python_cpu")
    assert r["status"] == "correct" and judged(r) == [] and r["speedup"] > 0


def test_compiler_output_is_in_the_build_log(failures):
    log = failures.out / "logs" / "compile_error.build.log"
    assert "undeclared_thing" in log.read_text()


def test_strict_exit_code(run_eval):
    res = run_eval(CONFIGS / "cpu_failures.yaml", "--device", "cpu", "--strict", "--solution",
                   str(CANDIDATES / "broken" / "raises.py"))
    assert res.rc == 1
    assert res.records[0]["status"] == "runtime_error"


def _run_with_draw(run_eval, tmp_path, body: str) -> dict:
    """The bundled problem with get_inputs wrapped (`body` gets the original as `_draw`), one honest candidate."""
    problem = (REPO / "problems" / "pack_tokens.py").read_text() + (
        "\n\n_draw = get_inputs\n\n\ndef get_inputs(*args, **kwargs):\n" + body)
    (tmp_path / "problem.py").write_text(problem)
    config = (CONFIGS / "cpu_failures.yaml").read_text().replace("../../problems/pack_tokens.py", "problem.py")
    (tmp_path / "config.yaml").write_text(config)
    res = run_eval(tmp_path / "config.yaml", "--device", "cpu", "--solution",
                   str(CANDIDATES / "honest" / "python_cpu.py"))
    assert res.rc == 0, res.stderr
    (r,) = res.records
    assert r["status"] == "runtime_error" and "reference_error" in r["flags"], r
    assert "not repeatable" in r["message"] and "\n" not in r["message"], r["message"]
    return r


def test_a_draw_that_cannot_repeat_is_the_shapes_reference_error_not_the_candidates(run_eval, tmp_path):
    """A get_inputs that calls an op with no deterministic implementation (torch's own alert, which torch
    raises in deterministic mode for such an op) fails every record of the shape with one line naming the
    op; no candidate is rejected for inputs it did not change."""
    r = _run_with_draw(run_eval, tmp_path, "    from torch._prims_common import alert_not_deterministic\n\n"
                       "    alert_not_deterministic('my_running_sum')\n    return _draw(*args, **kwargs)\n")
    assert "my_running_sum" in r["message"], r["message"]


def test_a_draw_that_returns_memory_it_never_wrote_is_the_shapes_reference_error(run_eval, tmp_path):
    """The reference draws each check seed twice, the second time with new tensors filled: half of this
    draw's first input is never written, so the two draws differ and no candidate is judged on it."""
    r = _run_with_draw(run_eval, tmp_path, "    x, *rest = _draw(*args, **kwargs)\n    half = torch.empty_like(x)\n"
                       "    half[: x.shape[0] // 2] = x[: x.shape[0] // 2]\n    return [half, *rest]\n")
    assert "input tensor 0" in r["message"], r["message"]


def test_inputs_that_cannot_fit_get_one_clear_line_and_the_run_goes_on(run_eval, tmp_path):
    problem = tmp_path / "huge.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                       "        return x * 2\n\ndef get_inputs(rows=1_000_000):\n"
                       "    return [torch.randn(rows, 1_000_000)]\n\ndef get_init_inputs():\n    return []\n")
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    res = run_eval(problem, "--device", "cpu", "--static-checks", "off", "--solution", str(cand))
    assert res.rc == 0, res.stderr
    (r,) = res.records
    assert r["status"] == "runtime_error" and "the inputs do not fit" in r["message"], r
    assert "GiB free on the cpu" in r["message"] and "\n" not in r["message"]


def test_output_comes_through_a_pipe_and_a_log_keeps_at_most_its_cap(run_eval):
    from harness.settings import LOG_CAP_BYTES, STRICT_SANDBOX

    assert "cpu" in STRICT_SANDBOX
    res = run_eval(CONFIGS / "cpu_failures.yaml", "--device", "cpu", "--solution",
                   str(CANDIDATES / "output" / "chatty.py"), str(CANDIDATES / "honest" / "python_cpu.py"))
    assert res.rc == 0, res.stderr[-2000:]
    assert [res.by(s)["status"] for s in ("chatty", "python_cpu")] == ["correct", "correct"]
    log = (res.out / "logs" / "chatty.log").read_bytes()
    assert b"chatty: stdout is pipe:" in log and b"stderr is pipe:" in log
    assert str(res.out).encode() not in log
    assert len(log) < LOG_CAP_BYTES + 1024 and b"more bytes of output dropped" in log
    assert "candidate output through a pipe" in res.run_json["write_sandbox"]
