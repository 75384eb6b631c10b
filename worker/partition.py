"""Compacts one partition from its two pointers: phase 1 fills the key buffer, phase 2
re-reads the same records and keeps the survivors.

Both pointers walk the partition's records in offset order (sections of the job's
inputs, oldest file first). Phase 1 hashes every eligible key into the key buffer; when
the buffer cannot take the next record, the window closes there: phase 2 catches up to
exactly that record, keeping a record iff it is not eligible (null key, or younger than
min.compaction.lag.ms) or its offset is among the window's winners (the keep-set, so no
key is hashed twice); then the buffer is cleared and both go on. An empty buffer always
takes at least one record, so every window makes progress.

A key may survive in two windows (one copy each); the next compaction removes the older.
A tombstone past its delete horizon is dropped only in the first window of a partition
whose oldest live data is among the inputs (all of its data, under the timestamp and
header strategies): an older value of its key can then only be in this same window,
where the tombstone superseded it. Under the timestamp and header
strategies a later window may also hold a record the tombstone outranks (a higher offset
with a lower timestamp), so there the first window must also be the last. Nor is a
tombstone dropped while a record of its key too young to compact (min.compaction.lag.ms)
ranks below it: that record would resurface.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from fileformat import RECORD_SCHEMA
from worker.policy import PartitionPolicy, Rank, record_rank
from worker.stats import CompactionStats

_HORIZON = RECORD_SCHEMA.get_field_index("delete_horizon")


class KeyIndex(Protocol):
    """The key buffer as phase 1 and phase 2 use it (worker.kernel.KeyBuffer)."""

    def reset(self, strategy: str, base_offset: int) -> None: ...

    def insert(
        self,
        keys: pa.Array,
        offsets: pa.Array,
        values: pa.Array | None = None,
        has_value: pa.Array | None = None,
        eligible: pa.Array | None = None,
        start: int = 0,
        end: int | None = None,
    ) -> int: ...

    def keep_mask(self, offsets: pa.Array) -> pa.Array: ...

    @property
    def utilization(self) -> float: ...


def phase1_fields(policy: PartitionPolicy) -> tuple[str, ...]:
    """The columns phase 1 reads (the others are not even decompressed): offsets and keys,
    timestamps when the strategy or min.compaction.lag.ms needs them, headers under the
    header strategy. Values never: phase 2 decides about tombstones."""
    fields = ["offset", "key"]
    if policy.strategy == "timestamp" or policy.lag_cutoff_ms is not None:
        fields.append("timestamp")
    if policy.strategy == "header":
        fields += ["timestamp", "headers"]
    return tuple(dict.fromkeys(fields))


def _eligible(batch: pa.RecordBatch, policy: PartitionPolicy) -> pa.Array:
    mask = pc.is_valid(batch.column("key"))
    if policy.lag_cutoff_ms is not None:
        mask = pc.and_(mask, pc.less_equal(batch.column("timestamp"), policy.lag_cutoff_ms))
    return mask


def header_values(batch: pa.RecordBatch, name: str) -> tuple[pa.Array, pa.Array]:
    """Each record's last header ``name`` read as a big-endian signed 64-bit integer
    (Kafka's LongSerializer); a record without it, or with a value of another length,
    has none. Returns (values, has_value)."""
    headers = batch.column("headers")
    flat = pc.list_flatten(headers)
    parents = pc.list_parent_indices(headers)
    match = pc.and_(
        pc.equal(flat.field("key"), name), pc.equal(pc.binary_length(flat.field("value")), 8)
    )
    match = pc.fill_null(match, False)
    values: list[int | None] = [None] * batch.num_rows
    for row, raw in zip(
        pc.filter(parents, match).to_pylist(),
        pc.filter(flat.field("value"), match).to_pylist(),
        strict=True,
    ):
        values[row] = int.from_bytes(raw, "big", signed=True)
    arr = pa.array(values, pa.int64())
    return pc.fill_null(arr, 0), pc.is_valid(arr)


def _strategy_values(
    batch: pa.RecordBatch, policy: PartitionPolicy
) -> tuple[pa.Array | None, pa.Array | None]:
    if policy.strategy == "timestamp":
        return batch.column("timestamp"), None
    if policy.strategy == "header":
        assert policy.header is not None
        return header_values(batch, policy.header)
    return None, None


def _ranks(batch: pa.RecordBatch, policy: PartitionPolicy, mask: pa.Array) -> list[Rank]:
    """Strategy ranks of the records selected by ``mask``, in Python: only ever asked for
    the few records that need it (too young to compact, or tombstones about to go)."""
    offsets = pc.filter(batch.column("offset"), mask).to_pylist()
    stamps = pc.filter(batch.column("timestamp"), mask).to_pylist()
    if policy.strategy == "header":
        values, has = header_values(batch, policy.header or "")
        headers = [
            v if h else None
            for v, h in zip(
                pc.filter(values, mask).to_pylist(), pc.filter(has, mask).to_pylist(), strict=True
            )
        ]
    else:
        headers = [None] * len(offsets)
    return [
        record_rank(policy.strategy, o, t, h)
        for o, t, h in zip(offsets, stamps, headers, strict=True)
    ]


class _YoungKeys:
    """Lowest rank per key among the records too young to compact, in the first window."""

    def __init__(self) -> None:
        self.lowest: dict[bytes, Rank] = {}

    def add(self, batch: pa.RecordBatch, eligible: pa.Array, policy: PartitionPolicy) -> None:
        young = pc.and_(pc.is_valid(batch.column("key")), pc.invert(eligible))
        if not pc.any(young).as_py():
            return
        keys = pc.filter(batch.column("key"), young).to_pylist()
        for key, rank in zip(keys, _ranks(batch, policy, young), strict=True):
            if key not in self.lowest or rank < self.lowest[key]:
                self.lowest[key] = rank

    def outranked_by(self, key: bytes, rank: Rank) -> bool:
        low = self.lowest.get(key)
        return low is not None and rank > low


class _Phase2Cursor:
    """Hands out the phase-2 pointer's records in runs of exactly n."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = iter(batches)
        self._pending: pa.RecordBatch | None = None

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        while n > 0:
            if self._pending is None or self._pending.num_rows == 0:
                try:
                    self._pending = next(self._batches)
                except StopIteration:
                    raise RuntimeError("phase-2 pointer ended before phase 1") from None
                continue
            part = self._pending.slice(0, n)
            self._pending = self._pending.slice(part.num_rows)
            n -= part.num_rows
            yield part

    def finish(self) -> None:
        if self._pending is not None and self._pending.num_rows:
            raise RuntimeError("phase-2 pointer holds records phase 1 never saw")
        for batch in self._batches:
            if batch.num_rows:
                raise RuntimeError("phase-2 pointer holds records phase 1 never saw")


def copy_partition(
    phase2: Iterable[pa.RecordBatch], stats: CompactionStats
) -> Iterator[pa.RecordBatch]:
    """No deduplication (L0 -> L1, non-compacted topics): every record goes through.
    The phase-1 pointer only skips past the partition (the caller does that)."""
    for batch in phase2:
        stats.records_in += batch.num_rows
        stats.records_out += batch.num_rows
        stats.null_keys += batch.num_rows - pc.count(batch.column("key")).as_py()
        stats.tombstones_kept += batch.num_rows - pc.count(batch.column("value")).as_py()
        yield batch


def compact_partition(
    phase1: Iterable[pa.RecordBatch],
    phase2: Iterable[pa.RecordBatch],
    policy: PartitionPolicy,
    buffer: KeyIndex,
    stats: CompactionStats,
) -> Iterator[pa.RecordBatch]:
    """Yields the partition's surviving records, in offset order, unchanged but for the
    delete horizon stamped on kept tombstones. ``phase1`` needs only the columns of
    ``phase1_fields``; ``phase2`` yields whole records."""
    cursor = _Phase2Cursor(phase2)
    young = _YoungKeys()
    pending = 0  # records phase 1 has inserted that phase 2 has not yet written
    window = 0
    fresh = True  # the buffer holds nothing of the current window yet
    for batch in phase1:
        n = batch.num_rows
        keys, offsets = batch.column("key"), batch.column("offset")
        eligible = _eligible(batch, policy)
        values, has_value = _strategy_values(batch, policy)
        start = 0
        while start < n:
            if fresh:
                buffer.reset(policy.strategy, offsets[start].as_py())
                fresh = False
            consumed = buffer.insert(keys, offsets, values, has_value, eligible, start, n)
            if window == 0 and policy.lag_cutoff_ms is not None:
                part = batch.slice(start, consumed - start)
                young.add(part, eligible.slice(start, consumed - start), policy)
            pending += consumed - start
            if consumed < n:
                yield from _close_window(
                    cursor, pending, policy, buffer, stats, window, False, young
                )
                window += 1
                pending = 0
                fresh = True
            start = consumed
    if pending or window == 0:
        yield from _close_window(cursor, pending, policy, buffer, stats, window, True, young)
        window += 1
    cursor.finish()
    stats.windows += window


def _close_window(
    cursor: _Phase2Cursor,
    pending: int,
    policy: PartitionPolicy,
    buffer: KeyIndex,
    stats: CompactionStats,
    window: int,
    last: bool,
    young: _YoungKeys,
) -> Iterator[pa.RecordBatch]:
    stats.max_buffer_utilization = max(stats.max_buffer_utilization, buffer.utilization)
    if pending == 0:
        return
    may_drop_tombstones = (
        policy.tombstones_droppable and window == 0 and (last or policy.strategy == "offset")
    )
    for part in cursor.take(pending):
        yield from _survivors(part, buffer, policy, stats, may_drop_tombstones, young)


def _spare_outranking(
    batch: pa.RecordBatch, gone: pa.Array, policy: PartitionPolicy, young: _YoungKeys
) -> pa.Array:
    """``gone`` less the tombstones that outrank a young record of their key."""
    keys = pc.filter(batch.column("key"), gone).to_pylist()
    spare = [
        young.outranked_by(k, r) for k, r in zip(keys, _ranks(batch, policy, gone), strict=True)
    ]
    if not any(spare):
        return gone
    flags = gone.to_pylist()
    it = iter(spare)
    return pa.array([f and not next(it) if f else False for f in flags], pa.bool_())


def _survivors(
    batch: pa.RecordBatch,
    buffer: KeyIndex,
    policy: PartitionPolicy,
    stats: CompactionStats,
    may_drop_tombstones: bool,
    young: _YoungKeys,
) -> Iterator[pa.RecordBatch]:
    n = batch.num_rows
    stats.records_in += n
    eligible = _eligible(batch, policy)
    won = pc.and_(eligible, buffer.keep_mask(batch.column("offset")))
    keep = pc.or_(pc.invert(eligible), won)
    null_keys = n - pc.count(batch.column("key")).as_py()
    stats.null_keys += null_keys
    superseded = n - pc.sum(keep).as_py() if n else 0
    tombstone = pc.is_null(batch.column("value"))
    stats.tombstones_removed += pc.sum(pc.and_(tombstone, pc.invert(keep))).as_py() or 0
    stats.dropped_superseded += superseded
    if policy.retention_cutoff_ms is not None:
        expired = pc.less(batch.column("timestamp"), policy.retention_cutoff_ms)
        stats.dropped_retention += pc.sum(pc.and_(keep, expired)).as_py() or 0
        keep = pc.and_(keep, pc.invert(expired))
    horizons = batch.column(_HORIZON)
    winning_tombstone = pc.and_(won, tombstone)
    if may_drop_tombstones:
        past = pc.fill_null(pc.less_equal(horizons, policy.now_ms), False)
        gone = pc.and_(pc.and_(winning_tombstone, past), keep)
        if young.lowest and pc.any(gone).as_py():
            gone = _spare_outranking(batch, gone, policy, young)
        removed = pc.sum(gone).as_py() or 0
        stats.dropped_tombstone_expired += removed
        stats.tombstones_removed += removed
        keep = pc.and_(keep, pc.invert(gone))
    stamp = pc.and_(winning_tombstone, pc.is_null(horizons))
    if pc.any(stamp).as_py():
        stamped = pc.if_else(stamp, pa.scalar(policy.horizon_ms, pa.int64()), horizons)
        batch = batch.set_column(_HORIZON, RECORD_SCHEMA.field(_HORIZON), stamped)
    out = batch.filter(keep)
    stats.records_out += out.num_rows
    stats.tombstones_kept += out.num_rows - pc.count(out.column("value")).as_py()
    if out.num_rows:
        yield out
