"""The fast pack-tokens kernel (marker gpu): exact against the reference on adversarial routings, dtypes,
row sizes, padding, single and zero tokens, outputs over 2^31 elements; clear errors outside the contract.

KBH_KERNEL=FILE runs the same tests on a variant of the solution (bench/_common.candidate_variant writes one)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO

pytestmark = pytest.mark.gpu
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KERNEL = os.environ.get("KBH_KERNEL", str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))


@pytest.fixture(scope="module")
def kernel(build_cache):
    """Import the solution through the harness's build cache (a hit when the bundled run built it)."""
    from harness.worker.build_main import import_on_this_gpu

    return import_on_this_gpu(KERNEL, build_cache).ModelNew()


@pytest.fixture(scope="module")
def reference():
    from harness.problem import load_namespace, read_problem

    return load_namespace(read_problem(REPO / "problems" / "pack_tokens.py"))["Model"]()


def routed(num_tokens, hidden, experts, dtype, routing, pad_to=None, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(num_tokens, hidden, device="cuda", generator=g).to(DTYPES[dtype])
    if routing == "one_expert":
        e = torch.full((num_tokens,), experts // 2, device="cuda", dtype=torch.long)
    elif routing == "first_and_last":
        e = torch.where(torch.rand(num_tokens, device="cuda", generator=g) < 0.5, 0, experts - 1).long()
    else:
        e = torch.randint(0, experts, (num_tokens,), device="cuda", generator=g)
    counts = torch.bincount(e, minlength=experts)
    order = torch.randperm(num_tokens, device="cuda", generator=g)
    _, perm = torch.sort(e[order], stable=True)
    grouped = order[perm]
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty(num_tokens, dtype=torch.long, device="cuda")
    slot[grouped] = torch.arange(num_tokens, device="cuda") - starts[e[grouped]]
    seg = (counts + pad_to - 1) // pad_to * pad_to if pad_to else counts
    off = torch.zeros(experts + 1, dtype=torch.long, device="cuda")
    off[1:] = torch.cumsum(seg, 0)
    return [x, e.int(), slot.int(), off.int()]


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8),
                                                                     b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("routing", ["random", "one_expert", "first_and_last"])
@pytest.mark.parametrize("dtype, hidden", [("float32", 4096), ("bfloat16", 7168), ("float16", 4096),
                                           ("float32", 130), ("bfloat16", 7), ("float16", 1)])
@pytest.mark.parametrize("pad_to", [None, 16])
def test_exact_on_routings_dtypes_rows_and_padding(kernel, reference, routing, dtype, hidden, pad_to):
    inputs = routed(3001, hidden, 64, dtype, routing, pad_to, seed=hidden)
    out = kernel(*inputs)
    torch.cuda.synchronize()
    assert same_bytes(out, reference(*inputs))


def test_stale_owner_map_and_output_memory_from_earlier_calls(kernel, reference):
    """Back-to-back calls of one size with different routings: the caching allocator hands each call the
    previous call's owner map and output memory (old token rows where padding now is); the zero pass must
    still zero every row no token of this call lands in, and take no stale owner entry for a write."""
    for i, (routing, pad_to) in enumerate([("random", None), ("one_expert", 16), ("first_and_last", 16),
                                           ("random", 16), ("one_expert", None), ("random", 8)]):
        inputs = routed(2048, 256, 16, "float32", routing, pad_to, seed=100 + i)
        out = kernel(*inputs)
        torch.cuda.synchronize()
        assert same_bytes(out, reference(*inputs)), f"call {i}: {routing}, pad_to {pad_to}"
        del out


@pytest.mark.parametrize("num_tokens, pad_to", [(1, None), (1, 8), (0, None), (0, 4)])
def test_single_and_zero_tokens(kernel, reference, num_tokens, pad_to):
    inputs = routed(num_tokens, 64, 8, "bfloat16", "random", pad_to)
    assert same_bytes(kernel(*inputs), reference(*inputs))


def test_misaligned_input_view_takes_the_narrow_path(kernel, reference):
    x, e, s, off = routed(513, 256, 8, "float32", "random")
    base = torch.randn(513 * 256 + 1, device="cuda")
    shifted = base[1:].view(513, 256)
    shifted.copy_(x)
    assert shifted.data_ptr() % 16 != 0
    assert same_bytes(kernel(shifted, e, s, off), reference(x, e, s, off))


def test_out_of_range_indices_are_skipped_never_written(kernel):
    x, e, s, off = routed(1000, 64, 8, "float32", "random")
    e = e.clone()
    s = s.clone()
    e[:10] = 99
    e[10:20] = -3
    s[20:30] = 1 << 30
    out = kernel(x, e, s, off)
    torch.cuda.synchronize()
    valid = torch.arange(1000, device="cuda") >= 30
    want = torch.zeros_like(out)
    want[(off.long()[e[valid].long()] + s[valid].long())] = x[valid]
    assert same_bytes(out, want)


def test_contract_violations_raise_clear_errors(build_cache):
    probe = subprocess.run([sys.executable, str(Path(__file__).with_name("contract_probe.py")), str(build_cache),
                            KERNEL],
                           capture_output=True, text=True, timeout=600)
    lines = probe.stdout
    assert probe.returncode == 0, f"crashed: {lines[-400:]} {probe.stderr[-2000:]}"
    for case, needle in (("int64 index", "int32"), ("cpu token_hidden", "CUDA tensor"), ("3-D token_hidden", "2-D"),
                         ("cpu slot_idx", "must be on"), ("short expert_idx", "one entry per token"),
                         ("3-D token_hidden, extension called directly", "2-D")):
        assert f"{case}: raised" in lines and needle in lines.split(f"{case}: raised")[1].splitlines()[0], lines


def test_output_over_two_to_the_31_elements(kernel, reference):
    inputs = routed(1 << 19, 4224, 32, "bfloat16", "random", pad_to=8)
    out = kernel(*inputs)
    assert out.numel() > 2**31
    ref = reference(*inputs)
    assert same_bytes(out, ref)
    del out, ref, inputs
    torch.cuda.empty_cache()


def test_runs_on_the_current_stream(kernel, reference):
    inputs = routed(4096, 1024, 16, "float32", "random", pad_to=4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000)
        out = kernel(*inputs)
        snapshot = out.clone()
    side.synchronize()
    assert same_bytes(snapshot, reference(*inputs))


def test_calls_queued_on_two_streams_without_a_sync(kernel, reference):
    """Calls of growing and shrinking sizes queued back to back on two streams, no sync between them: state a
    kernel keeps between calls (an owner map, chunk counters) must follow each stream's own order."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    cases = [(512, None), (4096, 16), (1024, 8), (8192, None), (256, 16), (6000, 4), (3000, None), (9000, 16)]
    queued = []
    for i, (n, pad_to) in enumerate(cases):
        inputs = routed(n, 96 + 32 * i, 32, "float32", ("random", "one_expert")[i % 2], pad_to, seed=200 + i)
        stream = side if i % 2 else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.cuda._sleep(200_000)
            queued.append((inputs, kernel(*inputs)))
    torch.cuda.synchronize()
    for i, (inputs, out) in enumerate(queued):
        assert same_bytes(out, reference(*inputs)), f"call {i}: {cases[i]}"


def test_row_count_over_the_guessed_capacity(kernel, reference):
    """Few tokens, heavy padding: the row count exceeds the output buffer the kernel first guesses, so it
    packs again into an exact one; the second call of that size starts from the larger size."""
    for seed in (1, 2):
        inputs = routed(100, 64, 8, "float32", "random", pad_to=256, seed=seed)
        assert int(inputs[3][-1]) > 100 + 16 * 8
        assert same_bytes(kernel(*inputs), reference(*inputs))
