"""The record model: one Kafka record, and the Arrow schema records travel in.

Records move through the system as Arrow record batches of ``RECORD_SCHEMA``; the
``Record`` dataclass is the row form, for ingest, dump and tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

HEADER_TYPE = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
)

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field(
            "headers", pa.list_(pa.field("item", HEADER_TYPE, nullable=False)), nullable=False
        ),
        pa.field("delete_horizon", pa.int64()),
    ]
)

RECORD_SCHEMA_V1 = pa.schema(list(RECORD_SCHEMA)[:5])
"""The record schema of version-1 files written before ``delete_horizon`` existed: readers
decode their batches as RECORD_SCHEMA with a null ``delete_horizon``."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record. ``key`` None is a null key; ``value`` None is a tombstone.

    ``delete_horizon`` is not part of the record's content: it is the time after which a
    compaction may drop this tombstone (KIP-534), set when a compaction keeps it.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    delete_horizon: int | None = None


def records_to_batch(records: Sequence[Record]) -> pa.RecordBatch:
    """Build one record batch of ``RECORD_SCHEMA`` from rows."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp for r in records], pa.int64()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                RECORD_SCHEMA.field("headers").type,
            ),
            pa.array([r.delete_horizon for r in records], pa.int64()),
        ],
        schema=RECORD_SCHEMA,
    )


def batch_to_records(batch: pa.RecordBatch) -> list[Record]:
    """The rows of one record batch of ``RECORD_SCHEMA``."""
    cols = batch.to_pydict()
    return [
        Record(
            offset=o,
            timestamp=t,
            key=k,
            value=v,
            headers=tuple((h["key"], h["value"]) for h in hs),
            delete_horizon=dh,
        )
        for o, t, k, v, hs, dh in zip(
            cols["offset"],
            cols["timestamp"],
            cols["key"],
            cols["value"],
            cols["headers"],
            cols["delete_horizon"],
            strict=True,
        )
    ]


def iter_records(batches: Iterable[pa.RecordBatch]) -> Iterable[Record]:
    for batch in batches:
        yield from batch_to_records(batch)
