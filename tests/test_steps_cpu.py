"""The evaluation steps on the CPU: a fault of the harness's own in any step becomes that candidate and shape's
`harness_error` record and the run goes on (exit 3); the GPU-only steps run here as stand-ins of their control
flow (graph capture fails on the CPU and discards the worker, the kernel probe discards its worker), so a step
after them, and the next shape, get a fresh worker."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CANDIDATES, CONFIGS, REPO
from harness.judge.steps import STEPS

pytestmark = pytest.mark.slow
HONEST = CANDIDATES / "honest" / "python_cpu.py"

INJECT = """
import dataclasses, sys
from harness.judge import steps

ON_CPU = {"timing recheck": lambda ce, run: True, "graph": lambda ce, run: True,
          "kernels": lambda ce, run: not ce.probed}


def faulty(step):
    def run(ce, shape_run):
        if ce.cand.name == "fault_" + step.name.replace(" ", "_"):
            raise RuntimeError("injected fault")
        return step.run(ce, shape_run)
    return run


steps.STEPS = tuple(dataclasses.replace(s, run=faulty(s), devices=("cpu", "cuda"), when=ON_CPU.get(s.name, s.when))
                    for s in steps.STEPS)
from harness.judge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_fault_in_any_step_gives_its_record_and_the_gpu_steps_control_flow_holds(build_cache, tmp_path):
    names = ["fault_" + s.name.replace(" ", "_") for s in STEPS]
    folder = tmp_path / "cands"
    folder.mkdir()
    for name in names + ["clean"]:
        (folder / f"{name}.py").write_text(HONEST.read_text())
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", INJECT, str(CONFIGS / "cpu_tiny.yaml"), "--device", "cpu",
                        "--static-checks", "off", "--cache", str(build_cache), "--out", str(out),
                        "--solution", str(folder)], capture_output=True, text=True, cwd=REPO, timeout=1800,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    got = {(r["solution"], r["shape"]): r for r in records}
    assert p.returncode == 3, p.stderr[-2000:]
    assert "harness_error" in p.stderr
    assert set(got) == {(n, s) for n in names + ["clean"] for s in ("tiny", "padded")}, sorted(got)
    for step, name in zip(STEPS, names):
        for shape in ("tiny", "padded"):
            r = got[(name, shape)]
            assert r["status"] == "harness_error", (name, shape, r["status"], r["message"])
            assert step.name in r["message"] and "injected fault" in r["message"], r["message"]
        assert "injected fault" in (out / "logs" / f"{name}.log").read_text()
    for shape in ("tiny", "padded"):
        assert got[("clean", shape)]["status"] == "correct", got[("clean", shape)]["message"]
