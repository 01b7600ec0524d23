"""The bundled problem's draw on the GPU (marker gpu): the contract holds and no host sync happens in a draw
(the harness draws once per timed call; the first version synced three times a draw)."""

import pytest
import torch
from test_problem_inputs import NS, SHAPES, assert_contract

from harness.problem import DrawNotRepeatable, make_inputs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("params", SHAPES[:3], ids=lambda p: f"{p['num_tokens']}x{p['num_experts']}")
def test_gpu_draw_keeps_the_contract_without_a_host_sync(params):
    make_inputs(NS, params, 1, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        inputs = make_inputs(NS, params, 2, "cuda")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(t.is_cuda for t in inputs)
    assert_contract(params, inputs)


def test_gpu_draws_of_one_seed_are_identical():
    """The judge and the candidate's worker draw each seed apart; their sets must agree bit for bit. A
    deepseek-sized draw repeated, against the first: a draw whose running sums were floating point differed
    in rare draws, rejecting an honest kernel."""
    params = dict(num_tokens=8192, hidden_dim=8, num_experts=256, dtype="bfloat16", pad_to=16)
    for seed in (11, 12):
        first = make_inputs(NS, params, seed, "cuda")
        for _ in range(100):
            again = make_inputs(NS, params, seed, "cuda")
            assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_a_draw_with_a_floating_point_cumsum_on_the_gpu_is_refused_or_repeats():
    """A draw with a floating-point cumsum, under the harness's deterministic mode: torch either refuses a
    floating-point cumsum on CUDA (one line, on the first draw) or runs a deterministic one. torch 2.11 on
    the H200 ran it over 64 elements without a word; 2^20 elements take many blocks,
    whose partial sums meet in an order set by timing unless torch orders them."""
    def get_inputs(n=1 << 20, device=None):
        return [torch.cumsum(torch.rand(n, device=device), 0)]

    try:
        (first,) = make_inputs({"get_inputs": get_inputs}, {}, 1, "cuda")
    except DrawNotRepeatable as e:
        assert "cumsum" in str(e) and "\n" not in str(e)
    else:
        for _ in range(20):
            (again,) = make_inputs({"get_inputs": get_inputs}, {}, 1, "cuda")
            assert torch.equal(first, again)
    assert not torch.are_deterministic_algorithms_enabled()
