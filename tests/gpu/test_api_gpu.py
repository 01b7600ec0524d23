"""The Python API on the GPU: an Evaluator called twice in one process gives the same verdicts and leaves no
process behind."""

import pytest

import harness
from conftest import CANDIDATES, CONFIGS, live_children

pytestmark = pytest.mark.gpu


def test_evaluator_on_the_gpu(build_cache):
    before = live_children()
    cand = (CANDIDATES / "gpu" / "vadd_current_stream.py").read_text()
    with harness.Evaluator(device="cuda", cache=str(build_cache), seed=9, shapes=["tiny"]) as ev:
        first = ev.evaluate(CONFIGS / "gpu_vadd.yaml", {"vadd": cand})
        again = ev.evaluate(CONFIGS / "gpu_vadd.yaml", {"vadd": cand})
    assert [(r["solution"], r["status"]) for r in first] == [("vadd", "correct")], first
    assert [r["status"] for r in again] == ["correct"]
    assert live_children() == before
