"""Round trips through the file format: streaming, verifying and ranged reads."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.fileformat import (
    FORMAT_VERSION,
    FileMeta,
    FileWriter,
    Record,
    SectionMeta,
    StreamReader,
    batch_to_records,
    read_footer,
    read_section,
    read_section_offsets,
    records_to_batch,
    section_key,
    verify_stream,
    write_file,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

Sections = dict[tuple[str, int], list[Record]]


# --- model ------------------------------------------------------------------------------


def logical_size(r: Record) -> int:
    size = 16 + len(r.key or b"") + len(r.value or b"")
    return size + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)


def expected_meta(topic: str, partition: int, records: list[Record]) -> dict[str, object]:
    return {
        "topic": topic,
        "partition": partition,
        "first_offset": records[0].offset,
        "last_offset": records[-1].offset,
        "record_count": len(records),
        "uncompressed_bytes": sum(logical_size(r) for r in records),
        "min_timestamp": min(r.timestamp for r in records),
        "max_timestamp": max(r.timestamp for r in records),
        "tombstones": sum(r.value is None for r in records),
        "min_delete_horizon": min_delete_horizon(records),
    }


def min_delete_horizon(records: list[Record]) -> int | None:
    """The earliest horizon of a tombstone; INT64_MAX (never reached) is written as none."""
    horizons = [r.delete_horizon for r in records if r.value is None]
    earliest = min((h for h in horizons if h is not None), default=None)
    return None if earliest == INT64_MAX else earliest


def meta_fields(m: SectionMeta) -> dict[str, object]:
    d = m.to_json()
    del d["position"], d["length"]
    return d


class CountingRange:
    """``read_range`` over bytes, counting calls and bytes fetched."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        return self.data[start:end]


def records_of(batches: list[pa.RecordBatch]) -> list[Record]:
    return [r for b in batches for r in batch_to_records(b)]


# --- strategies --------------------------------------------------------------------------

blobs = st.one_of(
    st.binary(max_size=24),
    st.binary(max_size=24),
    st.binary(max_size=24),
    st.builds(
        lambda n, seed: random.Random(seed).randbytes(n),
        st.integers(500, 20_000),
        st.integers(0, 2**32),
    ),
    st.integers(1, 20_000).map(lambda n: bytes(n)),  # compresses more than 64x
)
headers = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
).map(tuple)
timestamps = st.one_of(
    st.integers(1_700_000_000_000, 1_700_000_100_000), st.integers(INT64_MIN, INT64_MAX)
)
deltas = st.one_of(st.just(1), st.integers(1, 9), st.integers(1, 2**40))


@st.composite
def offsets_list(draw: st.DrawFn, max_records: int) -> list[int]:
    n = draw(st.integers(1, max_records))
    steps = draw(st.lists(deltas, min_size=n - 1, max_size=n - 1))
    base = draw(st.one_of(st.integers(0, 100), st.integers(INT64_MIN, INT64_MAX)))
    base = min(base, INT64_MAX - sum(steps))
    out = [base]
    for s in steps:
        out.append(out[-1] + s)
    return out


@st.composite
def section_records(draw: st.DrawFn, max_records: int = 12) -> list[Record]:
    return [
        Record(
            o,
            draw(timestamps),
            draw(st.one_of(st.none(), blobs)),
            draw(st.one_of(st.none(), blobs)),
            draw(headers),
            draw(st.one_of(st.none(), timestamps)),
        )
        for o in draw(offsets_list(max_records))
    ]


topics = st.text(min_size=1, max_size=8)
partitions = st.one_of(st.integers(0, 3), st.integers(0, 2**31 - 1))
files = st.dictionaries(st.tuples(topics, partitions), section_records(), max_size=5)


