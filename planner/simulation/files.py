"""The simulated worker's model of a live file's one section, and what a job makes of it.

The catalog keeps only summaries; the simulator keeps, per live file, a ``FileModel``
with what a job's outcome depends on. The model (every choice here is a simplification,
stated so that the simulator's figures can be read against it):

- **time**: records are ingested with their write time as timestamp, spread evenly
  over a file's [min_ts, max_ts] (proportional model: record i of n has timestamp
  min_ts + floor(i (max_ts - min_ts) / (n - 1)), whole milliseconds); every other count
  of the file (ingested records covered, bytes, tombstones, deleted keys) is spread the
  same way.
- **retention** (a job holding the partition's oldest data, with a cutoff): every record
  older than the cutoff leaves (timestamps follow offsets, so they are exactly those at
  the partition's start); the output's oldest record is the first at or after the
  cutoff, which, in a file of at least one record per millisecond, is at the cutoff.
- **deduplication** keeps ``KeyModel.distinct(raw)`` records, less the keys whose
  tombstone a job dropped (``deleted``: they stay gone; the model ignores a deleted key
  being written again, which slightly undercounts live records). Each input record
  survives alike (share kept = output / input records), tombstone or not, whatever its
  horizon: a key's newest record is a tombstone with the ingest's tombstone ratio.
- **tombstones** come in cohorts: ``fresh`` ones no deduplicating job has seen (no
  delete horizon) and ``stamped`` ones, counted per horizon. A deduplicating job stamps
  the fresh survivors with its clock + max(1, delete.retention.ms); one holding the
  partition's oldest data also drops every surviving tombstone whose horizon has passed
  (the worker does so in a partition's first key-buffer window; the model has one
  window). Copies keep tombstones and horizons as they are.
- a tombstone takes ``record_bytes`` like any record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from compactor.fileformat import SectionMeta
from compactor.planner.simulation.keys import KeyModel

Cohorts = tuple[tuple[int, int], ...]
"""(delete horizon ms, tombstones), sorted by horizon, counts > 0."""


@dataclass(frozen=True, slots=True)
class FileModel:
    records: int
    size: int
    raw: int
    """Ingested records the file covers (what ``KeyModel`` deduplicates)."""
    first_offset: int
    last_offset: int
    min_ts: int
    max_ts: int
    fresh: int = 0
    """Tombstones without a delete horizon (no deduplicating job has kept them yet)."""
    stamped: Cohorts = ()
    deleted: int = 0
    """Keys among ``raw`` whose tombstone a job dropped."""

    @property
    def tombstones(self) -> int:
        return self.fresh + sum(n for _, n in self.stamped)

    @property
    def min_delete_horizon(self) -> int | None:
        return self.stamped[0][0] if self.stamped else None

    def section(self, topic: str) -> SectionMeta:
        """The file's one section (partition 0), as its manifest would hold it."""
        return SectionMeta(
            topic=topic,
            partition=0,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            record_count=self.records,
            uncompressed_bytes=self.size,
            min_timestamp=self.min_ts,
            max_timestamp=self.max_ts,
            tombstones=self.tombstones,
            position=0,
            length=self.size,
            min_delete_horizon=self.min_delete_horizon,
        )


def _merge_cohorts(groups: Sequence[Cohorts]) -> Cohorts:
    counts: dict[int, int] = {}
    for cohorts in groups:
        for h, n in cohorts:
            counts[h] = counts.get(h, 0) + n
    return tuple(sorted((h, n) for h, n in counts.items() if n > 0))


def _scale_cohorts(cohorts: Cohorts, share: float) -> Cohorts:
    return tuple((h, k) for h, n in cohorts if (k := round(n * share)) > 0)


