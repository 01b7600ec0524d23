"""What the judge and its workers agree on beyond JSON commands and replies. A worker that runs candidate code
can send anything: what the judge reads of its replies is decoded here, and a reply that is not what these say
is a ProtocolError, the worker's failure, never the judge's."""

from dataclasses import dataclass

OVERWRITTEN = "overwritten"
"""A timed call whose held output a later call of the same candidate overwrote (a reused output buffer): it has
no fingerprint, and the judge does not sample it."""


class ProtocolError(ValueError):
    """A worker's reply is not what the protocol says."""


def _ints(x, what: str) -> tuple[int, ...]:
    if not isinstance(x, list) or not all(type(v) is int for v in x):
        raise ProtocolError(f"fingerprints: {what}: expected a list of integers")
    return tuple(x)


def _rows(x) -> tuple[tuple[float, ...], ...] | None:
    if x is None:
        return None
    if not isinstance(x, list) or not all(isinstance(r, list) and r and all(
            type(v) in (int, float) for v in r) for r in x):
        raise ProtocolError("fingerprints: projections: expected None or a list of rows of numbers")
    return tuple(tuple(r) for r in x)


@dataclass(frozen=True)
class Fingerprints:
    """One call's fingerprints (worker/fingerprint.py), on the wire as [outputs, projections, inputs]: an exact
    fingerprint per output tensor, a projection row per output (None where none was asked), an exact fingerprint
    per input tensor."""

    outputs: tuple[int, ...]
    projections: tuple[tuple[float, ...], ...] | None
    inputs: tuple[int, ...]

    def encode(self) -> list:
        rows = None if self.projections is None else [list(r) for r in self.projections]
        return [list(self.outputs), rows, list(self.inputs)]

    @classmethod
    def decode(cls, raw) -> "Fingerprints":
        if not isinstance(raw, list) or len(raw) != 3:
            raise ProtocolError("fingerprints: expected [outputs, projections, inputs]")
        fp = cls(_ints(raw[0], "outputs"), _rows(raw[1]), _ints(raw[2], "inputs"))
        if fp.projections is not None and len(fp.projections) != len(fp.outputs):
            raise ProtocolError("fingerprints: a projection row per output expected")
        return fp

    @classmethod
    def read(cls, raw) -> "Fingerprints | None":
        """A candidate's fingerprints, or None where its reply holds none that decode (the call fails)."""
        try:
            return cls.decode(raw)
        except ProtocolError:
            return None
