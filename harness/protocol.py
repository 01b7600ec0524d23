"""What the judge and its workers agree on beyond JSON commands and replies."""

OVERWRITTEN = "overwritten"
"""A timed call whose held output a later call of the same candidate overwrote (a reused output buffer): it has
no fingerprint, and the judge does not sample it."""