def expire(m: FileModel, cutoff_ms: int) -> tuple[FileModel | None, int]:
    """``m`` less its records older than ``cutoff_ms`` (None if none is left), and how
    many records left."""
    n = m.records
    if m.min_ts >= cutoff_ms:
        return m, 0
    if m.max_ts < cutoff_ms:
        return None, n
    if n <= 1 or m.max_ts == m.min_ts:
        # Every record at max_ts (>= the cutoff): nothing leaves, the range shrinks.
        return dataclasses.replace(m, min_ts=m.max_ts), 0
    span = m.max_ts - m.min_ts
    gone = min(n - 1, -(-(cutoff_ms - m.min_ts) * (n - 1) // span))
    keep = (n - gone) / n
    first_kept = m.min_ts + gone * span // (n - 1)
    records = n - gone
    offsets = m.last_offset - m.first_offset
    out = dataclasses.replace(
        m,
        records=records,
        size=max(1, round(m.size * keep)),
        raw=max(records, round(m.raw * keep)),
        first_offset=min(m.last_offset, m.first_offset + round(offsets * (1 - keep))),
        min_ts=first_kept,
        fresh=round(m.fresh * keep),
        stamped=_scale_cohorts(m.stamped, keep),
        deleted=round(m.deleted * keep),
    )
    return _clip_tombstones(out), gone


def combine(models: Sequence[FileModel]) -> FileModel:
    """A copy of ``models`` (contiguous, oldest first) into one file: every record kept."""
    return FileModel(
        records=sum(m.records for m in models),
        size=sum(m.size for m in models),
        raw=sum(m.raw for m in models),
        first_offset=min(m.first_offset for m in models),
        last_offset=max(m.last_offset for m in models),
        min_ts=min(m.min_ts for m in models),
        max_ts=max(m.max_ts for m in models),
        fresh=sum(m.fresh for m in models),
        stamped=_merge_cohorts([m.stamped for m in models]),
        deleted=sum(m.deleted for m in models),
    )


@dataclass(frozen=True, slots=True)
class Dedup:
    output: FileModel | None
    tombstones_dropped: int
    tombstones_stamped: int


def deduplicate(
    m: FileModel,
    keys: KeyModel,
    record_bytes: int,
    *,
    now_ms: int,
    horizon_ms: int,
    droppable: bool,
) -> Dedup:
    """A deduplicating job's output from its inputs ``combine``d into ``m``, at the
    worker's clock ``now_ms``: one record per live key, fresh tombstones stamped with
    ``horizon_ms``, and (``droppable``: the inputs hold the partition's oldest data)
    tombstones whose horizon has passed dropped."""
    kept = min(m.records, max(0, keys.distinct(m.raw) - m.deleted))
    share = kept / m.records if m.records else 0.0
    stamped = _scale_cohorts(m.stamped, share)
    dropped = 0
    if droppable:
        dropped = sum(n for h, n in stamped if h <= now_ms)
        stamped = tuple((h, n) for h, n in stamped if h > now_ms)
    kept -= dropped
    if kept <= 0:
        return Dedup(None, dropped, 0)
    fresh = min(kept, round(m.fresh * share))
    if fresh > 0:
        stamped = _merge_cohorts([stamped, ((horizon_ms, fresh),)])
    out = dataclasses.replace(
        m,
        records=kept,
        size=kept * record_bytes,
        fresh=0,
        stamped=stamped,
        deleted=m.deleted + dropped,
    )
    return Dedup(_clip_tombstones(out), dropped, fresh)


def _clip_tombstones(m: FileModel) -> FileModel:
    """Rounding may leave more tombstones than records: the excess goes, fresh ones
    first, then the latest horizons, so that the earliest horizon stays."""
    excess = m.tombstones - m.records
    if excess <= 0:
        return m
    fresh = max(0, m.fresh - excess)
    excess -= m.fresh - fresh
    cohorts = list(m.stamped)
    while excess > 0 and cohorts:
        h, n = cohorts.pop()
        take = min(n, excess)
        if n > take:
            cohorts.append((h, n - take))
        excess -= take
    return dataclasses.replace(m, stamped=tuple(cohorts), fresh=fresh)
