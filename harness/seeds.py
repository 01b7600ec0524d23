"""Run seeds: one master seed per run (from os.urandom unless given), every other seed derived from it."""

import hashlib
import os

MAX_SEED = 2**63 - 1


def fresh_master_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & MAX_SEED


def derive(master: int, *parts: object) -> int:
    """A seed for one purpose, stable for a master seed and unpredictable without it."""
    text = "/".join([str(master), *map(str, parts)]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") & MAX_SEED
