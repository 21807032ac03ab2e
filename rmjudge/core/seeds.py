"""Seeds derived from the run seed and a key (a pair id, a stage): the same for a pair wherever
it sits in the input, in which shard or batch it is judged, and in training and scoring."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from the run seed and a pair-level key: independent of file position."""
    h = hashlib.blake2b(repr((seed,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") >> 1
