"""How many distinct keys n records hold, under a Zipf key distribution.

Records draw keys independently, key of rank k with probability p_k proportional to
k^-skew (skew 0: uniform). A deduplicated file that covers n ingested records holds
one record per distinct key among them: E[distinct(n)] = sum_k 1 - (1 - p_k)^n. Ranks
are grouped into buckets of near-equal probability (exact for the first ranks,
geometric after), which keeps an evaluation to a few hundred terms.
"""

from __future__ import annotations

import math
from functools import lru_cache

_EXACT_RANKS = 64
_BUCKET_GROWTH = 1.05


class KeyModel:
    def __init__(self, keys: int, skew: float) -> None:
        if keys < 1:
            raise ValueError(f"the key space needs at least one key, got {keys}")
        if skew < 0:
            raise ValueError(f"key skew must be >= 0, got {skew}")
        self.keys = keys
        self.skew = skew
        bounds = list(range(1, min(keys, _EXACT_RANKS) + 1))
        while bounds[-1] < keys:
            bounds.append(min(keys, max(bounds[-1] + 1, int(bounds[-1] * _BUCKET_GROWTH))))
        weights: list[tuple[int, float]] = []
        lo = 1
        for hi in bounds:
            mass = sum(k**-skew for k in range(lo, hi + 1)) if skew else float(hi - lo + 1)
            weights.append((hi - lo + 1, mass))
            lo = hi + 1
        total = sum(m for _, m in weights)
        self._buckets = tuple(
            (count, _log_miss(mass / total / count)) for count, mass in weights if count
        )

    @lru_cache(maxsize=1 << 16)  # noqa: B019 (one model per simulation, kept for its life)
    def distinct(self, records: int) -> int:
        if records <= 0:
            return 0
        expected = sum(
            count * -math.expm1(records * log_miss) if log_miss > -math.inf else count
            for count, log_miss in self._buckets
        )
        return min(records, max(1, round(expected)))


def _log_miss(p: float) -> float:
    """log(1 - p): the log of the chance that a record misses a key drawn with chance
    ``p``; -inf where the key takes every record (a skew so steep that the first key's
    share rounds to 1)."""
    return math.log1p(-p) if p < 1.0 else -math.inf
