"""Some rows of a batch, or of a table of batches, as one new batch: one copy of them.

Phase 2 decides about a run of small input batches at once (``worker.gather`` joins them
as a ``pa.Table``, uncopied). Concatenating the run first and then filtering it copied
every record once and the survivors again; ``picked`` copies only the survivors, from
whichever chunk holds each, in compiled passes (``_rows``). Records with headers take
Arrow's own path (the run concatenated, then filtered): picking from a list of structs
is not what these passes do, and such records are rare.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import pyarrow as pa

from compactor.fileformat import _rows
from compactor.fileformat.batches import concat, empty_headers, filter_batch, has_headers
from compactor.fileformat.records import RECORD_SCHEMA

Records: TypeAlias = pa.RecordBatch | pa.Table
"""A batch, or a table of batches of RECORD_SCHEMA (a gathered run, ``worker.gather``)."""

_FIXED = {"offset", "timestamp", "delete_horizon"}
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
    if _any_headers(records.column("headers")):
        whole_batch = joined(records)
        if keep.bit_count() != rows:
            raise ValueError(f"the mask picks {keep.bit_count()} of {n} records, not {rows}")
        mask_array = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(mask)])
        return filter_batch(whole_batch, mask_array)
    columns = []
    for field in RECORD_SCHEMA:
        if field.name == "headers":
            columns.append(empty_headers(rows))
            continue
        chunks = _chunks(records.column(field.name))
        if field.name in _FIXED:
            data, validity, nulls = _rows.pick_fixed(
                mask, rows, 8, [(len(c), c.offset, _validity(c), c.buffers()[1]) for c in chunks]
            )
            buffers = [_buffer(validity), pa.py_buffer(data)]
        else:
            assert field.name in _BINARY
            offsets, data, validity, nulls = _rows.pick_binary(
                mask, rows, [(len(c), c.offset, _validity(c), *c.buffers()[1:3]) for c in chunks]
            )
            buffers = [_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
        columns.append(pa.Array.from_buffers(field.type, rows, buffers, nulls))
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


def _any_headers(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether any record of a headers column has a header (or a null list, against the
    schema: Arrow's path keeps it): a chunk whose list items are none at all has none
    (cheaper to ask than its offsets)."""
    return any(c.null_count or (len(c.values) and has_headers(c)) for c in _chunks(column))


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """A column's non-empty arrays (an empty one may have no buffers)."""
    arrays = [column] if isinstance(column, pa.Array) else column.chunks
    return [a for a in arrays if len(a)]


def _validity(arr: pa.Array) -> pa.Buffer | None:
    return arr.buffers()[0] if arr.null_count else None


def _buffer(data: Any) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)
