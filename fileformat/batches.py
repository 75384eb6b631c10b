"""Record batches as the format sees them: invariants, statistics, bounded re-chunking.

Small batches (a few records, common when a file holds thousands of partitions) take
pure-Python paths over zero-copy buffer views; Arrow compute kernels cost more to call than
they save there.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from compactor.fileformat import _sections, compute
from compactor.fileformat.meta import SectionMeta
from compactor.fileformat.records import RECORD_SCHEMA

RECORD_OVERHEAD = 16
"""Offset and timestamp, counted in every record's logical size."""
MAX_RECORD_WEIGHT = 128 << 20
"""The writer rejects a record whose batching weight is larger (see ``plan_slices``)."""

_OFFSET, _TIMESTAMP, _KEY, _VALUE, _HEADERS, _HORIZON = range(6)
NO_HORIZON = (1 << 63) - 1
"""How the trailer and the footer write "no tombstone has a delete horizon" (a horizon this
late, never reached, reads the same)."""
SMALL_BATCH = 64
"""Batches with at most this many records take pure-Python paths: a compute call costs
more than it saves there."""


def int64_view(arr: pa.Array) -> memoryview:
    """The values of a null-free int64 array as a zero-copy ``memoryview`` of format 'q'."""
    if len(arr) == 0:
        return memoryview(b"").cast("q")
    start = arr.offset * 8
    return memoryview(arr.buffers()[1])[start : start + len(arr) * 8].cast("q")


def _offsets_view(arr: pa.Array) -> memoryview:
    """The int32 offsets (length + 1 of them) of a non-empty binary, string or list array."""
    start = arr.offset * 4
    return memoryview(arr.buffers()[1])[start : start + (len(arr) + 1) * 4].cast("i")


def bitmap_bits(buf: pa.Buffer, offset: int, n: int) -> int:
    """Bits ``offset .. offset + n`` of an Arrow (LSB-first) bitmap buffer, as an int (bit
    i: slot i)."""
    start, shift = offset >> 3, offset & 7
    raw = int.from_bytes(memoryview(buf)[start : (offset + n + 7) >> 3], "little")
    return (raw >> shift) & ((1 << n) - 1)


def validity_bits(arr: pa.Array | pa.ChunkedArray) -> int:
    """Which slots of ``arr`` (or of a table's column) are not null, as an int (bit i:
    slot i)."""
    n = len(arr)
    if not arr.null_count:
        return (1 << n) - 1
    if isinstance(arr, pa.ChunkedArray):
        bits = shift = 0
        for chunk in arr.chunks:
            bits |= validity_bits(chunk) << shift
            shift += len(chunk)
        return bits
    validity = arr.buffers()[0]
    if validity is None:  # a null-typed array: every slot null
        return 0
    return bitmap_bits(validity, arr.offset, n)


def _sum_lengths(arr: pa.Array) -> int:
    """Total length of the non-null values of a binary or string array (a null slot may
    span bytes; they are not part of any value)."""
    n = len(arr)
    if n == 0:
        return 0
    nulls = arr.null_count
    offsets = _offsets_view(arr)
    if nulls == 0:
        return offsets[-1] - offsets[0]
    if nulls == n:
        return 0
    return _sections.valid_bytes(offsets, *_validity(arr))


def _header_items(headers: pa.Array) -> pa.StructArray | None:
    """A headers column's items as one struct array (key, value), or None if there are
    none."""
    if len(headers) == 0:
        return None
    offsets = _offsets_view(headers)
    if offsets[-1] == offsets[0]:
        return None
    return compute.list_flatten(headers)


def strictly_increasing(offsets: pa.Array) -> bool:
    """Whether a null-free int64 array strictly increases."""
    n = len(offsets)
    return n < 2 or _sections.figures([(0, n)], 0, 1, int64_view(offsets))[0] < 0


def header_offsets(batch: pa.RecordBatch) -> memoryview:
    """Where each record's headers start among the header items of a batch of
    RECORD_SCHEMA (one more than its rows): record i has ``h[i + 1] - h[i]`` headers."""
    return _offsets_view(batch.column(_HEADERS))