def split(records: list[Record], cuts: list[int]) -> list[pa.RecordBatch]:
    """The records as input batches cut at ``cuts`` (repeated cuts give empty batches)."""
    bounds = [0, *sorted(c % (len(records) + 1) for c in cuts), len(records)]
    return [records_to_batch(records[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def write(
    sections: Sections, cuts: list[int], **kw: object
) -> tuple[bytes, FileMeta, list[tuple[tuple[str, int], list[Record]]]]:
    ordered = sorted(sections.items(), key=lambda kv: section_key(*kv[0]))
    sink = io.BytesIO()
    meta = write_file(sink, ((t, p, split(recs, cuts)) for (t, p), recs in ordered), **kw)  # type: ignore[arg-type]
    return sink.getvalue(), meta, ordered


# --- tests -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=files,
    cuts=st.lists(st.integers(0, 100), max_size=4),
    compression=st.sampled_from([None, "zstd", "lz4"]),
    max_batch_bytes=st.sampled_from([1, 40, 300, 1 << 20]),
    known_size=st.booleans(),
)
def test_round_trip_streaming(
    sections: Sections,
    cuts: list[int],
    compression: str | None,
    max_batch_bytes: int,
    known_size: bool,
) -> None:
    data, meta, ordered = write(
        sections,
        cuts,
        compression=compression,
        max_batch_bytes=max_batch_bytes,
        min_compress_bytes=0,
    )
    assert meta.size == len(data)
    assert meta.format_version == FORMAT_VERSION
    assert [(s.topic, s.partition) for s in meta.sections] == [k for k, _ in ordered]
    for s, ((t, p), recs) in zip(meta.sections, ordered, strict=True):
        assert meta_fields(s) == expected_meta(t, p, recs)

    reader = StreamReader(io.BytesIO(data), object_name="f", size=len(data) if known_size else None)
    seen = []
    for section, ((t, p), recs) in zip(reader.sections(), ordered, strict=True):
        assert (section.topic, section.partition) == (t, p)
        assert section.meta is None
        batches = list(section.batches())
        for b in batches:
            assert b.num_rows == 1 or sum(map(logical_size, batch_to_records(b))) <= max_batch_bytes
        assert records_of(batches) == recs
        assert section.offsets is not None
        assert list(section.offsets) == [r.offset for r in recs]
        seen.append(section.meta)
    assert len(seen) == len(ordered)
    assert tuple(seen) == meta.sections
    assert reader.footer == meta
    assert verify_stream(io.BytesIO(data), object_name="f") == meta


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=files,
    cuts=st.lists(st.integers(0, 100), max_size=4),
    compression=st.sampled_from([None, "zstd", "lz4"]),
    max_batch_bytes=st.sampled_from([1, 300, 1 << 20]),
    max_read=st.sampled_from([1, 2000, 16 << 20]),
    data=st.data(),
)
def test_round_trip_ranged(
    sections: Sections,
    cuts: list[int],
    compression: str | None,
    max_batch_bytes: int,
    max_read: int,
    data: st.DataObject,
) -> None:
    raw, meta, ordered = write(
        sections,
        cuts,
        compression=compression,
        max_batch_bytes=max_batch_bytes,
        min_compress_bytes=0,
    )
    rr = CountingRange(raw)
    assert read_footer(rr, len(raw), object_name="f") == meta
    footer_at = meta.sections[-1].position + meta.sections[-1].length if meta.sections else 16
    assert len(rr.calls) == (1 if len(raw) - footer_at <= 64 << 10 else 2)
    for section, (_, recs) in zip(meta.sections, ordered, strict=True):
        offsets = [r.offset for r in recs]
        rr.calls.clear()
        got = records_of(list(read_section(rr, section, object_name="f", max_read=max_read)))
        assert got == recs
        if section.length <= max_read:
            assert rr.calls == [(section.position, section.position + section.length)]
        assert list(read_section_offsets(rr, section, object_name="f")) == offsets
        # Kafka fetch semantics: start at the next present offset >= X.
        candidates = [offsets[0] - 1, offsets[-1] + 1, offsets[-1] + 2**20, INT64_MIN]
        for o in data.draw(st.lists(st.sampled_from(offsets), max_size=3)):
            candidates += [o - 1, o, o + 1]
        for x in candidates:
            expected = [r for r in recs if r.offset >= x]
            batches = list(
                read_section(rr, section, object_name="f", from_offset=x, max_read=max_read)
            )
            assert records_of(batches) == expected
            assert all(b.num_rows > 0 for b in batches)


@settings(max_examples=25, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 300), min_size=1, max_size=60, unique=True),
    max_batch_bytes=st.sampled_from([1, 100, 1 << 20]),
)
def test_from_offset_every_position(offsets: list[int], max_batch_bytes: int) -> None:
    """Every starting offset around and inside a section with holes, against the model."""
    offsets.sort()
    recs = [Record(o, o, b"k", b"v" * (o % 7)) for o in offsets]
    sink = io.BytesIO()
    meta = write_file(sink, [("t", 0, [records_to_batch(recs)])], max_batch_bytes=max_batch_bytes)
    raw = sink.getvalue()
    rr = CountingRange(raw)
    section = meta.sections[0]
    present = read_section_offsets(rr, section, object_name="f")
    for x in range(offsets[0] - 2, offsets[-1] + 3):
        expected = [r for r in recs if r.offset >= x]
        assert present.next_present(x) == (expected[0].offset if expected else None)
        assert (x in present) == (x in offsets)
        rr.calls.clear()
        got = records_of(list(read_section(rr, section, object_name="f", from_offset=x)))
        assert got == expected
        assert len(rr.calls) == 1


