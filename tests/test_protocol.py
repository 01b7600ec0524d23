"""The fingerprints a worker sends, as the judge decodes them: what the worker's timed feed writes decodes to
the same fingerprints, and a reply that is not the protocol's fails its call instead of reaching the judge's
comparisons."""

import json

import pytest
import torch
from test_timed_feed import fake_worker

from harness.judge.compare import fingerprint_matches
from harness.protocol import Fingerprints, ProtocolError
from harness.settings import Tolerance
from harness.worker.feed import TimedFeed
from harness.worker.fingerprint import Fingerprinter

EXACT = Tolerance(0.0, 0.0)


def test_the_timed_feeds_fingerprints_decode_to_what_it_computed_and_encode_back_to_its_wire_form():
    w = fake_worker([])
    feed = TimedFeed(w, 5, projection=True)
    kept = {}
    for i in range(4):
        args, _ = feed.take(i)
        kept[i] = (args[0] * 3, args[0].clone())
        feed.hold(i, args, args[0] * 3)
    feed.settle()
    for i, (out, inp) in kept.items():
        wire = json.loads(json.dumps(list(feed.calls[i])))
        fp = Fingerprints.decode(wire)
        assert fp.outputs == (w.fp.exact(out).item(),) and fp.inputs == (w.fp.exact(inp).item(),)
        assert len(fp.projections) == 1 and fp.encode() == wire


@pytest.mark.parametrize("raw", [
    None, "overwritten", [[1], None], [[1], None, [2], 3], [["1"], None, [2]], [[True], None, [2]],
    [[1], None, 2], [[1, 2], [[0.5]], [3]], [[1], [[]], [2]], [[1], [["x"]], [2]], [[1], [[0.5], [0.5]], [2]],
])
def test_a_reply_that_is_not_the_protocols_is_a_protocol_error_and_fails_its_call(raw):
    with pytest.raises(ProtocolError):
        Fingerprints.decode(raw)
    assert Fingerprints.read(raw) is None
    f = Fingerprinter(3, "cpu")
    ref = [[f.exact(torch.ones(4)).item()], None, [1]]
    assert not fingerprint_matches(ref, raw, [EXACT])


def test_matching_fingerprints_match_in_either_form():
    f = Fingerprinter(3, "cpu")
    x = torch.arange(8.0)
    wire = [[f.exact(x).item()], None, [7]]
    assert fingerprint_matches(wire, Fingerprints.decode(json.loads(json.dumps(wire))), [EXACT])
    assert not fingerprint_matches(wire, [[f.exact(x + 1).item()], None, [7]], [EXACT])
