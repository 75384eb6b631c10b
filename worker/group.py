"""Windows that span partitions: one key-buffer window for a run of small partitions.

A partition of small sections costs a window of its own on the partition-by-partition
path (``worker.partition``): a reset, an insert, a keep-set, survivor masks and a filter,
about as much as its records' hashing. So consecutive small partitions are compacted as
one *group*, in one window:

- Phase 1 takes the group's records as one batch in the group's order
  (``gather.GroupRows``): input after input, oldest first, each input's rows in its
  order, so each partition's rows in offset order, each row labelled with its
  partition's ordinal in the group. Each key is salted with that ordinal, a 4-byte
  suffix, so equal keys of different partitions never meet (``key || salt`` is
  injective for a fixed-width salt). Each record's *sequence number*, its row in the
  group's batch, stands in for its offset: within a partition rows follow offsets, so
  the offset, timestamp and header strategies rank exactly as they would by offset. The
  window's keep-set holds winning sequence numbers.
- Phase 2 takes the same partitions' records from its own pointer in the same order, as
  a table of the pieces it took (the group's order does not depend on how the rows were
  taken: the same rows in the same order, or PhaseMismatch), keeps a record iff it has
  no key or its sequence number won, and copies the survivors once, partition after
  partition (a counting sort of their labels, ``kernel.survivor_order``, then
  ``picked.taken`` out of the pieces), so each partition's are a slice of one batch.

Invariants, enforced where a group is built (``pipeline``): every partition of a group is
deduplicated under the same strategy (and header), with no record too young to compact
(``min.compaction.lag.ms`` is 0: a group keeps no young-key map); and a group is one
window or none: if the buffer cannot take all of it (a tiny buffer, or timestamps too far
apart to store as deltas), its partitions are compacted one by one instead. So each
partition of a group is wholly in the group's window, which is both its first window and
its last, and a tombstone past its horizon may go wherever the partition's policy says
tombstones are droppable (``worker.partition``, module doc).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from compactor.fileformat import compute
from compactor.fileformat.batches import validity_bits
from compactor.fileformat.picked import Records, joined, taken
from compactor.worker.kernel import salted_keys, survivor_order
from compactor.worker.masks import bool_bits
from compactor.worker.merge import Key
from compactor.worker.partition import KeepSet, KeyIndex, Verdict, decide, strategy_values
from compactor.worker.policy import Partition, PartitionPolicy
from compactor.worker.stats import CompactionStats

SMALL_PARTITION_BYTES = 64 << 10
"""A partition joins a group only if its sections are all shared (their size is known
before they are read: ``SectionMerge.pending_shared``) and together weigh less than
this."""
GROUP_BYTES = 4 << 20
"""A group takes partitions while together they weigh less than this: a group's records
are held by both pointers until it is written. 2 MiB rather than 1: fewer, longer runs
per input and group (bench/README.md, "Phase 1 in a process of its own"), for about 4 MiB
more at the peak. 4 MiB rather than 2: a group's fixed costs (phase 1's concatenation and
insert, a keep-set, masks, phase 2's survivors copied, its sections' writing) spread over
twice the records, 4-5% less CPU in both processes at 10,000 partitions (bench/README.md,
"Groups of up to 4 MiB"), for about 4 MiB more again."""


@dataclass(frozen=True, slots=True)
class Group:
    """A closed window over a run of small partitions, as phase 1 hands it to phase 2:
    the partitions, how many records phase 1 saw of each and their keys, in order, and
    the keep-set."""

    parts: tuple[Partition, ...]
    counts: tuple[int, ...]
    keys: tuple[Key, ...]
    """Each partition's key (``fileformat.meta.section_key``), in order: strictly
    increasing, so a partition's place in ``parts`` is found by a search
    (``SectionMerge.take_upto``), not a dict a group would make, send and free."""
    keep: KeepSet
    """The winning sequence numbers."""
    utilization: float
    """The key buffer's utilization when the window closed."""

    def __reduce__(self) -> tuple[Callable[..., Group], tuple[Any, ...]]:
        """Pickled with its partitions as columns (phase 1's process sends one message a
        group): four lists, whose repeated topic, policy and output group the pickle's
        memo refers to, and the partitions made again from them, instead of a class and
        its arguments per partition. ``bench.group_message`` times a group's message."""
        columns = [list(column) for column in zip(*self.parts, strict=True)]
        return (_group_of, (columns, self.counts, self.keys, self.keep, self.utilization))


def _group_of(
    columns: list[list[Any]],
    counts: tuple[int, ...],
    keys: tuple[Key, ...],
    keep: KeepSet,
    utilization: float,
) -> Group:
    parts = tuple(map(Partition._make, zip(*columns, strict=True)))
    return Group(parts, counts, keys, keep, utilization)


def same_window(a: PartitionPolicy, b: PartitionPolicy) -> bool:
    """Whether partitions of these policies may share a window."""
    return (a.strategy, a.header) == (b.strategy, b.header)


