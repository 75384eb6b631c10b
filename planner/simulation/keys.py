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
_SUMMED_RANKS = 256
"""A bucket of more ranks than this has its mass integrated (``_mass``)."""


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
            weights.append((hi - lo + 1, _mass(lo, hi, skew)))
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


def _mass(lo: int, hi: int, skew: float) -> float:
    """The sum of k^-skew over ranks ``lo`` to ``hi``: term by term up to ``_SUMMED_RANKS``
    ranks, else the integral over [lo - 1/2, hi + 1/2] (the midpoint rule, whose error in
    a term is skew(skew + 1) / 24k^2 of it: below 10^-8 where buckets are that wide,
    k > 5,000). Summed term by term, a key space of 10^9 keys took a minute to model."""
    if not skew:
        return float(hi - lo + 1)
    if hi - lo < _SUMMED_RANKS:
        return float(sum(k**-skew for k in range(lo, hi + 1)))
    a, b = lo - 0.5, hi + 0.5
    if skew == 1:
        return math.log(b / a)
    return float((b ** (1 - skew) - a ** (1 - skew)) / (1 - skew))


def _log_miss(p: float) -> float:
    """log(1 - p): the log of the chance that a record misses a key drawn with chance
    ``p``; -inf where the key takes every record (a skew so steep that the first key's
    share rounds to 1)."""
    return math.log1p(-p) if p < 1.0 else -math.inf
