"""A spare's device step warms the draw's kernels on the run's first shape, and a draw that fails there is left
for the reference to report: the spare itself stays usable."""

from pathlib import Path

import pytest

from harness.problem import ProblemSource
from harness.worker.commands import Worker

PROBLEM = Path(__file__).parent / "problems" / "vector_add.py"


@pytest.fixture
def spare():
    import torch

    grad, threads = torch.is_grad_enabled(), torch.get_num_threads()
    w = Worker(conn=None)
    src = ProblemSource(name="vector_add", path=str(PROBLEM), text=PROBLEM.read_text())
    w.cmd_init([], role="candidate", device="cpu", problem_src=vars(src), fp_seed=1, cache_dir="/nonexistent",
               device_now=False)
    yield w
    torch.set_grad_enabled(grad)
    torch.set_num_threads(threads)


def test_the_device_step_draws_and_fingerprints_one_input_set(spare):
    assert spare.cmd_device([], warm_params={"n": 1024}) == {}
    assert spare.fp is not None and spare.clock is not None


def test_a_draw_that_fails_in_the_device_step_leaves_the_spare_usable(spare):
    reply = spare.cmd_device([], warm_params={"no_such_param": 1})
    assert "no_such_param" in reply["warm_error"]
    assert len(spare.inputs_for({"n": 8}, 0)) == 2  # the spare still draws and fingerprints
