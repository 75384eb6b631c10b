"""Decoding some columns of a batch frame's payload (FORMAT.md 6.2): a reader that needs
the keys but not the values leaves the values' buffers compressed and unvalidated."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.ipc

from compactor.fileformat.batches import columns_problem
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import FORMAT_VERSION, Payload
from compactor.fileformat.ipc import decode_batch, inspect_message, read_compressed, with_horizons
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.second_read import Role

_FIELD_INDEX = {name: i for i, name in enumerate(RECORD_SCHEMA.names)}
_read_options: dict[tuple[int, ...], pa.ipc.IpcReadOptions] = {}


def field_indices(fields: Sequence[str]) -> tuple[int, ...]:
    """The sorted RECORD_SCHEMA indices of ``fields``, always with the offset."""
    try:
        return tuple(sorted({0} | {_FIELD_INDEX[f] for f in fields}))
    except KeyError as exc:
        raise ValueError(f"RECORD_SCHEMA has no field {exc.args[0]!r}") from None


def decode_fields(
    payload: Payload,
    position: int,
    object_name: str,
    fields: Sequence[str],
    version: int = FORMAT_VERSION,
    role: Role = None,
    ordered: bool = True,
) -> pa.RecordBatch:
    """Like ``decode_batch``, but decodes only ``fields`` of RECORD_SCHEMA (and always
    ``offset``): the other columns' buffers are neither decompressed nor validated. (An
    uncompressed message is decoded whole and checked as by ``decode_batch``, then the
    columns selected: nothing to decompress, and one zero-copy decode costs less than
    opening an IPC stream for some columns.)

    The message is checked (``check_message``) exactly as for a whole decode, and what is
    decoded passes Arrow's full validation, the non-null rules of RECORD_SCHEMA and the
    offset order. The batch has only those columns, in schema order (a version-1 batch
    without delete_horizon gives a null one if asked).
    """
    indices = field_indices(fields)
    if len(indices) == len(RECORD_SCHEMA):
        return decode_batch(payload, position, object_name, version, role, ordered)
    message = inspect_message(payload, position, object_name, version=version)
    if not message.compressed:
        batch = decode_batch(payload, position, object_name, version, role, ordered)
        return batch.select(list(indices))
    stored = tuple(i for i in indices if i < len(message.schema))
    options = _read_options.get(stored)
    if options is None:
        options = _read_options[stored] = pa.ipc.IpcReadOptions(
            included_fields=list(stored), use_threads=False
        )
    try:
        batch = read_compressed(payload, message.schema, options, message.codec)
        batch.validate(full=True)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, MemoryError, ...
        raise FormatError(object_name, position, f"Arrow cannot decode batch: {exc}") from None
    if stored != indices:
        batch = with_horizons(batch)
    if batch.num_rows != message.rows:
        problem: str | None = f"{batch.num_rows} rows decoded, the message says {message.rows}"
    else:
        names = batch.schema.names
        problem = columns_problem(
            batch.column("offset"),
            batch.column("timestamp") if "timestamp" in names else None,
            batch.column("headers") if "headers" in names else None,
            ordered,
        )
    if problem is not None:
        raise FormatError(object_name, position, f"invalid batch: {problem}")
    return batch
