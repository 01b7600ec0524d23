"""The bundled problem's input draw: every set keeps the pack-tokens contract (each token lands on its own
row inside its expert's segment, slots 0..count-1, padding to pad_to), draws are repeatable by seed, and
they vary as the problem says (empty experts, random slot order). On the GPU: tests/gpu/test_problem_draw.py."""

import pytest
import torch

from conftest import REPO
from harness.errors import UsageError
from harness.problem import (
    DrawNotRepeatable,
    ProblemSource,
    load_namespace,
    make_inputs,
    read_problem,
    seed_everything,
    validate,
)
from harness.settings import Shape

NS = load_namespace(read_problem(REPO / "problems" / "pack_tokens.py"))
SHAPES = [
    dict(num_tokens=2048, hidden_dim=4, num_experts=16, dtype="float32", pad_to=None),
    dict(num_tokens=1999, hidden_dim=3, num_experts=16, dtype="float32", pad_to=8),
    dict(num_tokens=600, hidden_dim=2, num_experts=256, dtype="bfloat16", pad_to=16),
    dict(num_tokens=1, hidden_dim=5, num_experts=4, dtype="float16", pad_to=None),
    dict(num_tokens=0, hidden_dim=5, num_experts=4, dtype="float32", pad_to=4),
    dict(num_tokens=7, hidden_dim=1, num_experts=1, dtype="float32", pad_to=None),
]


def assert_contract(params: dict, inputs: list) -> None:
    x, expert, slot, off = inputs
    n, e, pad = params["num_tokens"], params["num_experts"], params["pad_to"]
    assert x.shape == (n, params["hidden_dim"]) and x.dtype == getattr(torch, params["dtype"])
    for t, size in ((expert, n), (slot, n), (off, e + 1)):
        assert t.dtype == torch.int32 and t.dim() == 1 and t.numel() == size and t.is_contiguous()
    expert, slot, off = expert.cpu().long(), slot.cpu().long(), off.cpu().long()
    assert off[0] == 0 and bool((off.diff() >= 0).all())
    assert bool(((expert >= 0) & (expert < e)).all())
    counts = torch.bincount(expert, minlength=e)
    seg = off.diff()
    if pad:
        assert bool((seg % pad == 0).all()) and torch.equal(seg, (counts + pad - 1) // pad * pad)
    else:
        assert torch.equal(seg, counts)
    for k in range(e):
        assert torch.equal(slot[expert == k].sort().values, torch.arange(int(counts[k])))
    dest = off[expert] + slot
    assert dest.unique().numel() == n and bool((dest < off[-1]).all())


@pytest.mark.parametrize("params", SHAPES, ids=lambda p: f"{p['num_tokens']}x{p['num_experts']}")
def test_every_draw_keeps_the_contract(params):
    for seed in (1, 2, 3):
        assert_contract(params, make_inputs(NS, params, seed, "cpu"))


def test_draws_repeat_by_seed_and_differ_between_seeds():
    params = SHAPES[1]
    a, b, c = (make_inputs(NS, params, s, "cpu") for s in (5, 5, 6))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[1], c[1]) and not torch.equal(a[0], c[0])


def test_draws_vary_as_the_problem_says():
    """Over many draws some experts are empty but never all, loads are skewed, and a token's slot is not
    its order among its expert's tokens."""
    params = dict(SHAPES[0], hidden_dim=1)
    empty, skew, in_order = [], [], []
    for seed in range(40):
        _, expert, slot, _ = make_inputs(NS, params, seed, "cpu")
        counts = torch.bincount(expert.long(), minlength=16)
        empty.append(int((counts == 0).sum()))
        skew.append(int(counts.max()) / max(1, int(counts[counts > 0].min())))
        k = int(counts.argmax())
        in_order.append(torch.equal(slot[expert == k].long(), torch.arange(int(counts[k]))))
    assert max(empty) > 0 and max(empty) < 16 and sum(empty) > 20
    assert min(skew) > 2
    assert not any(in_order)