_HEADERS_TYPE = RECORD_SCHEMA.field(_HEADERS).type
_NOT_HEADERS = [i for i in range(len(RECORD_SCHEMA)) if i != _HEADERS]
_no_headers: list[pa.Array] = []


def has_headers(headers: pa.Array) -> bool:
    """Whether any record of a headers column has a header (or, against the schema, a
    null headers list)."""
    if headers.null_count or len(headers) == 0:
        return bool(headers.null_count)
    offsets = _offsets_view(headers)
    return offsets[-1] != offsets[0]


def empty_headers(n: int) -> pa.Array:
    """A headers column of ``n`` empty lists (a slice of a cached one)."""
    if not _no_headers or len(_no_headers[0]) < n:
        size = max(n, 1024)
        offsets = pa.Array.from_buffers(
            pa.int32(), size + 1, [None, pa.py_buffer(bytes(4 * (size + 1)))]
        )
        items = pa.array([], _HEADERS_TYPE.value_type)
        _no_headers[:] = [pa.ListArray.from_arrays(offsets, items, type=_HEADERS_TYPE)]
    return _no_headers[0].slice(0, n)


def filter_batch(batch: pa.RecordBatch, mask: pa.Array) -> pa.RecordBatch:
    """``batch.filter(mask)`` for a batch of RECORD_SCHEMA and a null-free boolean mask
    (``_picked``)."""
    return _picked(batch, lambda b: compute.filter(b, mask))


def take_batch(batch: pa.RecordBatch, indices: pa.Array) -> pa.RecordBatch:
    """``batch.take(indices)`` for a batch of RECORD_SCHEMA and null-free indices
    (``_picked``)."""
    return _picked(batch, lambda b: compute.take(b, indices))


def _picked(
    batch: pa.RecordBatch, pick: Callable[[pa.RecordBatch], pa.RecordBatch]
) -> pa.RecordBatch:
    """``pick(batch)``, some of a batch's rows. When no record has headers, the headers
    column is not picked from but replaced by as many empty lists: picking from a list of
    structs costs as much as all the other columns together."""
    headers = batch.column(_HEADERS)
    if has_headers(headers):
        return pick(batch)
    out = pick(batch.select(_NOT_HEADERS))
    return out.add_column(_HEADERS, RECORD_SCHEMA.field(_HEADERS), empty_headers(out.num_rows))


def batch_problem(batch: pa.RecordBatch, ordered: bool = True) -> str | None:
    """What makes ``batch`` unfit for a section on its own, or None.

    Checks the schema, nulls in non-nullable columns (Arrow does not enforce them), and
    (if ``ordered``: not a shared block's batch, whose sections each start afresh) that
    offsets strictly increase within the batch.
    """
    if not batch.schema.equals(RECORD_SCHEMA):
        return f"schema is not RECORD_SCHEMA: {batch.schema}"
    return decoded_problem(batch, ordered)


def decoded_problem(batch: pa.RecordBatch, ordered: bool = True) -> str | None:
    """``batch_problem`` of a batch that has RECORD_SCHEMA by construction (a decoder gave
    it that schema): without comparing the schema, which costs more than the other checks
    of a small batch (``checked_stats``)."""
    if not batch.num_rows:  # a writer takes an empty batch, and writes nothing
        return None
    found = checked_stats(batch, ordered)
    return found if isinstance(found, str) else None


def columns_problem(
    offsets: pa.Array,
    timestamps: pa.Array | None,
    headers: pa.Array | None,
    ordered: bool = True,
) -> str | None:
    """``batch_problem`` for a batch's columns, of which only the offsets are certain to
    be there (a partial decode): nulls where RECORD_SCHEMA forbids them, and offsets that
    do not strictly increase."""
    if offsets.null_count or (timestamps is not None and timestamps.null_count):
        return "null offset or timestamp"
    if headers is not None:
        if headers.null_count:
            return "null headers list"
        items = _header_items(headers)
        if items is not None and (items.null_count or items.field(0).null_count):
            return "null header or header key"
    if ordered and not strictly_increasing(offsets):
        return "offsets do not strictly increase"
    return None


