"""Compacts one partition from its two pointers: phase 1 fills the key buffer, phase 2
re-reads the same records and keeps the survivors.

Both pointers walk the partition's records in offset order (sections of the job's
inputs, oldest file first). Phase 1 hashes every eligible key into the key buffer; when
the buffer cannot take the next record, the window closes there: phase 2 catches up to
exactly that record, keeping a record iff it is not eligible (null key, or younger than
min.compaction.lag.ms) or its offset is among the window's winners (the keep-set, so no
key is hashed twice); then the buffer is cleared and both go on. An empty buffer always
takes at least one record, so every window makes progress.

Phase 1 hands each closed window to phase 2 as a ``Window``: its keep-set taken out of
the buffer (``KeyIndex.winners``) with what else deciding about its records takes, so
the buffer is free for the next window while phase 2 still works on this one (the runner
runs phase 1 on its own thread, a window ahead: worker.pipeline).

A key may survive in two windows (one copy each); a later compaction that sees both in
one window removes the older (docs/ARCHITECTURE.md §3.5).
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

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import pyarrow as pa

from compactor.fileformat import RECORD_SCHEMA, compute
from compactor.fileformat.batches import int64_view, strictly_increasing, validity_bits
from compactor.fileformat.picked import Records, joined, picked, whole
from compactor.worker.errors import PhaseMismatch
from compactor.worker.kernel import member_bits
from compactor.worker.masks import at_most, bool_array
from compactor.worker.policy import PartitionPolicy, Rank, record_rank
from compactor.worker.stats import CompactionStats

_R = TypeVar("_R", pa.RecordBatch, pa.Table)
_HORIZON = RECORD_SCHEMA.get_field_index("delete_horizon")
_HORIZON_FIELD = RECORD_SCHEMA.field(_HORIZON)


class KeyIndex(Protocol):
    """The key buffer as phase 1 and phase 2 use it (worker.kernel.KeyBuffer)."""

    capacity_bytes: int

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

    def winners(self) -> pa.Array: ...

    @property
    def utilization(self) -> float: ...

    @property
    def threads(self) -> int: ...

    @threads.setter
    def threads(self, value: int) -> None: ...


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


def _eligible(batch: pa.RecordBatch, policy: PartitionPolicy) -> pa.Array | None:
    """The records that take part in deduplication, or None for all with a key (the key
    buffer never takes a null key)."""
    if policy.lag_cutoff_ms is None:
        return None
    return compute.and_(
        compute.is_valid(batch.column("key")),
        compute.less_equal(batch.column("timestamp"), policy.lag_cutoff_ms),
    )


def header_values(batch: pa.RecordBatch, name: str) -> tuple[pa.Array, pa.Array]:
    """Each record's last header ``name`` read as a big-endian signed 64-bit integer
    (Kafka's LongSerializer); a record without it, or with a value of another length,
    has none. Returns (values, has_value)."""
    headers = batch.column("headers")
    flat = compute.list_flatten(headers)
    parents = compute.list_parent_indices(headers)
    match = compute.and_(
        compute.equal(flat.field("key"), name),
        compute.equal(compute.binary_length(flat.field("value")), 8),
    )
    match = compute.fill_null(match, False)
    values: list[int | None] = [None] * batch.num_rows
    for row, raw in zip(
        compute.filter(parents, match).to_pylist(),
        compute.filter(flat.field("value"), match).to_pylist(),
        strict=True,
    ):
        values[row] = int.from_bytes(raw, "big", signed=True)
    arr = pa.array(values, pa.int64())
    return compute.fill_null(arr, 0), compute.is_valid(arr)


def strategy_values(
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
    offsets = compute.filter(batch.column("offset"), mask).to_pylist()
    stamps = compute.filter(batch.column("timestamp"), mask).to_pylist()
    if policy.strategy == "header":
        values, has = header_values(batch, policy.header or "")
        headers = [
            v if h else None
            for v, h in zip(
                compute.filter(values, mask).to_pylist(),
                compute.filter(has, mask).to_pylist(),
                strict=True,
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
        young = compute.and_(compute.is_valid(batch.column("key")), compute.invert(eligible))
        if not compute.any(young):
            return
        keys = compute.filter(batch.column("key"), young).to_pylist()
        for key, rank in zip(keys, _ranks(batch, policy, young), strict=True):
            if key not in self.lowest or rank < self.lowest[key]:
                self.lowest[key] = rank

    def outranked_by(self, key: bytes, rank: Rank) -> bool:
        low = self.lowest.get(key)
        return low is not None and rank > low


class _Phase2Cursor:
    """Hands out the phase-2 pointer's records in runs of exactly n."""

    def __init__(self, batches: Iterable[Records]) -> None:
        self._batches = iter(batches)
        self._pending: Records | None = None

    def take(self, n: int) -> Iterator[Records]:
        while n > 0:
            if self._pending is None or self._pending.num_rows == 0:
                try:
                    self._pending = next(self._batches)
                except StopIteration:
                    raise PhaseMismatch("phase 2's pointer ended before phase 1's") from None
                continue
            part = self._pending
            if n < part.num_rows:  # else the batch itself: it may be written as it was read
                part = part.slice(0, n)
            self._pending = self._pending.slice(part.num_rows)
            n -= part.num_rows
            yield part

    def finish(self) -> None:
        if self._pending is not None and self._pending.num_rows:
            raise PhaseMismatch("phase 2's pointer holds records phase 1's never saw")
        for batch in self._batches:
            if batch.num_rows:
                raise PhaseMismatch("phase 2's pointer holds records phase 1's never saw")


def copy_partition(phase2: Iterable[Records], stats: CompactionStats) -> Iterator[pa.RecordBatch]:
    """No deduplication (L0 -> L1, non-compacted topics): every record goes through.
    The phase-1 pointer only skips past the partition (the caller does that)."""
    for records in phase2:
        stats.records_in += records.num_rows
        stats.null_keys += records.column("key").null_count
        yield joined(records)


class KeepSet:
    """A closed window's winning offsets, strictly ascending (``KeyIndex.winners``; checked
    here, once per window): what phase 2 needs of the key buffer, taken out of it so that
    the buffer is free for the next window while phase 2 still filters this one."""

    __slots__ = ("winners",)

    def __init__(self, winners: pa.Array) -> None:
        if winners.null_count or not strictly_increasing(winners):
            raise ValueError("a keep-set's offsets must strictly increase, with no nulls")
        self.winners = winners

    def bits(self, offsets: pa.Array) -> int:
        """Which of the records of ``offsets`` (int64, no nulls, any order) are winners,
        as a bit mask (bit i: record i): a walk alongside the winners in C (galloping, so
        O(batch + log window) per batch), without the GIL."""
        if not len(offsets) or not len(self.winners):
            return 0
        return member_bits(self.winners, offsets)


@dataclass(frozen=True, slots=True)
class Window:
    """One closed window, as phase 1 hands it to phase 2: the next ``pending`` records of
    the phase-2 pointer, and what deciding about them takes."""

    pending: int
    keep: KeepSet
    may_drop_tombstones: bool
    young: _YoungKeys
    """The partition's records too young to compact (collected in window 0 only)."""
    utilization: float
    """The key buffer's utilization when the window closed."""


def phase1_windows(
    phase1: Iterable[pa.RecordBatch],
    policy: PartitionPolicy,
    buffer: KeyIndex,
    before_close: Callable[[], None] = lambda: None,
) -> Iterator[Window]:
    """Phase 1 of a partition: fills the key buffer and yields each window as it closes,
    its keep-set already taken out, so the buffer is not touched again (reset for the
    next window) until the generator resumes. ``before_close`` runs before a keep-set is
    taken out (a pipelined caller waits there until phase 2 has room for one more)."""
    young = _YoungKeys()
    pending = 0  # records phase 1 has inserted that phase 2 has not yet seen
    window = 0
    fresh = True  # the buffer holds nothing of the current window yet

    def close(last: bool) -> Window:
        before_close()
        return Window(
            pending=pending,
            keep=KeepSet(buffer.winners()) if pending else _NO_WINNERS,
            may_drop_tombstones=policy.tombstones_droppable
            and window == 0
            and (last or policy.strategy == "offset"),
            young=young,
            utilization=buffer.utilization,
        )

    for batch in phase1:
        n = batch.num_rows
        keys, offsets = batch.column("key"), batch.column("offset")
        eligible = _eligible(batch, policy)
        values, has_value = strategy_values(batch, policy)
        start = 0
        while start < n:
            if fresh:
                buffer.reset(policy.strategy, int64_view(offsets)[start])
                fresh = False
            consumed = buffer.insert(keys, offsets, values, has_value, eligible, start, n)
            if window == 0 and eligible is not None:
                part = batch.slice(start, consumed - start)
                young.add(part, eligible.slice(start, consumed - start), policy)
            pending += consumed - start
            if consumed < n:
                yield close(False)
                window += 1
                pending = 0
                fresh = True
            start = consumed
    if pending or window == 0:
        yield close(True)


def phase2_windows(
    phase2: Iterable[Records],
    windows: Iterable[Window],
    policy: PartitionPolicy,
    stats: CompactionStats,
) -> Iterator[pa.RecordBatch]:
    """Phase 2 of a partition: for each window phase 1 closed, the survivors among the
    phase-2 pointer's next ``pending`` records, decided by the window's keep-set.
    PhaseMismatch (without job or partition: the caller adds them) unless the phase-2
    pointer holds exactly the records phase 1 counted."""
    cursor = _Phase2Cursor(phase2)
    count = 0
    for window in windows:
        count += 1
        stats.max_buffer_utilization = max(stats.max_buffer_utilization, window.utilization)
        for part in cursor.take(window.pending):
            yield from _survivors(part, window, policy, stats)
        del window  # its keep-set may go before phase 1 takes out the next-but-one
    cursor.finish()
    stats.windows += count


def _spare_outranking(
    records: Records, gone: int, policy: PartitionPolicy, young: _YoungKeys
) -> int:
    """``gone`` (a bit mask) less the tombstones that outrank a young record of their key."""
    batch = joined(records)  # rare: a droppable tombstone while a key is too young
    n = batch.num_rows
    mask = bool_array(gone, n)
    keys = compute.filter(batch.column("key"), mask).to_pylist()
    rows = [i for i in range(n) if gone >> i & 1]
    for row, k, r in zip(rows, keys, _ranks(batch, policy, mask), strict=True):
        if young.outranked_by(k, r):
            gone &= ~(1 << row)
    return gone


def _survivors(
    batch: Records,
    window: Window,
    policy: PartitionPolicy,
    stats: CompactionStats,
) -> Iterator[pa.RecordBatch]:
    """The records of ``batch`` (or of a table of gathered batches) that survive the
    window (masks: ``worker.masks``), as one batch: a batch that keeps every record as
    it is, else only the survivors copied (``picked``)."""
    n = batch.num_rows
    stats.records_in += n
    if not n:
        return
    full = (1 << n) - 1
    eligible = validity_bits(batch.column("key"))
    if policy.lag_cutoff_ms is not None:
        eligible &= at_most(whole(batch.column("timestamp")), policy.lag_cutoff_ms)
    droppable = full if policy.tombstones_droppable else 0
    young = window.young

    def spare(gone: int) -> int:
        return _spare_outranking(batch, gone, policy, young) if young.lowest else gone

    kept, keep = decide(
        batch,
        Verdict(
            eligible=eligible,
            won=eligible & window.keep.bits(whole(batch.column("offset"))),
            droppable=droppable,
            may_drop=droppable if window.may_drop_tombstones else 0,
        ),
        lambda: pa.scalar(policy.horizon_ms, pa.int64()),
        policy.now_ms,
        stats,
        spare,
    )
    if keep == full and isinstance(kept, pa.RecordBatch):
        yield kept
    elif keep:
        yield picked(kept, keep, keep.bit_count())


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a window says of a batch's records, as masks (bit i: record i)."""

    eligible: int
    """The records that take part in deduplication (a key, old enough to compact)."""
    won: int
    """The eligible records whose offset (or sequence number) won the window."""
    droppable: int
    """The records of a partition whose tombstones may go past their horizon (the
    policy's ``tombstones_droppable``)."""
    may_drop: int
    """The records of ``droppable`` in a window that may drop them (a partition's first
    window, and under the timestamp and header strategies its last: module doc)."""


def decide(
    batch: _R,
    verdict: Verdict,
    horizon: Callable[[], pa.Scalar | pa.Array],
    now_ms: int,
    stats: CompactionStats,
    spare: Callable[[int], int] = lambda gone: gone,
) -> tuple[_R, int]:
    """Which records of ``batch`` survive: those not eligible, and the winners, less the
    winning tombstones past their horizon that may go (less what ``spare`` keeps of those:
    tombstones that outrank a record too young to compact). Returns the batch, with a new
    delete horizon (``horizon()``: one, or one per record) stamped on each winning
    tombstone without one and each droppable one past its horizon that stays (module
    doc: the planner then comes back to it a delete.retention.ms later, not at once), and
    the survivors' mask. Counts what it drops in ``stats``."""
    n = batch.num_rows
    full = (1 << n) - 1
    keys, values = batch.column("key"), batch.column("value")
    won = verdict.won
    keep = (full & ~verdict.eligible) | won
    stats.null_keys += keys.null_count
    stats.dropped_superseded += n - keep.bit_count()
    tombstone = full & ~validity_bits(values)
    stats.tombstones_removed += (tombstone & ~keep).bit_count()
    horizons = batch.column(_HORIZON)  # a table's chunks joined only where compared
    has_horizon = validity_bits(horizons)
    winning_tombstone = won & tombstone
    past = tombstone & keep & verdict.droppable
    if past:
        past &= has_horizon
        if past:
            horizons = whole(horizons)
            past &= at_most(horizons, now_ms)
    if winning_tombstone & past & verdict.may_drop:
        gone = spare(winning_tombstone & past & verdict.may_drop)
        removed = gone.bit_count()
        stats.dropped_tombstone_expired += removed
        stats.tombstones_removed += removed
        keep &= ~gone
        past &= ~gone
    stamp = (winning_tombstone & ~has_horizon) | past
    if stamp:
        stamped = compute.if_else(bool_array(stamp, n), horizon(), whole(horizons))
        batch = batch.set_column(_HORIZON, _HORIZON_FIELD, stamped)
    return batch, keep


def drop_expired_prefix(
    batches: Iterable[pa.RecordBatch], cutoff_ms: int, stats: CompactionStats
) -> Iterator[pa.RecordBatch]:
    """retention.ms: a partition's records (what the job keeps of them, in offset order)
    less those at its start older than ``cutoff_ms``; from the first record that is not,
    everything passes. The caller ensures the inputs hold the partition's oldest live
    data, so every record before a dropped one is dropped too, and no value it superseded
    can resurface."""
    at_start = True
    for batch in batches:
        if at_start:
            first_young = compute.index(
                compute.greater_equal(batch.column("timestamp"), cutoff_ms), True
            )
            expired = batch.num_rows if first_young < 0 else first_young
            if expired:
                stats.dropped_retention += expired
                stats.tombstones_removed += batch.slice(0, expired).column("value").null_count
                batch = batch.slice(expired)
            at_start = batch.num_rows == 0
            if at_start:
                continue
        yield batch


def counted(batches: Iterable[pa.RecordBatch], stats: CompactionStats) -> Iterator[pa.RecordBatch]:
    """What reaches the output: ``records_out`` and ``tombstones_kept``."""
    for batch in batches:
        stats.records_out += batch.num_rows
        stats.tombstones_kept += batch.column("value").null_count
        yield batch


_NO_WINNERS = KeepSet(pa.array([], pa.int64()))