def test_a_get_inputs_that_takes_device_gets_it_and_no_factory_mode():
    """The meta device shows where factories land by default: the device itself under the mode, the CPU
    when get_inputs places its tensors."""
    seen = []

    def places(n, device=None):
        seen.append(torch.get_default_device().type)
        return [torch.ones(n, device=device)]

    def defaults(n):
        seen.append(torch.get_default_device().type)
        return [torch.ones(n)]

    (a,) = make_inputs({"get_inputs": places}, {"n": 3}, 1, "meta")
    (b,) = make_inputs({"get_inputs": defaults}, {"n": 3}, 1, "meta")
    assert seen == ["cpu", "meta"] and a.device.type == b.device.type == "meta"


def test_seeding_is_torch_manual_seed_for_the_draw():
    torch.manual_seed(9)
    want = torch.rand(5)
    torch.manual_seed(1)
    seed_everything(9, "cpu")
    assert torch.equal(torch.rand(5), want)


def test_a_shape_cannot_set_the_device_the_harness_passes():
    src = ProblemSource("p", "p.py", "class Model: pass\ndef get_inputs(n=1, device=None):\n    return []\n")
    with pytest.raises(UsageError, match="shapes.s.device"):
        validate(src, (Shape("s", {"n": 2, "device": "cuda"}),))
    validate(src, (Shape("s", {"n": 2}),))


class _RunningSums(torch.overrides.TorchFunctionMode):
    """Records the dtype of every cumsum a draw takes."""

    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.cumsum, torch.Tensor.cumsum):
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("params", SHAPES[:3], ids=lambda p: f"{p['num_tokens']}x{p['num_experts']}")
def test_draw_takes_no_floating_point_running_sum(params):
    """The judge and the candidate's worker draw a seed apart and compare fingerprints; a floating-point
    cumsum on CUDA adds in an order set by timing, so its last bit (and a token's expert) can differ
    between the two draws, which rejects an honest kernel. Running sums in the draw are over integers."""
    seed_everything(3, "cpu")
    with _RunningSums() as sums:
        NS["get_inputs"](**params, device="cpu")
    assert sums.dtypes and all(not d.is_floating_point for d in sums.dtypes), sums.dtypes


def test_draws_run_in_deterministic_mode_and_the_callers_mode_comes_back():
    """Ops with a deterministic implementation use it in a draw, and ops without one fail the first draw;
    the reference's and candidate's calls run in whatever mode the worker had before."""
    seen = []

    def get_inputs(device=None):
        seen.append((torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled()))
        return [torch.zeros(1, device=device)]

    try:
        for mode, warn_only in ((False, False), (True, True)):
            torch.use_deterministic_algorithms(mode, warn_only=warn_only)
            make_inputs({"get_inputs": get_inputs}, {}, 1, "cpu")
            assert seen[-1] == (True, False)
            assert torch.are_deterministic_algorithms_enabled() is mode
            assert torch.is_deterministic_algorithms_warn_only_enabled() is warn_only
    finally:
        torch.use_deterministic_algorithms(False)


def test_an_op_without_a_deterministic_implementation_fails_the_draw_with_one_line():
    def nondeterministic(device=None):
        from torch._prims_common import alert_not_deterministic

        alert_not_deterministic("cumsum_cuda_kernel")  # what torch raises in this mode for such an op

    def broken(device=None):
        raise RuntimeError("shape mismatch")

    with pytest.raises(DrawNotRepeatable) as info:
        make_inputs({"get_inputs": nondeterministic}, {}, 1, "cpu")
    assert "cumsum_cuda_kernel" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(RuntimeError, match="shape mismatch") as info:
        make_inputs({"get_inputs": broken}, {}, 1, "cpu")
    assert not isinstance(info.value, DrawNotRepeatable)
    assert not torch.are_deterministic_algorithms_enabled()


def test_the_draw_fills_new_tensors_only_when_told_to():
    """Off by default (a third of a draw's kernels on the H200); the reference's second draw turns it on."""
    def unwritten(device=None):
        return [torch.empty(4, device=device)]

    fills = torch.utils.deterministic.fill_uninitialized_memory
    (filled,) = make_inputs({"get_inputs": unwritten}, {}, 1, "cpu", fill_uninitialized=True)
    assert bool(filled.isnan().all())
    seen = []
    make_inputs({"get_inputs": lambda device=None: seen.append(torch.utils.deterministic.fill_uninitialized_memory)
                 or []}, {}, 1, "cpu")
    assert seen == [False]
    assert torch.utils.deterministic.fill_uninitialized_memory is fills