def logical_bytes(batch: pa.RecordBatch) -> int:
    """The logical size of the batch's records (FORMAT.md, "Logical size")."""
    total: int = RECORD_OVERHEAD * batch.num_rows
    total += _sum_lengths(batch.column(_KEY)) + _sum_lengths(batch.column(_VALUE))
    items = _header_items(batch.column(_HEADERS))
    if items is not None:
        total += _sum_lengths(items.field(0)) + _sum_lengths(items.field(1))
    return total


def record_sizes(batch: pa.RecordBatch) -> pa.Array:
    """The logical size of each record as an int64 array, from the offsets of its key,
    value and headers' columns in one compiled pass (``_sections.record_sizes``)."""
    n = batch.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    headers = batch.column(_HEADERS)
    items = headers.values  # what the list offsets index: not sliced to the list's rows
    key, key_valid, key_bit = _binary_args(batch.column(_KEY))
    value, value_valid, value_bit = _binary_args(batch.column(_VALUE))
    item_key = _binary_args(items.field(0))[0]
    item_value, item_valid, item_bit = _binary_args(items.field(1))
    raw = _sections.record_sizes(
        n,
        key,
        key_valid,
        key_bit,
        value,
        value_valid,
        value_bit,
        _offsets_view(headers),
        item_key,
        item_value,
        item_valid,
        item_bit,
    )
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(raw)])


def _binary_args(arr: pa.Array) -> tuple[memoryview | None, pa.Buffer | None, int]:
    """A binary or string array's offsets, validity bitmap (None: no nulls) and the bit
    of its first slot, as ``_sections.record_sizes`` takes them; no offsets if empty."""
    if len(arr) == 0:
        return None, None, 0
    return _offsets_view(arr), *_validity(arr)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What a section's trailer records about a run of records (one batch or several)."""

    first_offset: int
    last_offset: int
    record_count: int
    tombstones: int
    uncompressed_bytes: int
    min_timestamp: int
    max_timestamp: int
    min_delete_horizon: int | None = None
    """The earliest ``delete_horizon`` of a tombstone among the records, None if none has
    one."""

    def section_meta(self, topic: str, partition: int, position: int, length: int) -> SectionMeta:
        """The metadata of a section holding exactly these records at ``position``."""
        return SectionMeta(
            topic=topic,
            partition=partition,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            record_count=self.record_count,
            uncompressed_bytes=self.uncompressed_bytes,
            min_timestamp=self.min_timestamp,
            max_timestamp=self.max_timestamp,
            tombstones=self.tombstones,
            position=position,
            length=length,
            min_delete_horizon=self.min_delete_horizon,
        )

    def figures(self) -> Figures:
        """These stats as a tuple (``Figures``)."""
        return (
            self.first_offset,
            self.last_offset,
            self.record_count,
            self.tombstones,
            self.uncompressed_bytes,
            self.min_timestamp,
            self.max_timestamp,
            self.min_delete_horizon,
        )

    def then(self, later: BatchStats) -> BatchStats:
        """The stats of these records followed by ``later``'s."""
        return BatchStats(
            self.first_offset,
            later.last_offset,
            self.record_count + later.record_count,
            self.tombstones + later.tombstones,
            self.uncompressed_bytes + later.uncompressed_bytes,
            min(self.min_timestamp, later.min_timestamp),
            max(self.max_timestamp, later.max_timestamp),
            _earliest(self.min_delete_horizon, later.min_delete_horizon),
        )


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def batch_stats(batch: pa.RecordBatch, uncompressed_bytes: int | None = None) -> BatchStats:
    """Stats of a non-empty batch that ``batch_problem`` accepted (``checked_stats``),
    its logical bytes summed from its columns' lengths or given."""
    stats = checked_stats(batch, ordered=False)
    if isinstance(stats, str):
        raise ValueError(f"batch_stats of an unfit batch: {stats}")
    if uncompressed_bytes is None:
        return stats
    return dataclasses.replace(stats, uncompressed_bytes=uncompressed_bytes)


