import torch

from harness.worker.fingerprint import Fingerprinter


def test_exact_fingerprint_is_stable_across_instances_and_layouts():
    a, b = Fingerprinter(3, "cpu"), Fingerprinter(3, "cpu")
    x = torch.randn(1000, 13)
    assert int(a.exact(x)) == int(b.exact(x.clone()))
    view = x[1:]
    assert int(a.exact(view)) == int(a.exact(view.contiguous()))
    t = torch.randn(13, 1000).t()
    assert int(a.exact(t)) == int(a.exact(t.contiguous()))


def test_exact_fingerprint_sees_any_single_byte_change():
    f = Fingerprinter(4, "cpu")
    x = torch.randint(-1000, 1000, (4099,), dtype=torch.int32)
    base = int(f.exact(x))
    for i in (0, 1, 1023, 1024, 4096, 4098):
        y = x.clone()
        y[i] += 1
        assert int(f.exact(y)) != base
    b = torch.randn(7, 3).bfloat16()
    c = b.clone()
    c[6, 2] = -c[6, 2] if c[6, 2] != 0 else 1
    assert int(f.exact(b)) != int(f.exact(c))


def test_exact_fingerprint_depends_on_seed_and_size():
    x = torch.zeros(2048)
    assert int(Fingerprinter(1, "cpu").exact(torch.ones(64))) != int(Fingerprinter(2, "cpu").exact(torch.ones(64)))
    assert int(Fingerprinter(1, "cpu").exact(x)) != int(Fingerprinter(1, "cpu").exact(x[:2047]))


def test_projection_bounds_are_sums_of_abs_weights():
    f = Fingerprinter(5, "cpu")
    x = torch.randn(3000)
    p, abs_w, abs_wx, s2 = f.projection(x, 0.5, 0.0).tolist()
    assert s2 <= 0.25 * abs_w
    assert abs(p) <= abs_wx + 1e-9
    assert abs_wx <= abs_w * x.abs().max().item() + 1e-9
    nan = x.clone()
    nan[5] = float("nan")
    assert torch.isfinite(f.projection(nan)).all()


def test_exact_many_equals_exact_one_by_one(monkeypatch):
    import harness.worker.fingerprint as fpmod

    f = Fingerprinter(7, "cpu")
    ts = [torch.randn(2048, 128), torch.randint(0, 9, (2048,), dtype=torch.int32), torch.zeros(0),
          torch.randn(17, 3).bfloat16(), torch.arange(4096 * 3 + 5, dtype=torch.uint8),
          torch.arange(200, dtype=torch.uint8)[1:], torch.randn(300, 300).t(), torch.ones(3, dtype=torch.bool),
          torch.randn(2100, 1025), torch.randn(4096)]
    one_by_one = [int(f.exact(t)) for t in ts]
    assert f.exact_many(ts).tolist() == one_by_one
    monkeypatch.setattr(fpmod, "BATCH_BYTES", 5000)  # the large ones take exact() itself, the rest stay batched
    assert f.exact_many(ts).tolist() == one_by_one
    assert f.exact_many([]).tolist() == []
    changed = [t.clone() for t in ts]
    changed[4][-1] += 1
    got = f.exact_many(changed).tolist()
    assert got[4] != one_by_one[4] and got[:4] + got[5:] == one_by_one[:4] + one_by_one[5:]