def test_offsets_spanning_more_than_2_to_32_use_a_64_bit_bitmap() -> None:
    offsets = [5, 6, 2**32 + 5, 2**40, 2**62]
    recs = [Record(o, 0, None, b"x") for o in offsets]
    sink = io.BytesIO()
    meta = write_file(sink, [("big", 7, [records_to_batch(recs[:2]), records_to_batch(recs[2:])])])
    raw = sink.getvalue()
    present = read_section_offsets(CountingRange(raw), meta.sections[0], object_name="f")
    assert present.kind == 2
    assert list(present) == offsets
    assert present.next_present(7) == 2**32 + 5
    assert (
        records_of(
            list(
                read_section(
                    CountingRange(raw), meta.sections[0], object_name="f", from_offset=2**32 + 6
                )
            )
        )
        == recs[3:]
    )
    assert verify_stream(io.BytesIO(raw), object_name="f") == meta


def test_empty_file_round_trips() -> None:
    sink = io.BytesIO()
    meta = FileWriter(sink).finish()
    raw = sink.getvalue()
    assert meta == FileMeta((), len(raw), FORMAT_VERSION)
    assert len(raw) == 16 + 12 + 4 + 20
    assert verify_stream(io.BytesIO(raw), object_name="f") == meta
    assert read_footer(CountingRange(raw), len(raw), object_name="f") == meta


def test_ten_thousand_partitions() -> None:
    n = 10_000

    def batch(p: int) -> pa.RecordBatch:
        return records_to_batch(
            [
                Record(
                    p * 3 + i,
                    1_000 + p,
                    b"key-%d" % i,
                    None if i == 2 else b"v%d" % p,
                    (("h", b"%d" % p),) if i == 0 else (),
                )
                for i in range(3)
            ]
        )

    sink = io.BytesIO()
    meta = write_file(sink, (("orders", p, [batch(p)]) for p in range(n)))
    raw = sink.getvalue()
    assert len(meta.sections) == n

    rr = CountingRange(raw)
    footer = read_footer(rr, len(raw), object_name="f")
    assert footer == meta
    assert [s.partition for s in footer.sections] == list(range(n))
    assert len(rr.calls) == 2  # the footer is larger than the first 64 KiB guess

    middle = footer.sections[n // 2]
    rr.calls.clear()
    got = records_of(list(read_section(rr, middle, object_name="f")))
    assert got == batch_to_records(batch(n // 2))
    assert rr.calls == [(middle.position, middle.position + middle.length)]

    reader = StreamReader(io.BytesIO(raw), object_name="f", size=len(raw))
    count = 0
    for i, section in enumerate(reader.sections()):
        assert (section.topic, section.partition) == ("orders", i)
        if i % 997 == 0:
            assert records_of(list(section.batches())) == batch_to_records(batch(i))
        count += 1
    assert count == n
    assert reader.footer == meta


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_large_section_is_read_in_bounded_windows(compression: str | None) -> None:
    rnd = random.Random(3)
    recs = [Record(i, i, b"k%d" % i, rnd.randbytes(2000)) for i in range(2000)]
    sink = io.BytesIO()
    meta = write_file(
        sink,
        [("t", 0, [records_to_batch(recs)])],
        compression=compression,
        max_batch_bytes=64 << 10,
    )
    raw = sink.getvalue()
    section = meta.sections[0]
    rr = CountingRange(raw)
    max_read = 256 << 10
    got = records_of(
        list(read_section(rr, section, object_name="f", max_read=max_read, from_offset=1500))
    )
    assert got == recs[1500:]
    assert len(rr.calls) > 2
    assert max(end - start for start, end in rr.calls) <= max_read
    # The windows start at the batch holding offset 1500, not at the section's start.
    fetched = sum(end - start for start, end in rr.calls)
    assert fetched < section.length / 2


def test_stream_sections_can_be_skipped_or_partly_read() -> None:
    recs = {p: [Record(o, o, b"k", b"v" * 50) for o in range(p, p + 40)] for p in range(4)}
    sink = io.BytesIO()
    meta = write_file(
        sink, (("t", p, [records_to_batch(r)]) for p, r in recs.items()), max_batch_bytes=500
    )
    raw = sink.getvalue()
    reader = StreamReader(io.BytesIO(raw), object_name="f")
    for section in reader.sections():
        if section.partition == 1:
            it = section.batches()
            first = next(it)
            assert batch_to_records(first)[0] == recs[1][0]
            assert section.meta is None
        elif section.partition == 2:
            section.skip()
            assert section.meta == meta.sections[2]
            assert list(section.batches()) == []
        else:
            assert records_of(list(section.batches())) == recs[section.partition]
    assert reader.footer == meta
