"""Output comparison in the judge, and the fingerprint checks of timed calls."""

import math

import pytest
import torch

from harness.judge.compare import (
    Comparison,
    compare_outputs,
    compare_tensor,
    fingerprint_matches,
    read_output_file,
    same_as,
    tensor_from_bytes,
)
from harness.settings import Tolerance
from harness.worker.fingerprint import Fingerprinter
from harness.worker.outputs import as_bytes, tensor_meta

EXACT = Tolerance()


def test_identical_tensors_pass_with_zero_error():
    x = torch.randn(6, 5)
    c = compare_tensor(x, x.clone(), EXACT)
    assert c.ok and c.max_abs_err == 0.0 and c.first_mismatch is None


def test_one_wrong_value_is_found_and_located():
    x = torch.randn(6, 5)
    y = x.clone()
    y[4, 3] += 0.5
    c = compare_tensor(x, y, EXACT)
    assert not c.ok and c.kind == "mismatch"
    assert c.first_mismatch == (4, 3) and c.mismatches == 1
    assert c.max_abs_err == pytest.approx(0.5, rel=1e-6)


def test_nan_and_inf_must_sit_in_the_same_places():
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare_tensor(x, x.clone(), EXACT).ok
    moved = torch.tensor([float("nan"), 1.0, float("inf"), -float("inf")])
    assert compare_tensor(x, moved, EXACT).kind == "uninitialized_output"
    flipped = torch.tensor([1.0, float("nan"), -float("inf"), -float("inf")])
    assert compare_tensor(x, flipped, Tolerance(atol=1e9, rtol=1.0)).kind == "mismatch"


def test_negative_zero_equals_zero_when_exact():
    assert compare_tensor(torch.tensor([0.0]), torch.tensor([-0.0]), EXACT).ok


def test_tolerance_is_atol_plus_rtol_times_reference():
    ref = torch.tensor([100.0, 1.0])
    tol = Tolerance(atol=0.01, rtol=0.01)
    assert compare_tensor(ref, torch.tensor([100.9, 1.019]), tol).ok
    bad = compare_tensor(ref, torch.tensor([100.9, 1.03]), tol)
    assert not bad.ok and bad.first_mismatch == (1,)
    assert bad.max_rel_err == pytest.approx(0.03, rel=1e-4)


def test_relative_error_against_zero_reference_is_infinite():
    c = compare_tensor(torch.zeros(3), torch.tensor([0.0, 1e-3, 0.0]), EXACT)
    assert not c.ok and math.isinf(c.max_rel_err)


def test_shape_dtype_device_and_count_are_checked_first():
    x = torch.zeros(2, 3)
    assert compare_tensor(x, torch.zeros(3, 2), EXACT).kind == "wrong_shape"
    assert compare_tensor(x, torch.zeros(2, 3, dtype=torch.float64), EXACT).kind == "wrong_dtype"
    meta = {"dtype": "float32", "device": "cpu"}
    tol = lambda d: EXACT  # noqa: E731
    assert compare_outputs([(meta, x)], [], tol, "cpu").kind == "wrong_count"
    assert compare_outputs([(meta, x)], [({**meta, "device": "cuda"}, x)], tol, "cpu").kind == "wrong_device"


def test_bf16_and_int_outputs_compare_exactly():
    x = torch.randn(50).bfloat16()
    y = x.clone()
    y[7] = y[7] * 2 + 1
    assert compare_tensor(x, y, EXACT).first_mismatch == (7,)
    i = torch.arange(10, dtype=torch.int32)
    j = i.clone()
    j[3] = -1
    assert compare_tensor(i, j, EXACT).first_mismatch == (3,)


def test_bytes_round_trip_for_every_supported_dtype():
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool):
        x = (torch.randn(3, 5) * 10).to(dtype)
        back = tensor_from_bytes(as_bytes(x).tobytes(), tensor_meta(x))
        assert back.dtype == dtype and torch.equal(back, x)


def test_truncated_bytes_are_refused():
    x = torch.randn(4)
    with pytest.raises(ValueError, match="bytes"):
        tensor_from_bytes(as_bytes(x).tobytes()[:-1], tensor_meta(x))


def test_same_as_spots_a_replayed_answer():
    meta = {"dtype": "float32", "device": "cpu"}
    a, b = torch.randn(4), torch.randn(4)
    tol = lambda d: EXACT  # noqa: E731
    assert same_as([(meta, a)], [(meta, a.clone())], tol)
    assert not same_as([(meta, a)], [(meta, b)], tol)


