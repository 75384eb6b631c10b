"""What a compaction may do to one partition: a pure function of topic config, job,
clock and catalog position (docs/ARCHITECTURE.md §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from compactor.catalog import TopicConfig


@dataclass(frozen=True, slots=True)
class PartitionPolicy:
    deduplicate: bool
    strategy: str
    """``offset``, ``timestamp`` or ``header`` (KIP-280)."""
    header: str | None
    now_ms: int
    lag_cutoff_ms: int | None
    """Records with a timestamp above this are younger than min.compaction.lag.ms: they are
    kept and never cause an older record to be dropped. None: no record is too young."""
    retention_cutoff_ms: int | None
    """delete and compact,delete: the output's records are dropped from the partition's
    start while their timestamp is below this (docs/ARCHITECTURE.md §4, invariant 1(c)).
    None unless the inputs hold the partition's oldest live data."""
    horizon_ms: int
    """The delete horizon stamped on a tombstone this compaction keeps as a key's winner,
    and on one past its horizon that it may drop yet keeps
    (``TopicConfig.delete_horizon_ms``)."""
    tombstones_droppable: bool
    """The inputs hold every live record a tombstone here could outrank, so one past its
    delete horizon can go without an outranked value resurfacing (docs/ARCHITECTURE.md §4,
    invariant 1(b)). Under the offset strategy that is the partition's oldest live data;
    under the timestamp and header strategies a lower-ranked record may sit in any file, so
    it takes all of it."""

    @classmethod
    def for_partition(
        cls,
        config: TopicConfig,
        *,
        deduplicate: bool,
        now_ms: int,
        includes_oldest: bool,
        includes_newest: bool,
    ) -> PartitionPolicy:
        dedup = deduplicate and config.compacted
        return cls(
            deduplicate=dedup,
            strategy=config.compaction_strategy,
            header=config.compaction_strategy_header,
            now_ms=now_ms,
            lag_cutoff_ms=now_ms - config.min_compaction_lag_ms
            if config.min_compaction_lag_ms > 0
            else None,
            retention_cutoff_ms=config.retention_cutoff_ms(now_ms) if includes_oldest else None,
            horizon_ms=config.delete_horizon_ms(now_ms),
            tombstones_droppable=includes_oldest
            and (config.compaction_strategy == "offset" or includes_newest),
        )


Rank = tuple[int, ...]


def record_rank(strategy: str, offset: int, timestamp: int, header_value: int | None) -> Rank:
    """A record's rank under a KIP-280 strategy; the larger rank wins. ``header_value`` is
    the record's header read as a big-endian signed 64-bit integer, None without it."""
    if strategy == "timestamp":
        return (timestamp, offset)
    if strategy == "header":
        return (0, 0, offset) if header_value is None else (1, header_value, offset)
    return (offset,)


def header_value(headers: tuple[tuple[str, bytes | None], ...], name: str | None) -> int | None:
    """The last header ``name`` as Kafka's LongSerializer wrote it; None if absent or not
    8 bytes long."""
    value = None
    for k, v in headers:
        if k == name and v is not None and len(v) == 8:
            value = int.from_bytes(v, "big", signed=True)
    return value


class Partition(NamedTuple):
    """A partition of a job as phase 1 starts it: its (topic, partition), policy and
    output group. A named tuple, not a frozen dataclass: a job at 10,000 partitions makes
    one per partition in phase 1 and again in phase 2 (a group's message carries its
    partitions, ``Group.__reduce__``), and a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``."""

    topic: str
    partition: int
    policy: PartitionPolicy
    group: str
