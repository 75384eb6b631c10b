"""Some rows of a batch, or of a table of batches, as one new batch: one copy of them.

Phase 2 decides about a run of small input batches at once (``worker.gather`` joins them
as a ``pa.Table``, uncopied). Concatenating the run first and then filtering it copied
every record once and the survivors again; ``picked`` copies only the survivors, from
whichever chunk holds each, in compiled passes (``_rows``). ``taken`` does the same for
rows listed in any order: a group's survivors, put partition after partition
(``worker.group``). Records with headers take Arrow's own path (the run concatenated,
then filtered or taken): selecting from a list of structs is not what these passes do,
and such records are rare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa

from compactor.fileformat import _rows
from compactor.fileformat.batches import (
    concat,
    empty_headers,
    filter_batch,
    has_headers,
    take_batch,
)
from compactor.fileformat.records import RECORD_SCHEMA

Records: TypeAlias = pa.RecordBatch | pa.Table
"""A batch, or a table of batches of RECORD_SCHEMA (a gathered run, ``worker.gather``)."""

_FIXED = {"offset", "timestamp", "delete_horizon"}
_MAX_CHUNKS = 65536
"""The most chunks a ``_rows`` pass takes (its ``MAX_CHUNKS``): a run or group of more,
which only tiny sections read one by one could make, takes Arrow's path."""
_BINARY = {"key", "value"}


def joined(records: Records) -> pa.RecordBatch:
    """The records as one batch (a batch, or a table of one non-empty batch, uncopied)."""
    if isinstance(records, pa.RecordBatch):
        return records
    batches = [b for b in records.to_batches() if b.num_rows]
    return concat(batches or [pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)])


def whole(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array: a table's chunks concatenated (one chunk: itself)."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def picked(records: Records, keep: int, rows: int) -> pa.RecordBatch:
    """The ``rows`` records of ``records`` (of RECORD_SCHEMA) whose bit is set in ``keep``
    (bit i: record i), in order, as one new batch laid out as Arrow lays out a filtered
    one. ValueError if ``keep`` sets other than ``rows`` of the records' bits."""
    n = records.num_rows
    if keep >> n:
        raise ValueError(f"the mask sets bits beyond the {n} records")
    mask = keep.to_bytes((n + 7) >> 3, "little")
    if _arrows_path(records):
        if keep.bit_count() != rows:
            raise ValueError(f"the mask picks {keep.bit_count()} of {n} records, not {rows}")
        mask_array = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(mask)])
        return filter_batch(joined(records), mask_array)
    return _selected(
        records,
        rows,
        lambda width, chunks: _rows.pick_fixed(mask, rows, width, chunks),
        lambda chunks: _rows.pick_binary(mask, rows, chunks),
    )


def taken(records: Records, order: pa.Array) -> pa.RecordBatch:
    """The records of ``records`` (of RECORD_SCHEMA) that ``order`` lists (int32 record
    numbers, no nulls, in any order), in that order, as one new batch: ``take`` across a
    table's batches without concatenating them first. ValueError for a number that is not
    one of the records'."""
    if order.type != pa.int32() or order.null_count:
        raise ValueError(f"an order is int32 record numbers without nulls, not {order.type}")
    if _arrows_path(records):
        return take_batch(joined(records), order)
    rows = len(order)
    values = order.buffers()[1]
    raw = memoryview(values)[4 * order.offset : 4 * (order.offset + rows)] if rows else b""
    located: dict[tuple[int, ...], bytes] = {}

    def at(chunks: list[tuple[Any, ...]]) -> bytes:
        """The order's rows located in chunks of these lengths: once for all the columns
        chunked alike (a stamped horizon column is one chunk)."""
        lengths = tuple(chunk[0] for chunk in chunks)
        if lengths not in located:
            located[lengths] = _rows.locate(raw, lengths)
        return located[lengths]

    return _selected(
        records,
        rows,
        lambda width, chunks: _rows.take_fixed(at(chunks), width, chunks),
        lambda chunks: _rows.take_binary(at(chunks), chunks),
    )


def _selected(
    records: Records,
    rows: int,
    fixed: Callable[[int, list[tuple[Any, ...]]], tuple[bytes, bytes | None, int]],
    binary: Callable[[list[tuple[Any, ...]]], tuple[bytes, bytes, bytes | None, int]],
) -> pa.RecordBatch:
    """A batch of ``rows`` records, each column's values selected from its chunks by
    ``fixed`` (a column of ``width``-byte values) or ``binary``: a pass of ``_rows``.
    The headers are as many empty lists (the callers take Arrow's path for any other)."""
    columns = []
    for field in RECORD_SCHEMA:
        if field.name == "headers":
            columns.append(empty_headers(rows))
            continue
        chunks = _chunks(records.column(field.name))
        if field.name in _FIXED:
            data, validity, nulls = fixed(8, [_described(c)[:4] for c in chunks])
            buffers = [_buffer(validity), pa.py_buffer(data)]
        else:
            assert field.name in _BINARY
            offsets, data, validity, nulls = binary([_described(c) for c in chunks])
            buffers = [_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
        columns.append(pa.Array.from_buffers(field.type, rows, buffers, nulls))
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


def _arrows_path(records: Records) -> bool:
    """Whether the records are for Arrow's path (concatenated, then filtered or taken):
    any with headers, or a table of more chunks than the passes take."""
    if isinstance(records, pa.Table) and max(c.num_chunks for c in records.columns) > _MAX_CHUNKS:
        return True
    return _any_headers(records.column("headers"))


def _any_headers(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether any record of a headers column has a header (or a null list, against the
    schema: Arrow's path keeps it): a chunk whose list items are none at all has none
    (cheaper to ask than its offsets)."""
    return any(c.null_count or (len(c.values) and has_headers(c)) for c in _chunks(column))


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """A column's non-empty arrays (an empty one may have no buffers)."""
    arrays = [column] if isinstance(column, pa.Array) else column.chunks
    return [a for a in arrays if len(a)]


def _described(arr: pa.Array) -> tuple[Any, ...]:
    """A chunk as the ``_rows`` passes take it: its length, its first slot, its validity
    bitmap (None without nulls) and its data buffers (a fixed-width column's one, or a
    binary column's offsets and bytes)."""
    buffers = arr.buffers()
    return (len(arr), arr.offset, buffers[0] if arr.null_count else None, *buffers[1:3])


def _buffer(data: Any) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)