def may_group(policy: PartitionPolicy) -> bool:
    """Whether a partition of this policy may join a group at all (whatever its size):
    deduplicated, with no record too young to compact."""
    return policy.deduplicate and policy.lag_cutoff_ms is None


def group_weight(policy: PartitionPolicy, logical_bytes: int) -> int | None:
    """What a partition of this policy, whose sections weigh ``logical_bytes`` together,
    adds to a group's weight; None if it may not join one."""
    if not may_group(policy) or logical_bytes >= SMALL_PARTITION_BYTES:
        return None
    return logical_bytes


def sequence(n: int) -> pa.Array:
    """The sequence numbers 0..n-1, as int64. (Phase 1 on its own thread and phase 2 may
    both ask: each slices the array it read or made, never one another thread replaced.)"""
    global _SEQUENCE
    numbers = _SEQUENCE
    if len(numbers) < n:
        size = max(n, 2 * len(numbers))
        numbers = _SEQUENCE = compute.cumulative_sum(pa.repeat(_ONE, size), _MINUS_ONE)
    return numbers.slice(0, n)


_ONE, _MINUS_ONE = pa.scalar(1, pa.int64()), pa.scalar(-1, pa.int64())
_SEQUENCE = compute.cumulative_sum(pa.repeat(_ONE, 1 << 16), _MINUS_ONE)
"""0, 1, 2, ...: made in Arrow, ten times faster than from a ``range``. (``start`` as an
Arrow scalar: a Python int would have pyarrow import dateutil, 2 ms.)"""


def group_window(
    batch: pa.RecordBatch,
    labels: pa.Array,
    policy: PartitionPolicy,
    buffer: KeyIndex,
    before_close: Callable[[], None] = lambda: None,
) -> tuple[KeepSet, float] | None:
    """Phase 1 of a group whose records (phase 1's columns) are ``batch``, in the group's
    order, labelled with their partitions' ordinals: its keep-set and the buffer's
    utilization, or None if one window cannot hold it (the buffer is left to be reset).
    ``before_close`` runs before the keep-set is taken out."""
    n = batch.num_rows
    keys = salted_keys(batch.column("key"), labels)
    values, has_value = strategy_values(batch, policy)
    buffer.reset(policy.strategy, 0)
    if buffer.insert(keys, sequence(n), values, has_value, None, 0, n) < n:
        return None
    before_close()
    return KeepSet(buffer.winners()), buffer.utilization


def by_partition(batch: pa.RecordBatch, labels: pa.Array, partitions: int) -> pa.RecordBatch:
    """The rows of ``batch`` (any of its columns) partition after partition (by
    ``labels``, their partitions' ordinals, each below ``partitions``), each partition's
    in their order: one take, none if they already are (``survivor_order``)."""
    order, _ = survivor_order((1 << len(labels)) - 1, labels, partitions)
    return batch if order is None else compute.take(batch, order)


def group_survivors(
    records: Records, labels: pa.Array, group: Group, stats: CompactionStats
) -> tuple[pa.RecordBatch, list[int]]:
    """Phase 2 of a group whose records are ``records`` (a batch, or a table of the
    pieces ``GroupRows.table`` took), in the group's order, labelled with their
    partitions' ordinals: the survivors, partition after partition in the group's order,
    as one batch (copied once out of the pieces by ``picked.taken``; when every record
    survives in that order already, the records joined as they are), and how many each
    partition has. The rules are ``partition.decide``'s, as for a partition's only window
    (no young keys), with the per-partition rules as row masks."""
    n = records.num_rows
    stats.records_in += n
    stats.windows += 1
    stats.max_buffer_utilization = max(stats.max_buffer_utilization, group.utilization)
    eligible = validity_bits(records.column("key"))
    droppable = _rows(group, labels, lambda p: p.tombstones_droppable)
    verdict = Verdict(
        eligible=eligible,
        won=eligible & group.keep.bits(sequence(n)),
        droppable=droppable,
        may_drop=droppable,  # each partition's only window
    )
    now_ms = group.parts[0].policy.now_ms
    kept, keep = decide(records, verdict, lambda: _horizons(group, labels), now_ms, stats)
    order, counts = survivor_order(keep, labels, len(group.parts))
    return (joined(kept) if order is None else taken(kept, order)), counts


def _rows(group: Group, labels: pa.Array, rule: Callable[[PartitionPolicy], bool]) -> int:
    """The rows of the partitions whose policy passes ``rule``, as a mask."""
    passing = [i for i, p in enumerate(group.parts) if rule(p.policy)]
    if len(passing) == len(group.parts):
        return (1 << len(labels)) - 1
    if not passing:
        return 0
    return bool_bits(compute.is_in(labels, pa.array(passing, pa.int32())))


def _horizons(group: Group, labels: pa.Array) -> pa.Scalar | pa.Array:
    """Each row's partition's delete horizon to stamp."""
    first = group.parts[0].policy.horizon_ms
    if all(p.policy.horizon_ms == first for p in group.parts):
        return pa.scalar(first, pa.int64())
    horizons = pa.array([p.policy.horizon_ms for p in group.parts], pa.int64())
    return compute.take(horizons, labels)
