"""What the catalog keeps of a file's sections: one summary per topic (CATALOG.md §4).

The planner decides from these summaries alone; a file's sections (one ``SectionMeta``
per partition) live in the file's section manifest (``catalog.manifests``) and are read
only by those who need them: a job for its inputs, ``verify``, ``dump``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from compactor.fileformat import SectionMeta

PartitionRanges = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-adjacent inclusive ranges [first, last] of partition numbers."""


def to_ranges(partitions: Iterable[int]) -> PartitionRanges:
    """The ranges covering exactly ``partitions``."""
    out: list[tuple[int, int]] = []
    for p in sorted(set(partitions)):
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return tuple(out)


def in_ranges(ranges: PartitionRanges, partition: int) -> bool:
    i = bisect.bisect_right(ranges, (partition, 1 << 62)) - 1
    return i >= 0 and ranges[i][0] <= partition <= ranges[i][1]


def union_ranges(a: PartitionRanges, b: PartitionRanges) -> PartitionRanges:
    """The ranges covering the partitions of ``a`` and of ``b``."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(a + b):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return tuple(out)


def ranges_overlap(a: PartitionRanges, b: PartitionRanges) -> bool:
    """Whether a partition is in both ``a`` and ``b``."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def ranges_cover(outer: PartitionRanges, inner: PartitionRanges) -> bool:
    """Whether every partition of ``inner`` is in ``outer``."""
    return union_ranges(outer, inner) == outer


def iter_ranges(ranges: PartitionRanges) -> Iterator[int]:
    for first, last in ranges:
        yield from range(first, last + 1)


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """A file's sections of one topic, summed up.

    Invariant (checked by ``verify``): every field is what ``summarize`` computes from
    the sections of the file's manifest.
    """

    topic: str
    partitions: PartitionRanges
    sections: int
    record_count: int
    tombstones: int
    uncompressed_bytes: int
    max_section_bytes: int
    """The largest section's uncompressed bytes."""
    min_timestamp: int
    max_timestamp: int
    min_section_max_timestamp: int
    """The earliest newest-record timestamp of a section: when retention can first expire
    one of these sections."""
    min_delete_horizon: int | None
    """The earliest delete horizon of a tombstone, None if none has one (or the file was
    written before horizons were recorded)."""

    def holds(self, partition: int) -> bool:
        return in_ranges(self.partitions, partition)


def summarize(sections: Sequence[SectionMeta]) -> tuple[TopicSummary, ...]:
    """One summary per topic of ``sections``, sorted by topic."""
    by_topic: dict[str, list[SectionMeta]] = {}
    for s in sections:
        by_topic.setdefault(s.topic, []).append(s)
    out = []
    for topic in sorted(by_topic):
        group = by_topic[topic]
        horizon: int | None = None
        for s in group:
            horizon = _earliest(horizon, s.min_delete_horizon)
        out.append(
            TopicSummary(
                topic=topic,
                partitions=to_ranges(s.partition for s in group),
                sections=len(group),
                record_count=sum(s.record_count for s in group),
                tombstones=sum(s.tombstones for s in group),
                uncompressed_bytes=sum(s.uncompressed_bytes for s in group),
                max_section_bytes=max(s.uncompressed_bytes for s in group),
                min_timestamp=min(s.min_timestamp for s in group),
                max_timestamp=max(s.max_timestamp for s in group),
                min_section_max_timestamp=min(s.max_timestamp for s in group),
                min_delete_horizon=horizon,
            )
        )
    return tuple(out)
