"""The published bucketing function (docs/contract.md, Bucketing).

bucket(path, client_id) = int.from_bytes(md5(path + client_id)[:8], "big") % 10000;
a client matches percentile p iff bucket < round(p * 100).
"""

from __future__ import annotations

import hashlib

__all__ = ["bucket", "percentile_threshold", "in_percentile", "BUCKETS"]

BUCKETS = 10_000


def bucket(path: str, client_id: str) -> int:
    """The client's bucket in 0..9999 for this config; stable across restarts."""
    digest = hashlib.md5(path.encode() + client_id.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def percentile_threshold(percentile: float) -> int:
    """Buckets below this number are in the cohort of `percentile`."""
    return round(percentile * 100)


def in_percentile(path: str, client_id: str, percentile: float) -> bool:
    return bucket(path, client_id) < percentile_threshold(percentile)
