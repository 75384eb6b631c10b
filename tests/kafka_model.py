"""An independent model of Kafka compaction semantics (docs/ARCHITECTURE.md §4), row by row in plain
Python, for checking the worker. It knows nothing of windows, hashes or Arrow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from compactor.fileformat import Record


@dataclass(frozen=True)
class TopicRules:
    compacted: bool = True
    strategy: str = "offset"
    header: str | None = None
    min_lag_ms: int = 0
    retention_ms: int | None = None
    """Set for delete and compact,delete."""
    delete_retention_ms: int = 86_400_000


def header_value(r: Record, name: str) -> int | None:
    value = None
    for k, v in r.headers:
        if k == name and v is not None and len(v) == 8:
            value = int.from_bytes(v, "big", signed=True)
    return value


def rank(r: Record, rules: TopicRules) -> tuple[int, ...]:
    """Larger wins (KIP-280)."""
    if rules.strategy == "timestamp":
        return (r.timestamp, r.offset)
    if rules.strategy == "header":
        assert rules.header is not None
        v = header_value(r, rules.header)
        return (0, 0, r.offset) if v is None else (1, v, r.offset)
    return (r.offset,)


def eligible(r: Record, rules: TopicRules, now_ms: int) -> bool:
    if r.key is None:
        return False
    return rules.min_lag_ms == 0 or r.timestamp <= now_ms - rules.min_lag_ms


def compact(
    records: Sequence[Record],
    rules: TopicRules,
    *,
    deduplicate: bool,
    now_ms: int,
    includes_oldest: bool,
    includes_newest: bool,
) -> list[Record]:
    """One partition's records (offset order) after a compaction with an unbounded buffer.

    A tombstone past its horizon may go only if the inputs hold every record it outranks:
    the partition's oldest data under the offset strategy, all of it under the others;
    one that may go but stays (it outranks a record too young to compact) gets a new
    horizon. Retention removes records from the partition's start (as Kafka deletes its
    oldest segments), so only when the inputs hold the partition's oldest data."""
    if deduplicate and rules.compacted:
        kept = _deduplicated(records, rules, now_ms, includes_oldest, includes_newest)
    else:
        kept = list(records)
    if rules.retention_ms is not None and includes_oldest:
        cutoff = now_ms - rules.retention_ms
        while kept and kept[0].timestamp < cutoff:
            kept.pop(0)
    return kept


def _deduplicated(
    records: Sequence[Record],
    rules: TopicRules,
    now_ms: int,
    includes_oldest: bool,
    includes_newest: bool,
) -> list[Record]:
    best: dict[bytes, Record] = {}
    for r in records:
        if eligible(r, rules, now_ms):
            assert r.key is not None
            current = best.get(r.key)
            if current is None or rank(r, rules) > rank(current, rules):
                best[r.key] = r
    winners = {r.offset for r in best.values()}
    holds_outranked = includes_oldest and (rules.strategy == "offset" or includes_newest)
    young = [r for r in records if r.key is not None and not eligible(r, rules, now_ms)]

    def resurfaces_young(t: Record) -> bool:
        return any(y.key == t.key and rank(t, rules) > rank(y, rules) for y in young)

    new_horizon = now_ms + max(1, rules.delete_retention_ms)
    out = []
    for r in records:
        if eligible(r, rules, now_ms) and r.offset not in winners:
            continue
        past = r.value is None and r.delete_horizon is not None and r.delete_horizon <= now_ms
        if eligible(r, rules, now_ms) and r.value is None:
            if holds_outranked and past and not resurfaces_young(r):
                continue
            if r.delete_horizon is None:
                r = replace(r, delete_horizon=new_horizon)
        if holds_outranked and past:
            r = replace(r, delete_horizon=new_horizon)
        out.append(r)
    return out


def view(records: Sequence[Record], rules: TopicRules) -> dict[bytes, bytes]:
    """The materialized view: each key's winning value under the strategy; a winning
    tombstone deletes the key. Null keys are not part of it."""
    best: dict[bytes, Record] = {}
    for r in records:
        if r.key is not None:
            current = best.get(r.key)
            if current is None or rank(r, rules) > rank(current, rules):
                best[r.key] = r
    return {k: r.value for k, r in best.items() if r.value is not None}