def _fp(fpr: Fingerprinter, t: torch.Tensor, projection: bool, tol: Tolerance = EXACT) -> list:
    return [[int(fpr.exact(t))], [fpr.projection(t, tol.atol, tol.rtol).tolist()] if projection else None, []]


def test_fingerprint_check_is_exact_without_tolerance():
    f = Fingerprinter(11, "cpu")
    x = torch.randn(300, 7)
    y = x.clone()
    y[299, 6] = torch.nextafter(y[299, 6], torch.tensor(10.0))
    assert fingerprint_matches(_fp(f, x, False), _fp(f, x.clone(), False), [EXACT])
    assert not fingerprint_matches(_fp(f, x, False), _fp(f, y, False), [EXACT])


def test_fingerprint_projection_never_rejects_within_tolerance_and_catches_stale_outputs():
    """Within tolerance always passes; a stale output is caught on almost every call (the judge samples 16)."""
    f = Fingerprinter(12, "cpu")
    tol = Tolerance(atol=1e-3, rtol=1e-3)
    gen = torch.Generator().manual_seed(0)
    caught = trials = 0
    for n in (2000, 300_000):
        for _ in range(10):
            ref = torch.randn(n, 9, generator=gen)
            edge = (tol.atol + tol.rtol * ref.abs()) * 0.999
            for noise in (edge, -edge, (torch.rand(ref.shape, generator=gen) * 2 - 1) * edge):
                assert fingerprint_matches(_fp(f, ref, True, tol), _fp(f, ref + noise, True), [tol])
            stale = torch.randn(n, 9, generator=gen)
            caught += not fingerprint_matches(_fp(f, ref, True, tol), _fp(f, stale, True), [tol])
            trials += 1
    assert caught >= 0.9 * trials


def test_comparison_is_a_value():
    assert Comparison(True, "ok") == Comparison(True, "ok")


def test_an_output_slot_that_is_a_link_is_not_followed(tmp_path):
    """The slot is in a folder the candidate can write: the judge must not read another file through it."""
    real = tmp_path / "real.bin"
    torch.arange(4, dtype=torch.float32).numpy().tofile(real)
    meta = {"file": str(real), "nbytes": 16, "dtype": "float32", "shape": [4], "device": "cpu"}
    assert read_output_file(meta).tolist() == [0.0, 1.0, 2.0, 3.0]
    (tmp_path / "slot.bin").symlink_to(real)
    with pytest.raises(OSError):
        read_output_file(dict(meta, file=str(tmp_path / "slot.bin")))


def _softmax(rows: int, n: int) -> torch.Tensor:
    return torch.softmax(torch.rand(rows, n, dtype=torch.float64), -1)


def test_a_zero_answer_fails_where_every_reference_value_is_within_tolerance_of_zero():
    """Softmax over 100,000 values: every output under 1e-4, so zeros would pass atol 1e-4 alone."""
    tol = Tolerance(atol=1e-4, rtol=1e-4)
    ref64 = _softmax(4, 100_000)
    ref = ref64.float()
    zero = compare_tensor(ref, torch.zeros_like(ref), tol)
    assert not zero.ok and zero.kind == "mismatch" and "own scale" in zero.detail
    honest = compare_tensor(ref, (ref64 * (1 + 1e-3 * torch.randn_like(ref64))).float(), tol)
    assert honest.ok and not honest.weak


def test_a_constant_answer_fails_where_every_reference_value_is_within_tolerance_of_it():
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    ref = 2.0 + 1e-3 * torch.randn(1000, dtype=torch.float64)
    assert not compare_tensor(ref, torch.full_like(ref, float(ref.mean())), tol).ok
    assert compare_tensor(ref, ref + 1e-5 * torch.randn_like(ref), tol).ok
    wide = torch.randn(1000)  # values far apart: the tolerance itself tells a constant from the answer
    c = compare_tensor(wide, wide + 1e-3, tol)
    assert c.ok and not c.weak


def test_a_reference_within_rounding_of_a_constant_cannot_be_checked_on_its_scale_and_says_so():
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    ones = torch.ones(64, dtype=torch.bfloat16)
    c = compare_tensor(ones, ones.clone(), tol)
    assert c.ok and c.weak
    assert compare_outputs([({"dtype": "bfloat16"}, ones)], [({"dtype": "bfloat16", "device": "cpu"}, ones.clone())],
                           lambda _: tol, "cpu").weak
    one_value = torch.tensor([3.7])  # a single value is no constant: the tolerance checks it
    assert not compare_tensor(one_value, one_value.clone(), tol).weak
    assert not compare_tensor(one_value, torch.tensor([0.0]), tol).ok
