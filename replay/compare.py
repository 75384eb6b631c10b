"""Where two data files differ: first their bytes, then, only if those differ, their
records, so a difference is named by topic, partition and offset where it can be."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from compactor.fileformat import Record, StreamReader, batch_to_records
from compactor.objectstore import ObjectStore, ObjectStream

CHUNK = 1 << 20


def first_difference(store: ObjectStore, committed: str, rerun: str) -> str | None:
    """None if the objects ``committed`` and ``rerun`` hold the same bytes; else what
    differs first, in the records if any differs, else in the bytes."""
    at = _first_byte_difference(store, committed, rerun)
    if at is None:
        return None
    records = _first_record_difference(store, committed, rerun)
    if records is not None:
        return f"{committed}: {records}"
    return (
        f"{committed}: its records equal the re-run's, but its bytes differ from byte {at} "
        "(a different key buffer size, writer version or zstd library?)"
    )


def _first_byte_difference(store: ObjectStore, a: str, b: str) -> int | None:
    """The first byte position where the two objects differ (one GET stream each)."""
    position = 0
    with store.open_stream(a) as sa, store.open_stream(b) as sb:
        while True:
            ca, cb = _read_full(sa, CHUNK), _read_full(sb, CHUNK)
            if ca != cb:
                same = next(
                    (i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y),
                    min(len(ca), len(cb)),
                )
                return position + same
            if not ca:
                return None
            position += len(ca)


def _read_full(stream: ObjectStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = stream.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _first_record_difference(store: ObjectStore, a: str, b: str) -> str | None:
    with store.open_stream(a) as sa, store.open_stream(b) as sb:
        ra = _records(StreamReader(sa, object_name=a))
        rb = _records(StreamReader(sb, object_name=b))
        for x, y in itertools.zip_longest(ra, rb):
            if x == y:
                continue
            if x is None:
                assert y is not None
                return f"lacks the re-run's record {_where(y)}"
            if y is None:
                return f"has a record the re-run does not: {_where(x)}"
            if x[:2] != y[:2] or x[2].offset != y[2].offset:
                return f"holds {_where(x)} where the re-run holds {_where(y)}"
            fields = [f for f in _FIELDS if getattr(x[2], f) != getattr(y[2], f)]
            return f"record {_where(x)} differs from the re-run's in its {', '.join(fields)}"
    return None


_FIELDS = ("timestamp", "key", "value", "headers", "delete_horizon")

Located = tuple[str, int, Record]


def _records(reader: StreamReader) -> Iterator[Located]:
    for section in reader.sections():
        for batch in section.batches():
            for record in batch_to_records(batch):
                yield section.topic, section.partition, record


def _where(x: Located) -> str:
    return f"{x[0]}/{x[1]} offset {x[2].offset}"