def checked_stats(batch: pa.RecordBatch, ordered: bool = True) -> BatchStats | str:
    """The stats of a non-empty batch that has RECORD_SCHEMA by construction (a decoder
    or a writer gave it that schema), or what makes it unfit for a section on its own
    (``decoded_problem``'s words), in one compiled pass over its buffers as Arrow's C data
    interface exports them (``_sections.checked_figures``). A reader checks and measures
    every batch it decodes: through pyarrow's objects, one column at a time, that took
    about 24 µs a batch, a twentieth of a 64-partition job's thread."""
    figures = _sections.checked_figures(batch.__arrow_c_array__(), ordered)
    if isinstance(figures, str):
        return figures
    return BatchStats(*figures)


Figures = tuple[int, int, int, int, int, int, int, int | None]
"""A section's stats as a tuple, in the order of BatchStats's fields (cheaper to make and
compare than a BatchStats, for every section of every block)."""


def section_figures(
    batch: pa.RecordBatch, sections: Sequence[tuple[Any, ...]], start_at: int = 0
) -> tuple[int, list[Figures]]:
    """The stats as tuples of the sections of a whole batch of RECORD_SCHEMA, each a
    tuple whose fields ``start_at`` and the next are its first row and rows, with the
    first row inside a section whose offset does not exceed the one before it (-1 if
    none): one compiled pass for all of them over the buffers Arrow's C data interface
    exports (``_sections.batch_figures``)."""
    descent, figures = _sections.batch_figures(
        batch.__arrow_c_array__(), sections, start_at, start_at + 1
    )
    return descent, cast(list[Figures], figures)


def _validity(arr: pa.Array) -> tuple[pa.Buffer | None, int]:
    """An array's validity bitmap and the bit of its first slot; None if no slot is null."""
    if not arr.null_count:
        return None, 0
    return arr.buffers()[0], arr.offset


def concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches``' records, in order (the one batch itself, uncopied)."""
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def copied(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches``' records, in order, always in buffers of its own, laid
    out as a concatenation of many lays them out: a batch's encoding depends on whether
    its arrays are slices, so this one is the same however its records were sliced (one
    slice of many rows, or a slice a row)."""
    return pa.concat_batches([*batches, batches[0].slice(0, 0)])


def batching_weight(batch: pa.RecordBatch) -> tuple[int, int]:
    """(logical size, batching weight) of a batch's records (``plan_slices``)."""
    items = _header_items(batch.column(_HEADERS))
    size = logical_bytes(batch)
    return size, size + 8 * (0 if items is None else len(items))


def plan_slices(batch: pa.RecordBatch, max_weight: int) -> list[tuple[int, int, int]]:
    """Splits ``batch`` into consecutive runs of records of bounded size.

    A record's batching weight is its logical size plus 8 bytes per header (a header's
    logical size can be 0 while Arrow still spends 8 bytes of offsets on it), so a run's
    Arrow encoding is at most about twice its weight. Runs are greedy: each holds as many
    records as fit in ``max_weight``, and a heavier record gets a run of its own.
    Returns (start, length, logical bytes) per run; ValueError if a record weighs more than
    MAX_RECORD_WEIGHT. Nothing is copied.
    """
    n = batch.num_rows
    if n == 0:
        return []
    total_size, total_weight = batching_weight(batch)
    if total_weight <= max_weight and total_weight <= MAX_RECORD_WEIGHT:
        return [(0, n, total_size)]
    sizes = record_sizes(batch)
    header_count = compute.list_value_length(batch.column(_HEADERS))
    weights = compute.add(sizes, compute.multiply(header_count, 8))
    if compute.max(weights).as_py() > MAX_RECORD_WEIGHT:
        raise ValueError(f"a record is larger than {MAX_RECORD_WEIGHT} bytes")
    cum_weight = int64_view(compute.cumulative_sum(compute.cast(weights, pa.int64())))
    cum_size = int64_view(compute.cumulative_sum(sizes))
    runs = []
    start, weight_before, size_before = 0, 0, 0
    while start < n:
        end = max(bisect.bisect_right(cum_weight, weight_before + max_weight, start, n), start + 1)
        runs.append((start, end - start, cum_size[end - 1] - size_before))
        weight_before, size_before = cum_weight[end - 1], cum_size[end - 1]
        start = end
    return runs
