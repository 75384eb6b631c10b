"""Shared blocks (format version 3, FORMAT.md section 13): many small sections in one batch.

Round trips through every reader (streaming, ranged, offset index), the writer's block
layout against a model of it, crafted CRC-valid malformations, every byte flipped and
every truncation of a small file, and the footer's tiling rules for shared ranges.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import pickle
import random
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

import compactor.fileformat.block as block_module
from compactor.fileformat import (
    FileMeta,
    FileWriter,
    FormatError,
    Record,
    SectionMeta,
    StreamReader,
    _sections,
    batch_to_records,
    read_footer,
    read_section,
    read_section_offsets,
    records_to_batch,
    section_key,
    verify_stream,
)
from compactor.fileformat.batches import (
    NO_HORIZON,
    RECORD_OVERHEAD,
    BatchStats,
    batch_stats,
    batching_weight,
    int64_view,
    section_figures,
)
from compactor.fileformat.bitmap import (
    KIND_ROARING32,
    KIND_ROARING64,
    OffsetSet,
    OffsetSetBuilder,
)
from compactor.fileformat.block import encode_section_table
from compactor.fileformat.footer import encode_footer, encode_tail, footer_entry, parse_footer
from compactor.fileformat.framing import (
    FILE_HEADER,
    FILE_TAIL,
    FRAME_HEADER,
    SECTION_END,
    encode_file_header,
    encode_frame,
)
from compactor.fileformat.ipc import BatchEncoder
from compactor.fileformat.offset_index import (
    IndexBuilder,
    OffsetIndex,
    build_index,
    decode_index,
    encode_index,
    read_from_batch,
)
from compactor.fileformat.ranged import TAIL_READ
from compactor.fileformat.reader import SharedSectionReader
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.section import (
    FLAG_HORIZON,
    TRAILER_FIXED,
    TrailerHead,
    dense_bitmap,
    encode_trailer,
    is_dense_bitmap,
)

NAME = "bucket/data/shared.cf"
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
VERSION_AT = 8  # the file header's version field
TAIL_VERSION_FROM_END = FILE_TAIL.size - 8  # the tail's version field, from the file's end
HAS_BLOCK_BYTES = "block_bytes" in inspect.signature(FileWriter).parameters


def writer_sizes(block_bytes: int, max_batch_bytes: int | None = None) -> dict[str, Any]:
    """FileWriter arguments for blocks of at most ``block_bytes`` (logical bytes): its
    ``block_bytes`` where the writer has one (then ``max_batch_bytes`` bounds only framed
    batches), else ``max_batch_bytes``, which bounds both."""
    if HAS_BLOCK_BYTES:
        return {"block_bytes": block_bytes, "max_batch_bytes": max_batch_bytes or block_bytes}
    return {"max_batch_bytes": block_bytes}


# --- model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One section as written: its records, cut into the batches given to write_batch."""

    topic: str
    partition: int
    parts: tuple[tuple[Record, ...], ...]
    sliced: bool = False
    """Give write_batch slices of one batch of all the records rather than fresh batches."""

    @property
    def records(self) -> list[Record]:
        return [r for part in self.parts for r in part]

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def logical_size(r: Record) -> int:
    size = 16 + len(r.key or b"") + len(r.value or b"")
    return size + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)


def section_bytes(spec: Spec) -> int:
    return sum(logical_size(r) for r in spec.records)


def section_weight(spec: Spec) -> int:
    """Its batching weight (FORMAT.md 6.2): logical bytes plus 8 per header, what the
    writer holds sections and cuts blocks by."""
    return section_bytes(spec) + 8 * sum(len(r.headers) for r in spec.records)


def min_delete_horizon(records: Sequence[Record]) -> int | None:
    horizons = [r.delete_horizon for r in records if r.value is None]
    earliest = min((h for h in horizons if h is not None), default=None)
    return None if earliest == INT64_MAX else earliest


def expected_fields(spec: Spec) -> dict[str, object]:
    records = spec.records
    return {
        "topic": spec.topic,
        "partition": spec.partition,
        "first_offset": records[0].offset,
        "last_offset": records[-1].offset,
        "record_count": len(records),
        "uncompressed_bytes": section_bytes(spec),
        "min_timestamp": min(r.timestamp for r in records),
        "max_timestamp": max(r.timestamp for r in records),
        "tombstones": sum(r.value is None for r in records),
        "min_delete_horizon": min_delete_horizon(records),
    }


def meta_fields(m: SectionMeta) -> dict[str, object]:
    d = m.to_json()
    del d["position"], d["length"]
    return d


def expected_groups(specs: Sequence[Spec], share_below: int, block_limit: int) -> list[int]:
    """The model of the writer's layout: per section, which group (block or framed
    section) of the file holds it. A section lighter than ``share_below`` waits in the
    open block, which is written before a section that would make it heavier than
    ``block_limit`` and before any framed section; weights are batching weights."""
    groups: list[int] = []
    group = -1
    block_bytes: int | None = None  # None: no open block
    for spec in specs:
        size = section_weight(spec)
        if size < share_below:
            if block_bytes is None or block_bytes + size > block_limit:
                group += 1
                block_bytes = 0
            block_bytes += size
        else:
            group += 1
            block_bytes = None
        groups.append(group)
    return groups


def records_of(batches: Iterable[pa.RecordBatch]) -> list[Record]:
    return [r for b in batches for r in batch_to_records(b)]


class CountingRange:
    """``read_range`` over bytes, counting its calls."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        return self.data[start:end]


def ranged(data: bytes) -> Callable[[int, int], bytes]:
    return lambda a, b: data[a:b]


def format_error(fn: Callable[[], object], reason: str | None = None) -> FormatError:
    """Runs ``fn``, which must raise FormatError (nothing else) whose reason has ``reason``."""
    try:
        fn()
    except FormatError as e:
        assert e.object_name == NAME
        assert str(e) == f"{NAME}: byte {e.position}: {e.reason}"
        if reason is not None:
            assert reason in e.reason, e.reason
        return e
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{type(e).__name__} instead of FormatError: {e!r}")
    pytest.fail("no FormatError")


# --- writing ------------------------------------------------------------------------------


@dataclass
class Written:
    data: bytes
    meta: FileMeta
    returned: list[SectionMeta | None]
    """What write_section returned for each section."""
    encode_ahead: bool
    index: OffsetIndex
    """The offset index the writer reported as it wrote."""


def write(
    specs: Sequence[Spec],
    *,
    share_below: int,
    block_bytes: int,
    max_batch_bytes: int | None = None,
    compression: str | None = "lz4",
    min_compress_bytes: int = 256,
    encode_ahead: bool = False,
) -> Written:
    sink = io.BytesIO()
    builder = IndexBuilder()
    writer = FileWriter(
        sink,
        object_name=NAME,
        compression=compression,
        min_compress_bytes=min_compress_bytes,
        encode_ahead=encode_ahead,
        index=builder,
        share_below=share_below,
        **writer_sizes(block_bytes, max_batch_bytes),
    )
    returned: list[SectionMeta | None] = []
    try:
        for spec in specs:
            if spec.sliced:
                whole = records_to_batch(spec.records)
                batches, at = [], 0
                for part in spec.parts:
                    batches.append(whole.slice(at, len(part)))
                    at += len(part)
            else:
                batches = [records_to_batch(part) for part in spec.parts]
            returned.append(writer.write_section(spec.topic, spec.partition, batches))
        meta = writer.finish()
    finally:
        writer.close()
    assert writer.footer_crc is not None
    index = builder.build(meta, writer.footer_crc)
    return Written(sink.getvalue(), meta, returned, encode_ahead, index)


def gen_records(rnd: random.Random, n: int, keys: int) -> list[Record]:
    """``n`` records of every kind: null and repeated keys, tombstones with and without a
    delete horizon (the never-reached INT64_MAX too), empty, random and very compressible
    values, headers with null values, offset gaps (some past 2^32), extreme timestamps."""
    offset = rnd.choice([0, rnd.randrange(1 << 40), -(1 << 62), rnd.randrange(-1000, 1000)])
    out = []
    for _ in range(n):
        tombstone = rnd.random() < 0.2
        if tombstone:
            value = None
            horizon = rnd.choice([None, None, rnd.randrange(-(1 << 50), 1 << 50), INT64_MAX])
        else:
            value = rnd.choice(
                [b"", rnd.randbytes(rnd.randrange(1, 40)), bytes(rnd.randrange(1, 300))]
            )
            horizon = None if rnd.random() < 0.9 else rnd.randrange(1 << 40)
        headers: tuple[tuple[str, bytes | None], ...] = tuple(
            (rnd.choice(["h", "trace", "ü", ""]), rnd.choice([None, b"", rnd.randbytes(4)]))
            for _ in range(rnd.choice([0, 0, 0, 1, 2]))
        )
        out.append(
            Record(
                offset,
                rnd.choice(
                    [1_700_000_000_000 + rnd.randrange(-5000, 5000), INT64_MIN, INT64_MAX]
                    if rnd.random() < 0.05
                    else [1_700_000_000_000 + rnd.randrange(-5000, 5000)]
                ),
                None if rnd.random() < 0.1 else b"key-%d" % rnd.randrange(keys),
                value,
                headers,
                horizon,
            )
        )
        offset += rnd.choice([1, 1, 1, 2, 3, 17]) if rnd.random() < 0.98 else 1 << 33
    return out


def split_records(rnd: random.Random, records: list[Record], parts: int) -> list[list[Record]]:
    """``records`` cut into ``parts`` runs (some possibly empty)."""
    cuts = sorted(rnd.randrange(len(records) + 1) for _ in range(parts - 1))
    bounds = [0, *cuts, len(records)]
    return [records[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


TOPICS = ["a", "orders", "z", "ü", "日本"]


@st.composite
def section_specs(draw: st.DrawFn, max_sections: int = 14) -> list[Spec]:
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 40)),
            min_size=1,
            max_size=max_sections,
            unique=True,
        )
    )
    keys.sort(key=lambda k: section_key(*k))
    specs = []
    for topic, partition in keys:
        n = draw(st.one_of(st.integers(1, 3), st.integers(1, 30), st.integers(1, 300)))
        rnd = random.Random(draw(st.integers(0, 2**32)))
        records = gen_records(rnd, n, keys=draw(st.sampled_from([3, 50])))
        parts = split_records(rnd, records, draw(st.integers(1, 4)))
        specs.append(
            Spec(topic, partition, tuple(tuple(p) for p in parts), sliced=draw(st.booleans()))
        )
    return specs


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, object]:
    share_below = draw(st.integers(64, 6000))
    return {
        "share_below": share_below,
        "block_bytes": draw(st.integers(share_below, 6 * share_below)),
        "max_batch_bytes": draw(st.one_of(st.none(), st.integers(100, 20_000))),
        "compression": draw(st.sampled_from([None, "lz4", "zstd"])),
        "min_compress_bytes": draw(st.sampled_from([0, 256, 8192])),
        "encode_ahead": draw(st.booleans()),
    }


# --- 1. round trips -----------------------------------------------------------------------


def check_round_trip(specs: Sequence[Spec], w: Written, share_below: int, block_bytes: int) -> None:
    data, meta = w.data, w.meta
    by_key = {spec.key: spec for spec in specs}

    # The file: version 3 in header, tail and meta; sections in order, laid out as modelled.
    assert meta.format_version == 3
    assert struct.unpack_from("<I", data, VERSION_AT)[0] == 3
    assert struct.unpack_from("<I", data, len(data) - TAIL_VERSION_FROM_END)[0] == 3
    assert meta.size == len(data)
    assert [(s.topic, s.partition) for s in meta.sections] == [spec.key for spec in specs]
    for s, spec in zip(meta.sections, specs, strict=True):
        assert meta_fields(s) == expected_fields(spec)
    groups = expected_groups(specs, share_below, block_bytes)
    ranges = [(s.position, s.length) for s in meta.sections]
    # Sections share a range exactly when the model puts them in one group.
    for i in range(len(specs)):
        for j in range(len(specs)):
            assert (ranges[i] == ranges[j]) == (groups[i] == groups[j]), (i, j, groups, ranges)
    assert len(set(ranges)) == len(set(groups))
    if len(set(groups)) < len(specs):
        assert len(set(ranges)) < len(meta.sections)
    shared = [section_weight(spec) < share_below for spec in specs]
    for s, is_shared, returned in zip(meta.sections, shared, w.returned, strict=True):
        tag = data[s.position : s.position + 4]
        assert tag == (b"SBLK" if is_shared else b"SHDR"), (s, tag)
        # write_section returns None for a shared section, the framed section's meta else,
        # or None where its end waits behind batches being encoded (encode_ahead).
        may_wait = is_shared or w.encode_ahead
        assert returned == s or (returned is None and may_wait), (returned, s)
        assert returned is None or not is_shared
        if returned is not None:
            assert returned.min_delete_horizon == s.min_delete_horizon
    # Blocks are bounded by block_bytes (batching weight of their sections).
    for g in set(groups):
        members = [spec for spec, gg in zip(specs, groups, strict=True) if gg == g]
        if shared[groups.index(g)]:
            assert sum(section_weight(m) for m in members) <= block_bytes

    # verify_stream returns what finish returned, horizons too (they take no part in ==).
    verified = verify_stream(io.BytesIO(data), object_name=NAME, size=len(data))
    assert verified == meta
    assert [s.min_delete_horizon for s in verified.sections] == [
        s.min_delete_horizon for s in meta.sections
    ]

    # Streaming, whole batches.
    reader = StreamReader(io.BytesIO(data), object_name=NAME, size=len(data))
    seen = []
    for section, s, is_shared in zip(reader.sections(), meta.sections, shared, strict=True):
        assert isinstance(section, SharedSectionReader) == is_shared
        assert section.key == section_key(s.topic, s.partition)
        if is_shared:
            # meta and offsets are known before the records are read.
            assert section.meta == s and section.offsets is not None
            assert section.batch_positions == [0]
        batches = list(section.batches())
        if is_shared:
            assert len(batches) == 1
        assert records_of(batches) == by_key[(section.topic, section.partition)].records
        assert section.meta == s
        assert section.meta.min_delete_horizon == s.min_delete_horizon
        assert section.offsets is not None
        assert list(section.offsets) == [
            r.offset for r in by_key[(section.topic, section.partition)].records
        ]
        seen.append((section.topic, section.partition))
    assert seen == [spec.key for spec in specs]
    assert reader.footer == meta

    # Streaming, only some columns or nothing decoded; the footer kept or only checked.
    reader = StreamReader(io.BytesIO(data), object_name=NAME, keep_footer=False)
    for i, section in enumerate(reader.sections()):
        records = by_key[(section.topic, section.partition)].records
        if i % 3 == 0:
            batches = list(section.batches(["key"]))
            assert all(b.schema.names == ["offset", "key"] for b in batches)
            assert [o for b in batches for o in b.column("offset").to_pylist()] == [
                r.offset for r in records
            ]
            assert [k for b in batches for k in b.column("key").to_pylist()] == [
                r.key for r in records
            ]
        elif i % 3 == 1:
            batches = list(section.batches(["timestamp", "value"]))
            assert [v for b in batches for v in b.column("value").to_pylist()] == [
                r.value for r in records
            ]
    assert reader.footer is None and reader.footer_crc is not None

    # Ranged: the footer, each section whole and from offsets, each section's offsets.
    assert read_footer(ranged(data), len(data), object_name=NAME) == meta
    assert read_footer(ranged(data), len(data), object_name=NAME, tail_read=40) == meta
    for s in meta.sections:
        records = by_key[(s.topic, s.partition)].records
        got = records_of(read_section(ranged(data), s, object_name=NAME))
        assert got == records
        # In windows of one batch frame (a block is fetched whole all the same).
        got = records_of(read_section(ranged(data), s, object_name=NAME, max_read=64))
        assert got == records
        offsets = [r.offset for r in records]
        counting = CountingRange(data)
        assert list(read_section_offsets(counting, s, object_name=NAME)) == offsets
        assert len(counting.calls) <= 2
        targets = {offsets[0], offsets[-1], offsets[len(offsets) // 2]}
        targets |= {offsets[len(offsets) // 2] + 1, offsets[-1] + 1}
        if offsets[0] > INT64_MIN:
            targets.add(offsets[0] - 1)
        for x in sorted(targets):
            got = records_of(read_section(ranged(data), s, object_name=NAME, from_offset=x))
            assert got == [r for r in records if r.offset >= x], (s, x)

    # The offset index: the writer's equals one built by a read; read_from_batch.
    index = build_index(io.BytesIO(data), object_name=NAME, size=len(data))
    assert index == w.index
    assert decode_index(encode_index(index), NAME + ".idx") == index
    assert index.data_version == 3 and index.data_size == len(data)
    for si, s, is_shared in zip(index.sections, meta.sections, shared, strict=True):
        assert (si.topic, si.partition, si.position, si.length) == (
            s.topic,
            s.partition,
            s.position,
            s.length,
        )
        records = by_key[(s.topic, s.partition)].records
        assert list(si.offsets) == [r.offset for r in records]
        if is_shared:
            assert len(si.batches) == 1
            assert si.batches[0].position == 0
            assert si.batches[0].first_offset == records[0].offset
            assert si.batches[0].max_timestamp == max(r.timestamp for r in records)
        for b, entry in enumerate(si.batches):
            got = records_of(read_from_batch(ranged(data), index, si, b, NAME))
            assert got == [r for r in records if r.offset >= entry.first_offset], (s, b)
        middle = records[len(records) // 2].offset
        found = si.seek_offset(middle)
        assert found is not None and found[0] == middle
        assert si.batches[found[1]].first_offset <= middle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=section_specs(), layout=layouts())
def test_round_trip_through_every_reader(specs: list[Spec], layout: dict[str, object]) -> None:
    w = write(specs, **layout)  # type: ignore[arg-type]
    share_below = layout["share_below"]
    block_bytes = layout["block_bytes"]
    assert isinstance(share_below, int) and isinstance(block_bytes, int)
    groups = expected_groups(specs, share_below, block_bytes)
    framed = sum(section_weight(spec) >= share_below for spec in specs)
    event(f"a block of several sections: {len(set(groups)) < len(groups)}")
    event(f"framed sections: {min(framed, 2)}{'+' if framed >= 2 else ''}")
    event(f"sections: {'1' if len(specs) == 1 else '2-5' if len(specs) <= 5 else '6+'}")
    check_round_trip(specs, w, share_below, block_bytes)


def test_round_trip_fixed_layout_has_blocks_and_framed_sections() -> None:
    """A fixed input whose layout has multi-section blocks, framed sections between them
    and single-section blocks: the hypothesis test above need not draw one."""
    rnd = random.Random(5)
    sizes = [2, 1, 3, 200, 1, 1, 2, 1, 150, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 300, 2]
    specs = []
    for p, n in enumerate(sizes):
        records = gen_records(rnd, n, keys=20)
        parts = split_records(rnd, records, 3)
        specs.append(Spec("t", p, tuple(tuple(x) for x in parts), sliced=p % 2 == 0))
    w = write(specs, share_below=1500, block_bytes=2500, max_batch_bytes=700)
    groups = expected_groups(specs, 1500, 2500)
    sizes_of_groups = [groups.count(g) for g in set(groups)]
    assert max(sizes_of_groups) >= 4 and 1 in sizes_of_groups
    assert any(section_weight(spec) >= 1500 for spec in specs)
    check_round_trip(specs, w, 1500, 2500)


# --- 2. a section that grows past share_below -----------------------------------------------


def simple_records(first: int, n: int, value_size: int = 20, step: int = 1) -> list[Record]:
    return [
        Record(
            first + i * step,
            1_700_000_000_000 + i,
            b"k%d" % (i % 7),
            None if i % 5 == 4 else bytes([i % 256]) * value_size,
            (("h", b"x"),) if i % 3 == 0 else (),
            123 if i % 5 == 4 and i % 2 == 0 else None,
        )
        for i in range(n)
    ]


def test_section_crossing_share_below_mid_section_is_framed_after_the_held_block() -> None:
    small_a = simple_records(0, 2)
    small_b = simple_records(100, 3)
    # Each part weighs about 10 * (16 + 2 + 20 (+ 2)) < 500; the third crosses 1000.
    big_parts = [simple_records(1000 + 10 * k, 10) for k in range(6)]
    small_c = simple_records(5, 1)
    small_d = simple_records(9, 4)
    specs = [
        Spec("t", 0, (tuple(small_a),)),
        Spec("t", 1, (tuple(small_b),)),
        Spec("t", 2, tuple(tuple(p) for p in big_parts)),
        Spec("t", 3, (tuple(small_c),)),
        Spec("t", 4, (tuple(small_d),)),
    ]
    assert section_bytes(specs[2]) > 1000
    assert sum(logical_size(r) for p in big_parts[:2] for r in p) < 1000
    sink = io.BytesIO()
    writer = FileWriter(
        sink,
        object_name=NAME,
        share_below=1000,
        compression="lz4",
        **writer_sizes(block_bytes=2000, max_batch_bytes=2000),
    )
    assert writer.write_section("t", 0, [records_to_batch(small_a)]) is None
    assert writer.write_section("t", 1, [records_to_batch(small_b)]) is None
    assert writer.position == FILE_HEADER.size  # nothing written: both wait in the block
    writer.begin_section("t", 2)
    writer.write_batch(records_to_batch(big_parts[0]))
    writer.write_batch(records_to_batch(big_parts[1]))
    assert writer.position == FILE_HEADER.size  # the section is still held
    # A held section refuses offsets that do not follow its own and stays as it was.
    with pytest.raises(ValueError, match="does not follow"):
        writer.write_batch(records_to_batch(big_parts[1][-1:]))
    assert writer.position == FILE_HEADER.size
    writer.write_batch(records_to_batch(big_parts[2]))
    block_end = writer.position
    assert block_end > FILE_HEADER.size  # the block went out, then the section's header
    for part in big_parts[3:]:
        writer.write_batch(records_to_batch(part))
    framed = writer.end_section()
    assert framed is not None
    assert writer.write_section("t", 3, [records_to_batch(small_c)]) is None
    # A section with no records is refused and the writer goes on.
    writer.begin_section("t", 4)
    writer.write_batch(records_to_batch([]))
    with pytest.raises(ValueError, match="no records"):
        writer.end_section()
    assert writer.write_section("t", 4, [records_to_batch(small_d)]) is None
    meta = writer.finish()
    data = sink.getvalue()

    a, b, c, d, e = meta.sections
    assert (a.position, a.length) == (b.position, b.length) == (FILE_HEADER.size, a.length)
    assert data[a.position : a.position + 4] == b"SBLK"
    assert c == framed and c.position == a.position + a.length
    assert data[c.position : c.position + 4] == b"SHDR"
    assert c.position < block_end  # the section header followed the block at once
    assert (d.position, d.length) == (e.position, e.length) == (c.position + c.length, d.length)
    assert data[d.position : d.position + 4] == b"SBLK"
    assert d.position + d.length < len(data) - FILE_TAIL.size
    assert [meta_fields(s) for s in meta.sections] == [expected_fields(s) for s in specs]

    reader = StreamReader(io.BytesIO(data), object_name=NAME, verify=True)
    kinds = []
    for section, spec in zip(reader.sections(), specs, strict=True):
        kinds.append(isinstance(section, SharedSectionReader))
        assert records_of(list(section.batches())) == spec.records
        if not kinds[-1]:
            # The held batches were framed like any others (max_batch_bytes 2000).
            assert len(section.batch_positions) >= 2
    assert kinds == [True, True, False, True, True]
    assert reader.footer == meta
    for s, spec in zip(meta.sections, specs, strict=True):
        assert records_of(read_section(ranged(data), s, object_name=NAME)) == spec.records
    check_round_trip(
        specs,
        Written(
            data,
            meta,
            [None, None, framed, None, None],
            False,
            build_index(io.BytesIO(data), object_name=NAME, size=len(data)),
        ),
        1000,
        2000,
    )


def test_first_batch_past_share_below_frames_the_section_after_the_block() -> None:
    specs = [
        Spec("a", 0, (tuple(simple_records(0, 1)),)),
        Spec("a", 1, (tuple(simple_records(0, 200)),)),  # one batch, far past share_below
        Spec("b", 0, (tuple(simple_records(0, 1)),)),
    ]
    w = write(specs, share_below=300, block_bytes=1000)
    a, big, b = w.meta.sections
    assert w.returned[0] is None and w.returned[1] == big and w.returned[2] is None
    assert a.position == FILE_HEADER.size and big.position == a.position + a.length
    assert b.position == big.position + big.length
    check_round_trip(specs, w, 300, 1000)


# --- 3. a section table longer than the first ranged read -----------------------------------


def test_offsets_of_a_block_whose_table_exceeds_the_tail_read() -> None:
    n = 2500
    specs = [
        Spec("t", p, ((Record(7 * p, 1_700_000_000_000 + p, b"k", b"v%d" % p),),)) for p in range(n)
    ]
    w = write(specs, share_below=1 << 10, block_bytes=1 << 20)
    data, meta = w.data, w.meta
    ranges = {(s.position, s.length) for s in meta.sections}
    assert len(ranges) == 1  # one block holds them all
    (position, length) = ranges.pop()
    end = position + length
    table_length, magic = SECTION_END.unpack_from(data, end - SECTION_END.size)
    assert magic == b"BEND"
    assert table_length > TAIL_READ  # so the table is not in the first read
    assert length > TAIL_READ
    rnd = random.Random(3)
    for i in sorted({0, 1, n // 2, n - 1, *rnd.sample(range(n), 25)}):
        s = meta.sections[i]
        counting = CountingRange(data)
        assert list(read_section_offsets(counting, s, object_name=NAME)) == [7 * i]
        assert 1 <= len(counting.calls) <= 2, counting.calls
        assert all(position <= a <= b <= end for a, b in counting.calls)
    for i in (0, n - 1):
        got = records_of(read_section(ranged(data), meta.sections[i], object_name=NAME))
        assert got == list(specs[i].records)
    assert verify_stream(io.BytesIO(data), object_name=NAME, size=len(data)) == meta
    assert read_footer(ranged(data), len(data), object_name=NAME) == meta


# --- 4. every byte flipped, every truncation ------------------------------------------------


def build_small() -> tuple[bytes, FileMeta, list[Spec]]:
    """Two blocks (three and two sections) around a framed section of two batches, one
    compressed block and one plain."""
    specs = [
        Spec("a", 0, (tuple(simple_records(0, 2, value_size=30)),)),
        Spec("a", 1, (tuple(simple_records(10, 1, value_size=2)),)),
        Spec("a", 2, (tuple(simple_records(3, 3, value_size=5)),)),
        Spec("b", 0, (tuple(simple_records(50, 8, value_size=30)),)),
        Spec("c", 0, (tuple(simple_records(0, 2, value_size=3)),)),
        Spec("c", 7, (tuple(simple_records(1, 1, value_size=4)),)),
    ]
    w = write(specs, share_below=150, block_bytes=300, min_compress_bytes=120)
    return w.data, w.meta, specs


SMALL, SMALL_META, SMALL_SPECS = build_small()
SMALL_RECORDS = {spec.key: spec.records for spec in SMALL_SPECS}
SMALL_FOOTER_AT = SMALL_META.sections[-1].position + SMALL_META.sections[-1].length


def frames_of(data: bytes, at: int = FILE_HEADER.size) -> list[tuple[int, bytes, int]]:
    """(position, tag, payload length) of every frame of valid version-3 bytes from
    ``at`` (by default a whole file's) up to the footer or the bytes' end; a trailer's or
    table's frame is followed by its section or block end."""
    out = []
    pos = at
    while pos < len(data):
        tag, length, _ = FRAME_HEADER.unpack_from(data, pos)
        out.append((pos, tag, length))
        pos += FRAME_HEADER.size + length
        if tag in (b"STRL", b"STBL"):
            pos += SECTION_END.size
        if tag == b"FOOT":
            break
    return out


def stream_all(data: bytes, size: int | None) -> FileMeta:
    reader = StreamReader(io.BytesIO(data), object_name=NAME, size=size)
    for section in reader.sections():
        for _ in section.batches():
            pass
    assert reader.footer is not None
    return reader.footer


def read_records(data: bytes, s: SectionMeta) -> list[Record]:
    return records_of(read_section(ranged(data), s, object_name=NAME))


def test_small_file_has_what_the_corruption_tests_need() -> None:
    tags = [t for _, t, _ in frames_of(SMALL)]
    assert tags.count(b"SBLK") == 2 and tags.count(b"STBL") == 2
    assert tags.count(b"SHDR") == 1 and tags.count(b"BTCH") == 2
    blocks = [payload for p, t, n in frames_of(SMALL) if t == b"SBLK" for payload in [(p, n)]]
    payloads = [SMALL[p + FRAME_HEADER.size : p + FRAME_HEADER.size + n] for p, n in blocks]
    assert any(b"\x04\x22\x4d\x18" in x for x in payloads)  # an lz4-compressed block
    assert any(b"\x04\x22\x4d\x18" not in x for x in payloads)
    assert len({(s.position, s.length) for s in SMALL_META.sections}) == 3
    assert stream_all(SMALL, len(SMALL)) == SMALL_META
    assert len(SMALL) < 8000


def crc_protected(data: bytes) -> set[int]:
    """Positions whose flip only a CRC can catch: frame payloads and CRC fields."""
    out: set[int] = set()
    for pos, _, length in frames_of(data):
        out.update(range(pos + 8, pos + FRAME_HEADER.size + length))
    return out


def table_ranges(data: bytes) -> list[range]:
    """Each block's table frame and block end."""
    out = []
    for pos, tag, length in frames_of(data):
        if tag == b"STBL":
            out.append(range(pos, pos + FRAME_HEADER.size + length + SECTION_END.size))
    return out


def test_every_byte_flipped_in_a_small_version_3_file_is_a_format_error() -> None:
    protected = crc_protected(SMALL)
    tables = table_ranges(SMALL)
    n = len(SMALL)
    for pos in range(n):
        bad = bytearray(SMALL)
        bad[pos] ^= 1 << (pos % 8)
        data = bytes(bad)
        e = format_error(lambda: verify_stream(io.BytesIO(data), object_name=NAME))  # noqa: B023
        if pos in protected:
            assert "checksum mismatch" in e.reason, (pos, e.reason)
        if pos % 3 == 0:  # the same code paths as verify_stream, fewer checks
            format_error(lambda: stream_all(data, n))  # noqa: B023
        if pos % 5 == 0:
            format_error(
                lambda: build_index(io.BytesIO(data), object_name=NAME, size=n)  # noqa: B023
            )
        if pos < FILE_HEADER.size or pos >= SMALL_FOOTER_AT:
            format_error(lambda: read_footer(ranged(data), n, object_name=NAME))  # noqa: B023
        else:
            assert read_footer(ranged(data), n, object_name=NAME) == SMALL_META
        for s in SMALL_META.sections:
            expected = SMALL_RECORDS[(s.topic, s.partition)]
            inside = s.position <= pos < s.position + s.length
            if inside:
                format_error(lambda: read_records(data, s))  # noqa: B023
                if any(pos in t for t in tables):
                    format_error(
                        lambda: read_section_offsets(ranged(data), s, object_name=NAME)  # noqa: B023
                    )
            elif pos % 4 == 0:  # other sections read as before (a sample: it is slow)
                assert read_records(data, s) == expected
                got = read_section_offsets(ranged(data), s, object_name=NAME)
                assert list(got) == [r.offset for r in expected]


def test_every_truncation_of_a_small_version_3_file_is_a_format_error() -> None:
    full = len(SMALL)
    for n in range(full):
        cut = SMALL[:n]
        format_error(lambda: stream_all(cut, None))  # noqa: B023
        format_error(lambda: stream_all(cut, n))  # noqa: B023
        format_error(lambda: read_footer(ranged(cut), n, object_name=NAME))  # noqa: B023
        if n % 4 == 0:  # the same code paths as above, with other checks on top
            format_error(lambda: stream_all(cut, full))  # noqa: B023
            format_error(lambda: verify_stream(io.BytesIO(cut), object_name=NAME))  # noqa: B023
        for s in SMALL_META.sections:
            if s.position + s.length <= n:
                if n % 8 == 0:  # a sample: it is slow
                    assert read_records(cut, s) == SMALL_RECORDS[(s.topic, s.partition)]
            else:
                format_error(lambda: read_records(cut, s))  # noqa: B023
                format_error(
                    lambda: read_section_offsets(ranged(cut), s, object_name=NAME)  # noqa: B023
                )


def test_random_multi_byte_corruptions_are_format_errors() -> None:
    rnd = random.Random(20240612)
    for _ in range(300):
        pos = rnd.randrange(len(SMALL))
        end = min(pos + rnd.randint(1, 16), len(SMALL))
        bad = bytearray(SMALL)
        for i in range(pos, end):
            bad[i] = rnd.choice([b for b in range(256) if b != SMALL[i]])
        data = bytes(bad)
        format_error(lambda: verify_stream(io.BytesIO(data), object_name=NAME))  # noqa: B023
        for s in SMALL_META.sections:
            if pos < s.position + s.length and s.position < end:
                format_error(lambda: read_records(data, s))  # noqa: B023
            else:
                assert read_records(data, s) == SMALL_RECORDS[(s.topic, s.partition)]


# --- 5. crafted, CRC-valid malformations ----------------------------------------------------


def block_file() -> tuple[bytes, FileMeta, list[Spec]]:
    """A file of one block of three sections and nothing else."""
    specs = [
        Spec("a", 0, (tuple(simple_records(0, 3, value_size=4)),)),
        Spec("a", 1, (tuple(simple_records(10, 4, value_size=4, step=2)),)),
        Spec("b", 0, (tuple(simple_records(5, 2, value_size=4)),)),
    ]
    w = write(specs, share_below=1000, block_bytes=4000, compression=None)
    return w.data, w.meta, specs


BLOCK, BLOCK_META, BLOCK_SPECS = block_file()
BLOCK_INDEX = build_index(io.BytesIO(BLOCK), object_name=NAME, size=len(BLOCK))


Entry = tuple[str, int, bytes]
"""A section table entry: topic, partition, trailer payload."""


@dataclass(frozen=True)
class BlockParts:
    batch: bytes
    """The SBLK payload."""
    entries: list[Entry]
    """The STBL payload's entries."""


def block_parts(data: bytes) -> BlockParts:
    (sblk_at, sblk_tag, sblk_len), (stbl_at, stbl_tag, stbl_len), _ = frames_of(data)
    assert (sblk_tag, stbl_tag) == (b"SBLK", b"STBL")
    batch = data[sblk_at + FRAME_HEADER.size : sblk_at + FRAME_HEADER.size + sblk_len]
    table = data[stbl_at + FRAME_HEADER.size : stbl_at + FRAME_HEADER.size + stbl_len]
    (count,) = struct.unpack_from("<I", table)
    entries, at = [], 4
    for _ in range(count):
        (n,) = struct.unpack_from("<H", table, at)
        topic = table[at + 2 : at + 2 + n].decode()
        partition, length = struct.unpack_from("<iI", table, at + 2 + n)
        at += 2 + n + 8
        entries.append((topic, partition, table[at : at + length]))
        at += length
    assert at == len(table)
    assert encode_section_table(entries) == table
    return BlockParts(batch, entries)


def trailer_of(records: Sequence[Record], index: list[tuple[int, int]] | None = None) -> bytes:
    """The version-2 trailer payload of ``records`` with this batch index (default: one
    batch at position 0, a shared section's)."""
    batch = records_to_batch(records)
    stats = batch_stats(batch)
    builder = OffsetSetBuilder(stats.first_offset)
    builder.add(batch.column(0), stats.first_offset, stats.last_offset)
    return encode_trailer(stats, index or [(stats.first_offset, 0)], builder.build())


def assemble(
    batch: bytes,
    table: bytes,
    metas: Sequence[SectionMeta],
    *,
    table_tag: bytes = b"STBL",
    end_length: Callable[[int], int] = lambda n: n,
    version: int = 3,
) -> tuple[bytes, list[SectionMeta]]:
    """A file of one block (``batch`` and ``table`` payloads in CRC-valid frames) and a
    valid footer listing ``metas`` at the block's range; ``end_length`` maps the table
    frame's length to what the block end records."""
    table_frame = encode_frame(table_tag, table)
    block = (
        encode_frame(b"SBLK", batch)
        + table_frame
        + SECTION_END.pack(end_length(len(table_frame)), b"BEND")
    )
    placed = [replace(m, position=FILE_HEADER.size, length=len(block)) for m in metas]
    footer = encode_frame(b"FOOT", encode_footer(placed, version))
    data = encode_file_header(version) + block + footer + encode_tail(footer, version)
    return data, placed


def plain(records: Sequence[Record]) -> bytes:
    return BatchEncoder(None).encode(records_to_batch(records), 0)


def all_records() -> list[Record]:
    return [r for spec in BLOCK_SPECS for r in spec.records]


def test_assemble_rebuilds_the_block_file_byte_for_byte() -> None:
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    data, metas = assemble(parts.batch, table, BLOCK_META.sections)
    assert data == BLOCK and metas == list(BLOCK_META.sections)
    assert parts.batch == plain(all_records())
    assert parts.entries == [(s.topic, s.partition, trailer_of(s.records)) for s in BLOCK_SPECS]
    assert [len(s.records) for s in BLOCK_SPECS] == [3, 4, 2]


def check_rejected(
    data: bytes,
    metas: Sequence[SectionMeta],
    reason: str,
    *,
    ranged_reason: str | None = None,
    offsets_reason: str | None = "",
    index_sees_it: bool = True,
) -> None:
    """Every reader of the block rejects ``data``, the streaming ones and ``read_section``
    with ``reason``. ``offsets_reason`` None: the fault is not in the table, so reading
    only the table need not see it; ``index_sees_it`` False: building the offset index
    (which decodes only offsets and timestamps, so checks no stats) need not see it."""
    e = format_error(lambda: verify_stream(io.BytesIO(data), object_name=NAME), reason)
    assert FILE_HEADER.size <= e.position < len(data)
    format_error(lambda: stream_all(data, len(data)), reason)
    if index_sees_it:
        format_error(lambda: build_index(io.BytesIO(data), object_name=NAME, size=len(data)))
    for s in metas:
        format_error(lambda: read_records(data, s), ranged_reason or reason)  # noqa: B023
        if offsets_reason is not None:
            format_error(
                lambda: read_section_offsets(ranged(data), s, object_name=NAME),  # noqa: B023
                offsets_reason or None,
            )
    # The index of the valid file, pointed at these bytes: read_from_batch rejects them.
    index = BLOCK_INDEX
    for si, s in zip(index.sections, metas, strict=False):
        si = replace(si, position=s.position, length=s.length)
        format_error(lambda: list(read_from_batch(ranged(data), index, si, 0, NAME)))  # noqa: B023


def test_table_entries_out_of_order() -> None:
    parts = block_parts(BLOCK)
    e = parts.entries
    for order in [(1, 0, 2), (0, 2, 1), (0, 0, 2), (0, 1, 1)]:
        table = encode_section_table([e[i] for i in order])
        metas = [BLOCK_META.sections[i] for i in order]
        data, placed = assemble(parts.batch, table, metas)
        check_rejected(data, placed, "out of order in the block", offsets_reason="out of order")


def test_table_row_counts_that_do_not_sum_to_the_batch_rows() -> None:
    parts = block_parts(BLOCK)
    e = parts.entries
    records = all_records()
    # The table lists fewer rows than the batch has (its last section left out).
    table = encode_section_table(e[:2])
    data, placed = assemble(parts.batch, table, BLOCK_META.sections[:2])
    check_rejected(data, placed, "shared batch has 9 rows, its table 7", offsets_reason=None)
    # The batch has a row more than the table: after the last section, or in the middle.
    table = encode_section_table(e)
    extra = replace(records[-1], offset=records[-1].offset + 1)
    data, placed = assemble(plain([*records, extra]), table, BLOCK_META.sections)
    check_rejected(data, placed, "shared batch has 10 rows, its table 9", offsets_reason=None)
    middle = replace(records[3], offset=records[3].offset + 1)
    data, placed = assemble(plain([*records[:4], middle, *records[4:]]), table, BLOCK_META.sections)
    check_rejected(data, placed, "shared batch has 10 rows, its table 9", offsets_reason=None)
    # A row fewer.
    data, placed = assemble(plain(records[:-1]), table, BLOCK_META.sections)
    check_rejected(data, placed, "shared batch has 8 rows, its table 9", offsets_reason=None)


def test_batch_rows_that_disagree_with_the_table() -> None:
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    records = all_records()
    assert [r.offset for r in records[3:7]] == [10, 12, 14, 16]
    # The second section's first offset is not its trailer's.
    moved = [*records[:3], replace(records[3], offset=11), *records[4:]]
    data, placed = assemble(plain(moved), table, BLOCK_META.sections)
    check_rejected(
        data, placed, "holds offsets 11..16, its trailer says 10..16", offsets_reason=None
    )
    # Its offsets descend inside it, first and last as the trailer says.
    descending = [*records[:4], replace(records[4], offset=15), *records[5:]]
    data, placed = assemble(plain(descending), table, BLOCK_META.sections)
    check_rejected(
        data, placed, "offsets do not strictly increase in a section", offsets_reason=None
    )
    # A value turned into a tombstone: the table's stats no longer describe the records.
    assert records[0].value is not None
    tomb = [replace(records[0], value=None), *records[1:]]
    data, placed = assemble(plain(tomb), table, BLOCK_META.sections)
    check_rejected(
        data, placed, "disagree with the records", offsets_reason=None, index_sees_it=False
    )


def test_block_end_recording_the_wrong_table_length() -> None:
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    for wrong in (lambda n: n - 1, lambda n: n + 1, lambda n: 0, lambda n: 0xFFFFFFFF):
        data, placed = assemble(parts.batch, table, BLOCK_META.sections, end_length=wrong)
        e = format_error(lambda: verify_stream(io.BytesIO(data), object_name=NAME))  # noqa: B023
        assert "block end records a" in e.reason
        for s in placed:
            format_error(lambda: read_records(data, s), "block end records a")  # noqa: B023
            format_error(lambda: read_section_offsets(ranged(data), s, object_name=NAME))  # noqa: B023


def test_table_trailer_with_two_index_entries_or_a_batch_not_at_zero() -> None:
    parts = block_parts(BLOCK)
    e = parts.entries
    for index in (
        [(10, 0), (12, 1)],
        [(10, 0), (14, 40)],
        [(10, 5)],
    ):
        second = ("a", 1, trailer_of(BLOCK_SPECS[1].records, index))
        table = encode_section_table([e[0], second, e[2]])
        data, placed = assemble(parts.batch, table, BLOCK_META.sections)
        reason = f"indexes {len(index)} batches, not one at position 0"
        check_rejected(data, placed, reason, offsets_reason=reason)


def test_other_malformed_blocks() -> None:
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    # No entries at all.
    data, placed = assemble(parts.batch, struct.pack("<I", 0), BLOCK_META.sections)
    check_rejected(data, placed, "claims 0 sections")
    # More entries claimed than the table holds.
    data, placed = assemble(parts.batch, struct.pack("<I", 4) + table[4:], BLOCK_META.sections)
    check_rejected(data, placed, "section table")
    # Bytes after the last entry.
    data, placed = assemble(parts.batch, table + b"\0", BLOCK_META.sections)
    check_rejected(data, placed, "unexpected bytes after the section table")
    # The table in a frame of another tag.
    data, placed = assemble(parts.batch, table, BLOCK_META.sections, table_tag=b"STRL")
    check_rejected(
        data,
        placed,
        "expected the shared block's section table, found tag",
        ranged_reason="section table",
        offsets_reason="section table",
    )
    # A batch that is not an Arrow message.
    data, placed = assemble(b"\xff" * 64, table, BLOCK_META.sections)
    check_rejected(data, placed, "", offsets_reason=None)
    # Batches of the wrong schema: a null timestamp, no delete_horizon, int32 timestamps.
    good = records_to_batch(all_records())
    timestamps = good.column(1).to_pylist()
    timestamps[4] = None
    fields = list(RECORD_SCHEMA)
    null_timestamp = pa.RecordBatch.from_arrays(
        [good.column(0), pa.array(timestamps, pa.int64()), *good.columns[2:]],
        schema=pa.schema([fields[0], fields[1].with_nullable(True), *fields[2:]]),
    )
    without_horizon = pa.RecordBatch.from_arrays(good.columns[:5], names=RECORD_SCHEMA.names[:5])
    int32_timestamps = pa.RecordBatch.from_arrays(
        [good.column(0), pa.array([1] * good.num_rows, pa.int32()), *good.columns[2:]],
        names=RECORD_SCHEMA.names,
    )
    for batch, reason in [
        (null_timestamp, "null offset or timestamp"),
        (without_horizon, "without delete_horizon"),
        (int32_timestamps, "Arrow cannot decode batch"),
    ]:
        data, placed = assemble(BatchEncoder(None).encode(batch, 0), table, BLOCK_META.sections)
        check_rejected(data, placed, reason, offsets_reason=None)


def with_version(data: bytes, version: int) -> bytes:
    """``data`` with the version in its header and its tail rewritten, nothing else."""
    out = bytearray(data)
    struct.pack_into("<I", out, VERSION_AT, version)
    struct.pack_into("<I", out, len(out) - TAIL_VERSION_FROM_END, version)
    return bytes(out)


def test_shared_block_in_a_version_2_file_is_rejected() -> None:
    for data in (BLOCK, SMALL):
        v2 = with_version(data, 2)
        assert v2 != data
        format_error(lambda: verify_stream(io.BytesIO(v2), object_name=NAME), "SBLK")  # noqa: B023
        format_error(lambda: stream_all(v2, None), "SBLK")  # noqa: B023
        format_error(lambda: build_index(io.BytesIO(v2), object_name=NAME, size=len(v2)))  # noqa: B023
        # Its footer lists several sections at one range, which version 2 forbids.
        format_error(lambda: read_footer(ranged(v2), len(v2), object_name=NAME))  # noqa: B023
        format_error(
            lambda: read_footer(ranged(v2), len(v2), object_name=NAME, tail_read=64),  # noqa: B023
            "does not follow",
        )
    # Header and tail disagreeing is rejected too, either way round.
    for version in (2, 3):
        out = bytearray(with_version(BLOCK, version))
        struct.pack_into("<I", out, VERSION_AT, 5 - version)
        bad = bytes(out)
        format_error(lambda: verify_stream(io.BytesIO(bad), object_name=NAME))  # noqa: B023
        format_error(lambda: read_footer(ranged(bad), len(bad), object_name=NAME))  # noqa: B023


def large_file(share_below: int, block_bytes: int) -> tuple[bytes, FileMeta]:
    """A file longer than the first ranged read of its footer (``TAIL_READ``): sections
    of one record alternate with sections of 60, plain (compression would shrink it)."""
    specs = [
        Spec("t", p, (tuple(simple_records(0, 1 if p % 2 == 0 else 60, value_size=30)),))
        for p in range(40)
    ]
    w = write(specs, share_below=share_below, block_bytes=block_bytes, compression=None)
    assert len(w.data) > TAIL_READ
    return w.data, w.meta


@pytest.mark.parametrize(
    ("share_below", "block_bytes", "several_per_block"),
    [
        (5000, 6000, True),  # version 3, blocks of several sections
        (1000, 4000, False),  # version 3, every block holds one section (framed between)
        (0, 4000, False),  # version 2
    ],
)
def test_tail_version_bit_flip_in_a_large_file(
    share_below: int, block_bytes: int, several_per_block: bool
) -> None:
    """Bit 0 of the tail's version turns 2 into 3 and 3 into 2. The streaming reader
    compares it with the header; ``read_footer`` reads the header only of a file that
    fits its first read, so it must see the flip in the footer or not at all."""
    data, meta = large_file(share_below, block_bytes)
    ranges = {(s.position, s.length) for s in meta.sections}
    assert (len(ranges) < len(meta.sections)) == several_per_block
    assert meta.format_version == (3 if share_below else 2)
    assert read_footer(ranged(data), len(data), object_name=NAME) == meta
    bad = bytearray(data)
    bad[len(bad) - TAIL_VERSION_FROM_END] ^= 1
    flipped = bytes(bad)
    format_error(lambda: verify_stream(io.BytesIO(flipped), object_name=NAME), "tail says")
    format_error(lambda: read_footer(ranged(flipped), len(flipped), object_name=NAME))


def test_version_2_writer_writes_no_blocks() -> None:
    specs = [Spec("t", p, (tuple(simple_records(p, 2)),)) for p in range(5)]
    w = write(specs, share_below=0, block_bytes=4000)
    assert w.meta.format_version == 2
    assert struct.unpack_from("<I", w.data, VERSION_AT)[0] == 2
    assert b"SBLK" not in w.data and b"STBL" not in w.data
    assert len({(s.position, s.length) for s in w.meta.sections}) == 5
    assert all(r is not None for r in w.returned)


# --- 6. the footer's tiling -----------------------------------------------------------------


def footer_payload(data: bytes) -> tuple[bytes, int]:
    """The footer payload of a valid file and the footer frame's position."""
    length = struct.unpack_from("<I", data, len(data) - FILE_TAIL.size)[0]
    at = len(data) - FILE_TAIL.size - length
    return data[at + FRAME_HEADER.size : at + length], at


def test_footer_entries_sharing_a_range() -> None:
    payload, at = footer_payload(SMALL)
    base = at + FRAME_HEADER.size
    assert parse_footer(payload, base, NAME, at, 3) == SMALL_META.sections
    # Read as version 2 it lacks nothing but its footer_version: the repeated range is
    # what version 2 rejects.
    format_error(lambda: parse_footer(payload[4:], base + 4, NAME, at, 2), "does not follow")
    format_error(lambda: parse_footer(payload, base, NAME, at, 2))
    assert read_footer(ranged(SMALL), len(SMALL), object_name=NAME) == SMALL_META
    assert (
        read_footer(ranged(SMALL), len(SMALL), object_name=NAME, tail_read=64).format_version == 3
    )

    def footer_of(ranges: list[tuple[int, int]], version: int) -> bytes:
        template = SMALL_META.sections[0]
        return encode_footer(
            [
                replace(template, partition=p, position=pos, length=n)
                for p, (pos, n) in enumerate(ranges)
            ],
            version,
        )

    def parse(ranges: list[tuple[int, int]], end: int, version: int) -> tuple[SectionMeta, ...]:
        return parse_footer(footer_of(ranges, version), 0, NAME, end, version)

    # Consecutive entries of one range: one block. Valid in version 3 only.
    good = [(16, 100), (16, 100), (116, 60), (176, 70), (176, 70), (176, 70)]
    assert len(parse(good, 246, 3)) == 6
    format_error(lambda: parse(good, 246, 2), "does not follow")
    assert len(parse([(16, 100), (116, 60)], 176, 2)) == 2
    # A range listed again after another one, one position with two lengths, a gap after
    # a shared range, a shared range not where the sections start, or not ending where
    # the footer starts: all rejected in version 3 too.
    for ranges, end in [
        ([(16, 100), (116, 60), (16, 100)], 176),
        ([(16, 100), (16, 90), (106, 60)], 166),
        ([(16, 100), (116, 60), (116, 60), (200, 60)], 260),
        ([(20, 100), (20, 100)], 120),
        ([(16, 100), (16, 100)], 120),
    ]:
        format_error(lambda: parse(ranges, end, 3))  # noqa: B023


# --- 7. a materialized view ---------------------------------------------------------------


View = dict[tuple[str, int, bytes | None], bytes | None]


def view_of(sections: Sequence[tuple[str, int, Sequence[Record]]]) -> View:
    view: View = {}
    for topic, partition, records in sections:
        for r in records:
            view[(topic, partition, r.key)] = r.value
    return view


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=section_specs(), layout=layouts())
def test_materialized_view_is_the_one_written(specs: list[Spec], layout: dict[str, object]) -> None:
    expected = view_of([(s.topic, s.partition, s.records) for s in specs])
    w = write(specs, **layout)  # type: ignore[arg-type]
    data = w.data
    reader = StreamReader(io.BytesIO(data), object_name=NAME, verify=True)
    streamed = view_of(
        [(s.topic, s.partition, records_of(list(s.batches()))) for s in reader.sections()]
    )
    assert streamed == expected
    meta = read_footer(ranged(data), len(data), object_name=NAME)
    fetched = view_of([(s.topic, s.partition, read_records(data, s)) for s in meta.sections])
    assert fetched == expected
    live = {k for k, v in expected.items() if v is not None}
    assert {k for k, v in fetched.items() if v is not None} == live


def stats_of_records(records: Sequence[Record]) -> BatchStats:
    """A run of records' stats as the format defines them (FORMAT.md 6.3), in plain
    Python: the model the compiled figures and ``batch_stats`` are checked against."""
    tombstones = [r for r in records if r.value is None]
    horizon = min(
        (r.delete_horizon for r in tombstones if r.delete_horizon is not None), default=None
    )
    return BatchStats(
        first_offset=records[0].offset,
        last_offset=records[-1].offset,
        record_count=len(records),
        tombstones=len(tombstones),
        uncompressed_bytes=sum(
            RECORD_OVERHEAD
            + len(r.key or b"")
            + len(r.value or b"")
            + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
            for r in records
        ),
        min_timestamp=min(r.timestamp for r in records),
        max_timestamp=max(r.timestamp for r in records),
        min_delete_horizon=None if horizon == NO_HORIZON else horizon,
    )


def test_block_figures_are_each_sections_batch_stats() -> None:
    """A block's stats come from one compiled pass over its buffers as Arrow's C data
    interface exports them (``_sections.batch_figures``); each section's must be what
    its records say
    (``stats_of_records``, the format's definitions in plain Python), as must
    ``batch_stats`` of its slice, whatever the batch's offset into its buffers (validity
    bits that do not start on a byte), and the first offset that does not increase inside
    a section must be found, and none at a section's start."""
    rng = random.Random(3)
    for _ in range(200):
        records: list[Record] = []
        spans = []
        for _ in range(rng.randint(1, 40)):
            n = rng.randint(1, 30)
            spans.append((len(records), n))
            descending = rng.random() < 0.05
            records += [
                Record(
                    rng.randint(0, 3) if descending else o,
                    rng.randint(0, 100),
                    b"k",
                    None if rng.random() < 0.3 else b"v" * rng.randint(0, 20),
                    (("h", b"x"),) if rng.random() < 0.2 else (),
                    delete_horizon=rng.choice([None, 5, 7, (1 << 63) - 1]),
                )
                for o in range(n)
            ]
        skip = rng.randint(0, 9)
        batch = records_to_batch([Record(o, 0, b"x", b"y") for o in range(skip)] + records)
        batch = batch.slice(skip)
        expected = [stats_of_records(records[a : a + n]) for a, n in spans]
        assert [batch_stats(batch.slice(a, n)) for a, n in spans] == expected
        offsets = [r.offset for r in records]
        starts = {a for a, _ in spans}
        descent = next(
            (r for r in range(1, len(records)) if r not in starts and offsets[r] <= offsets[r - 1]),
            -1,
        )
        seen_descent, figures = section_figures(batch, spans)
        assert seen_descent == descent
        assert [BatchStats(*f) for f in figures] == expected
        # compare=True: the first section whose tuple does not begin with its figures
        entries = [(*f, a, n) for f, (a, n) in zip(figures, spans, strict=True)]
        arrays = batch.__arrow_c_array__()
        assert _sections.batch_figures(arrays, entries, 8, 9, compare=True) == (descent, -1)
        offsets_only = _sections.figures(entries, 8, 9, int64_view(batch.column(0)))
        assert offsets_only == (descent, [f[:2] for f in figures])
        bad = rng.randrange(len(entries))
        field = rng.randrange(8)
        wrong = list(entries[bad])
        was = wrong[field]
        wrong[field] = rng.choice(
            [
                5 if was is None else None,
                1.0 * (was or 0),
                (was or 0) + rng.choice([-1, 1, 1 << 64]),
            ]
        )
        entries[bad] = tuple(wrong)
        assert _sections.batch_figures(arrays, entries, 8, 9, compare=True) == (descent, bad)


def test_a_bitmap_that_disagrees_with_its_trailer_is_rejected_by_a_whole_read() -> None:
    """FORMAT.md 6.4: a reader checks a trailer's bitmap against its stats. A reader on
    its own parses a shared section's bitmap lazily, and decoding a block whole checks
    every section's. (A job's phase-1 pointer checks every block's as it reads its table,
    and its phase-2 pointer leaves them to it: ``test_worker_failures``.)"""
    parts = block_parts(BLOCK)
    e = parts.entries
    records = BLOCK_SPECS[1].records
    stats = batch_stats(records_to_batch(records))
    builder = OffsetSetBuilder(stats.first_offset)
    builder.add(
        pa.array([stats.first_offset, stats.last_offset], pa.int64()),
        stats.first_offset,
        stats.last_offset,
    )  # 2 offsets where the trailer counts more
    assert stats.record_count > 2
    bad = encode_trailer(stats, [(stats.first_offset, 0)], builder.build())
    table = encode_section_table([e[0], (e[1][0], e[1][1], bad), e[2]])
    data, placed = assemble(parts.batch, table, BLOCK_META.sections)
    reason = "disagrees with the trailer stats"
    # Reading one section's offsets reads only its own bitmap.
    check_rejected(data, placed, reason, offsets_reason=None, index_sees_it=False)
    format_error(lambda: read_section_offsets(ranged(data), placed[1], object_name=NAME), reason)


def test_a_dense_bitmap_is_checked_by_its_bytes_and_any_other_by_its_offsets() -> None:
    """``TrailerHead.check_bitmap`` passes a dense section's bitmap (every offset from
    first to last) by comparing its bytes with ``dense_bitmap``. Those must be the bytes
    the writer's builder makes for dense offsets that come in one batch, or the shortcut
    would never be taken; offsets that came in pieces may serialize otherwise (roaring
    picks between equal-sized containers by history), and still pass the whole check."""
    base = 1_000
    for count in (1, 2, 3, 4, 100, 4_096, 70_000):
        dense = batch_stats(
            records_to_batch([Record(base + i, 0, b"k", b"v") for i in range(count)])
        )
        for cut in sorted({0, count // 3, count - 1}):
            builder = OffsetSetBuilder(base)
            for lo, hi in ((0, cut), (cut, count)):
                if hi > lo:
                    offsets = pa.array(range(base + lo, base + hi), pa.int64())
                    builder.add(offsets, base + lo, base + hi - 1)
            written = builder.build().serialize()
            if cut == 0:
                assert written == dense_bitmap(count)
            TrailerHead(dense, ((base, 0),), 3, KIND_ROARING32, written, 0, NAME).check_bitmap()
        if count > 1:
            # The same bytes under stats with a gap (count offsets over a wider range):
            # not the dense case, so the whole check runs and rejects them.
            gapped = replace(dense, last_offset=dense.last_offset + 1)
            with pytest.raises(FormatError, match="disagrees with the trailer stats"):
                TrailerHead(
                    gapped, ((base, 0),), 3, KIND_ROARING32, dense_bitmap(count), 0, NAME
                ).check_bitmap()
            # Dense stats with other bytes: the whole check runs and rejects them.
            with pytest.raises(FormatError, match="disagrees with the trailer stats"):
                TrailerHead(
                    dense, ((base, 0),), 3, KIND_ROARING32, dense_bitmap(count - 1), 0, NAME
                ).check_bitmap()


def test_a_block_is_bounded_by_batching_weight_not_only_logical_bytes() -> None:
    """A header weighs 0 logical bytes but costs Arrow 8 bytes of offsets: a section of
    many empty headers is not held for a block past ``share_below`` by its weight, and a
    block is cut by weight, so its Arrow body stays bounded as a batch's is."""
    many_headers = tuple(("", b"") for _ in range(1000))  # 0 logical bytes, 8000 weight
    specs = [
        (p, [Record(p, 0, b"k", b"v", many_headers), Record(p + 1, 0, b"k", b"v", ())])
        for p in range(0, 20, 2)
    ]
    sink = io.BytesIO()
    writer = FileWriter(sink, share_below=4096, block_bytes=20_000)
    for p, records in specs:
        writer.write_section("t", p, [records_to_batch(records)])
    meta = writer.finish()
    data = sink.getvalue()
    assert meta.format_version == 3
    # Each section weighs about 8,100 > share_below: framed, every range its own.
    assert len({(s.position, s.length) for s in meta.sections}) == len(specs)
    reader = StreamReader(io.BytesIO(data), object_name=NAME)
    assert not any(isinstance(s, SharedSectionReader) for s in reader.sections())
    stream_all(data, len(data))


def test_a_range_that_is_not_exactly_a_block_is_not_fetched_whole() -> None:
    """A footer entry whose range ends in ``BEND`` but is not one block (here: the block
    plus the bytes before it) is refused before the range is fetched whole."""
    s = BLOCK_META.sections[0]
    wide = replace(s, position=0, length=s.position + s.length)
    fetched: list[tuple[int, int]] = []

    def read_range(a: int, b: int) -> bytes:
        fetched.append((a, b))
        return BLOCK[a:b]

    with pytest.raises(FormatError):
        list(read_section(read_range, wide, object_name=NAME, max_read=64))
    assert all(b - a <= TAIL_READ for a, b in fetched)


def table_payloads(data: bytes) -> list[tuple[int, bytes]]:
    """(absolute position, payload) of every section table of a valid version-3 file."""
    return [
        (at + FRAME_HEADER.size, data[at + FRAME_HEADER.size : at + FRAME_HEADER.size + length])
        for at, tag, length in frames_of(data)
        if tag == b"STBL"
    ]


def parse_outcome(payload: bytes, base: int) -> object:
    """What parsing a table gives: its sections (every one made from its entry), or the
    FormatError's message."""
    try:
        return tuple(block_module._parse_section_table(payload, base, NAME))
    except FormatError as e:
        return str(e)


def field_by_field_outcome(payload: bytes, base: int) -> object:
    """``parse_outcome`` with the usual-entry path taking no entry: every entry parsed
    field by field (``block._any_entry``)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(block_module, "_usual_entries", _takes_none)
        return parse_outcome(payload, base)


def _takes_none(
    _payload: bytes, offset: int, _count: int, _t: Any, _p: Any, start: int, *_: Any
) -> tuple[int, int]:
    return offset, start


def bitmap_outcome(check: Callable[[], object]) -> str | None:
    """None if ``check`` passes, else its FormatError's message."""
    try:
        check()
    except FormatError as e:
        return str(e)
    return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=section_specs(), flips=st.lists(st.tuples(st.integers(0), st.integers(1, 255))))
def test_table_entries_parse_alike_without_the_usual_entry_path(
    specs: list[Spec], flips: list[tuple[int, int]]
) -> None:
    """The usual-entry path (``block._usual_entries``, compiled) reads every entry this
    system writes but the first of each topic the process has seen in any table, and
    gives exactly what the field-by-field parse gives, sections or error, on those
    tables with any bytes changed."""
    w = write(specs, share_below=1 << 20, block_bytes=1 << 20)
    tables = table_payloads(w.data)
    assert tables
    cases = []
    for base, payload in tables:
        changed = bytearray(payload)
        for at, xor in flips:
            changed[at % len(changed)] ^= xor
        cases += [(base, payload), (base, bytes(changed))]
    fast = [parse_outcome(payload, base) for base, payload in cases]
    slow = [field_by_field_outcome(payload, base) for base, payload in cases]
    assert fast == slow
    for base, payload in cases:  # a table's bitmap check, by bytes where dense, is offsets()'
        if isinstance(parse_outcome(payload, base), tuple):
            table = block_module._parse_section_table(payload, base, NAME)
            assert bitmap_outcome(table.check_bitmaps) == bitmap_outcome(
                lambda: [s.trailer.offsets() for s in table]  # noqa: B023
            )
    usual = block_module._usual_entries
    taken: list[bool] = []

    def counted(*args: Any) -> Any:
        count, entries = args[2], args[-1]
        before = len(entries)
        stopped = usual(*args)
        taken.extend([True] * (len(entries) - before) + [False] * (len(entries) < count))
        return stopped

    expected = []  # an entry whose topic a table named before takes the usual path
    seen: set[str] = set()
    for outcome in fast[::2]:
        assert isinstance(outcome, tuple)
        for s in outcome:
            expected.append(s.topic in seen)
            seen.add(s.topic)
    block_module._TOPICS.clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(block_module, "_usual_entries", counted)
        for base, payload in tables:
            block_module._parse_section_table(payload, base, NAME)
    assert taken == expected


_TRAILER_FIELDS = {  # where a shared section's trailer holds each field, and its width
    "first": (0, "<q"),
    "last": (8, "<q"),
    "count": (16, "<Q"),
    "tombstones": (24, "<Q"),
    "bytes": (32, "<Q"),
    "min_ts": (40, "<q"),
    "max_ts": (48, "<q"),
    "batches": (56, "<I"),
    "kind": (60, "<B"),
    "flags": (61, "<B"),
    "pad": (62, "<B"),
    "horizon": (64, "<q"),
    "index_offset": (72, "<q"),
    "index_position": (80, "<Q"),
    "partition": (-8, "<i"),
    "length": (-4, "<I"),
}


@pytest.mark.parametrize(
    "changes",
    [
        {"count": 0},
        {"count": lambda f: f["last"] - f["first"] + 2},
        {"tombstones": lambda f: f["count"] + 1},
        {"bytes": lambda f: RECORD_OVERHEAD * f["count"] - 1},
        {"min_ts": lambda f: f["max_ts"] + 1},
        {"tombstones": 0, "horizon": 5},
        {"kind": KIND_ROARING64},
        {"flags": 0},
        {"batches": 2},
        {"index_offset": lambda f: f["first"] + 1},
        {"index_position": 1},
        {"pad": 1},
        {"last": lambda f: f["first"] - 1},
        {"last": lambda f: f["first"] - 1, "kind": KIND_ROARING64},
        {"partition": 1},
        {"partition": -1},
        {"length": lambda f: _sections.USUAL_TRAILER - 1},
    ],
    ids=lambda changes: ",".join(changes),
)
def test_an_entry_the_usual_path_must_refuse_parses_as_field_by_field(
    changes: dict[str, Any],
) -> None:
    """Each check of the compiled usual-entry path, broken alone in a table's second
    entry: the table parses exactly as with the field-by-field path alone, which names
    what is wrong (or takes it, where the format allows it)."""
    rnd = random.Random(5)
    specs = [Spec("orders", p, (tuple(gen_records(rnd, 20, keys=3)),)) for p in (1, 2, 3)]
    (base, payload), *_ = table_payloads(
        write(specs, share_below=1 << 20, block_bytes=1 << 20).data
    )
    parsed = block_module._parse_section_table(payload, base, NAME)
    trailer_at = parsed.entries[1].bitmap_from - _sections.USUAL_TRAILER
    assert trailer_at > 0  # the usual path took it
    fields = {
        name: struct.unpack_from(fmt, payload, trailer_at + at)[0]
        for name, (at, fmt) in _TRAILER_FIELDS.items()
    }
    changed = bytearray(payload)
    for name, value in changes.items():
        at, fmt = _TRAILER_FIELDS[name]
        struct.pack_into(fmt, changed, trailer_at + at, value(fields) if callable(value) else value)
    fast = parse_outcome(bytes(changed), base)
    slow = field_by_field_outcome(bytes(changed), base)
    assert fast == slow


_int64 = st.integers(INT64_MIN, INT64_MAX)
_uint64 = st.integers(0, 2**64 - 1)


@st.composite
def table_entries(draw: st.DrawFn) -> block_module.TableEntry:
    """Any TableEntry the format can hold, dense ones often: its bitmap's place in a
    payload of 64 bytes, -1 for an entry parsed field by field."""
    first = draw(_int64)
    dense = draw(st.booleans())
    count = draw(st.integers(1, 70) if dense else _uint64)
    last = first + count - 1 if dense and first + count - 1 <= INT64_MAX else draw(_int64)
    raw = draw(st.sampled_from(TOPICS)).encode()
    partition = draw(st.integers(0, 2**31 - 1))
    start = draw(st.integers(-1, 70))
    return block_module.TableEntry(
        first,
        last,
        count,
        draw(_uint64),
        draw(_uint64),
        draw(_int64),
        draw(_int64),
        draw(st.one_of(st.none(), _int64)),
        raw.decode(),
        partition,
        (raw, partition),
        draw(st.integers(0, 1000)),
        draw(st.sampled_from([KIND_ROARING32, KIND_ROARING64])),
        start,
        draw(st.integers(start, 80)) if start >= 0 else -1,
    )


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(table_entries(), max_size=12),
    position=_uint64,
    length=_uint64,
    dense_count=st.integers(1, 70),
    noise=st.binary(min_size=64, max_size=64),
    at=st.integers(0, 40),
)
def test_compiled_footer_entries_and_dense_bitmaps_are_the_python_ones(
    entries: list[block_module.TableEntry],
    position: int,
    length: int,
    dense_count: int,
    noise: bytes,
    at: int,
) -> None:
    """``_sections.footer_entries`` encodes each entry as ``footer.footer_entry`` does,
    and ``_sections.unsettled`` names every entry whose bitmap bytes
    ``section.is_dense_bitmap`` refuses and the full check would refuse too, for any
    values an entry may hold (a payload that holds one dense bitmap among noise)."""
    payload = (noise[:at] + dense_bitmap(dense_count) + noise)[:64]
    assert _sections.footer_entries(entries, position, length) == b"".join(
        footer_entry(e.key[0], e.partition, position, length, e) for e in entries
    )
    unsettled = _sections.unsettled(entries, payload, dense_bitmap)
    for i, e in enumerate(entries):
        dense = e.bitmap_from >= 0 and is_dense_bitmap(
            e.kind, e.first_offset, e.last_offset, e.record_count, payload, e.bitmap_from,
            e.bitmap_to,
        )  # fmt: skip
        if dense:
            assert i not in unsettled
        elif i not in unsettled:
            assert e.bitmap_from >= 0 and _bitmap_agrees(e, payload), e


def _bitmap_agrees(e: block_module.TableEntry, payload: bytes) -> bool:
    """What ``TrailerHead.offsets`` checks of a shared section's bitmap, done here apart
    from the compiled pass: it deserializes whole and holds exactly the entry's count of
    offsets, from its first to its last."""
    try:
        offsets = OffsetSet.deserialize(e.kind, payload[e.bitmap_from : e.bitmap_to], 0)
    except ValueError:
        return False
    relative = offsets.relative
    return (
        len(relative) == e.record_count
        and relative.min() == 0
        and relative.max() == e.last_offset - e.first_offset
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    span=st.sampled_from([1, 2, 70, 4000, 5000, 65_536, 70_000]),
    optimize=st.booleans(),
    wrong=st.sampled_from(["", "count", "last", "byte", "cut", "tail"]),
)
def test_a_small_containers_bitmap_is_settled_in_c_only_when_it_agrees(
    data: st.DataObject, span: int, optimize: bool, wrong: str
) -> None:
    """The writer's bitmaps of sections of up to 4,096 offsets within 2^16 (one array or
    run container) are settled by the compiled pass (none is left for the full check),
    and one it settles always passes the full check: whatever the stats' or the bytes'
    damage (count or last offset off by one, a byte changed, a byte cut, a byte added)."""
    count = data.draw(st.integers(1, min(span, 6000)))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    chosen = {0, span - 1} | set(rng.sample(range(span), count - min(count, 2)))
    chosen = set(sorted(chosen)[:count]) | {0}
    relative = BitMap(chosen)
    if optimize:
        relative.run_optimize()
    bitmap = bytearray(relative.serialize())
    first = data.draw(st.integers(0, 2**40))
    n, top = len(relative), relative.max()
    if wrong == "count":
        n += data.draw(st.sampled_from([-1, 1]))
    elif wrong == "last":
        top += data.draw(st.sampled_from([-1, 1]))
    elif wrong == "byte":
        at = data.draw(st.integers(0, len(bitmap) - 1))
        bitmap[at] ^= data.draw(st.integers(1, 255))
    elif wrong == "cut":
        del bitmap[data.draw(st.integers(0, len(bitmap) - 1))]
    elif wrong == "tail":
        bitmap.append(data.draw(st.integers(0, 255)))
    pad = data.draw(st.integers(0, 9))
    payload = bytes(pad) + bytes(bitmap) + bytes(3)
    entry = block_module.TableEntry(
        first, first + top, n, 0, 0, 0, 0, None, "t", 0, (b"t", 0), 0, KIND_ROARING32, pad,
        pad + len(bitmap),
    )  # fmt: skip
    settled = not _sections.unsettled([entry], payload, dense_bitmap)
    event(f"settled={settled} wrong={wrong or 'none'}")
    if settled:
        assert _bitmap_agrees(entry, payload)
    if not wrong and n <= 4096 and top < 65_536 and n >= 1:
        assert settled, (n, top, optimize)


def test_a_table_whose_rows_pass_any_batchs_parses_as_field_by_field() -> None:
    """Entries whose record counts add up past the largest row a batch can have: the
    usual-entry path stops where its row count would overflow and the table parses as
    the field-by-field path alone parses it (the block's row check then refuses it)."""
    count = (1 << 60) - 1  # the most records a trailer's byte count allows
    trailer = TRAILER_FIXED.pack(0, count - 1, count, 0, 16 * count, 0, 0, 1, 2, 1)
    trailer += struct.pack("<qqQ", NO_HORIZON, 0, 0)
    payload = encode_section_table([("t", p, trailer) for p in range(9)])
    fast = parse_outcome(payload, 0)
    slow = field_by_field_outcome(payload, 0)
    assert fast == slow
    assert isinstance(fast, tuple)
    assert fast[-1].start == 8 * count


def test_the_compiled_table_parse_knows_the_layout_the_format_defines() -> None:
    """``_sections.c`` reads a shared section's trailer with its own constants: they are
    FORMAT.md's, as the Python modules name them."""
    assert TRAILER_FIXED.size == _sections.TRAILER_FIXED
    assert struct.Struct(TRAILER_FIXED.format + "qqQ").size == _sections.USUAL_TRAILER
    assert _sections.FLAG_HORIZON == FLAG_HORIZON
    assert (_sections.KIND_ROARING32, _sections.KIND_ROARING64) == (KIND_ROARING32, KIND_ROARING64)
    assert _sections.RECORD_OVERHEAD == RECORD_OVERHEAD
    assert _sections.NO_HORIZON == NO_HORIZON


def _write_both(
    sections: list[tuple[str, int, pa.RecordBatch]],
    cuts: list[int],
    share_below: int,
    gap: pa.RecordBatch | None = None,
) -> tuple[object, object]:
    """The sections, cut into runs at ``cuts``, each run's as rows of one batch (with
    ``gap``'s rows, which are not written, before each section if given): a file written
    by ``write_section`` of each section's rows, and one by ``write_rows`` of each run;
    each as (bytes, meta, offset index), or the ValueError's message."""
    bounds = [0, *sorted(c % (len(sections) + 1) for c in cuts), len(sections)]
    runs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        pieces, spans, at = [], [], 0
        for topic, partition, batch in sections[a:b]:
            if gap is not None:
                pieces.append(gap)
                at += gap.num_rows
            pieces.append(batch)
            spans.append((topic, partition, at, batch.num_rows))
            at += batch.num_rows
        if pieces:
            runs.append((pa.concat_batches(pieces), spans))

    def one(by_rows: bool) -> object:
        sink, index = io.BytesIO(), IndexBuilder()
        writer = FileWriter(
            sink,
            object_name=NAME,
            share_below=share_below,
            block_bytes=4 * share_below,
            max_batch_bytes=2000,
            index=index,
        )
        try:
            for records, spans in runs:
                if by_rows:
                    writer.write_rows(records, spans)
                    continue
                for topic, partition, at, rows in spans:
                    if rows:
                        writer.write_section(topic, partition, [records.slice(at, rows)])
            meta = writer.finish()
        except ValueError as e:
            return str(e)
        assert writer.footer_crc is not None
        return sink.getvalue(), meta, index.build(meta, writer.footer_crc)

    return one(False), one(True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=30),
    seed=st.integers(0, 2**32),
    cuts=st.lists(st.integers(0, 100), max_size=3),
    share_below=st.sampled_from([200, 2000, 20_000]),
    flaw=st.sampled_from([None, None, "order", "key"]),
    gaps=st.integers(0, 3),
)
def test_write_rows_writes_what_write_section_does(
    sizes: list[int],
    seed: int,
    cuts: list[int],
    share_below: int,
    flaw: str | None,
    gaps: int,
) -> None:
    """``FileWriter.write_rows`` (a group's survivors: many sections, each some rows of
    one batch) writes the same bytes, footer and offset index as ``write_section`` per
    section, with small and framed sections, empty ones, every kind of record, rows
    between sections that are not written, in runs of any length; and a section out of
    order, or with offsets that do not increase, fails with the same error."""
    rnd = random.Random(seed)
    sections = []
    for p, n in enumerate(sizes):
        records = gen_records(rnd, n, keys=5)
        topic = "a" if p < len(sizes) // 2 else "b"
        sections.append((topic, p, records_to_batch(records)))
    if flaw == "order" and any(b.num_rows > 1 for _, _, b in sections):
        i = next(i for i, (_, _, b) in enumerate(sections) if b.num_rows > 1)
        t, p, b = sections[i]
        sections[i] = (t, p, pa.concat_batches([b.slice(1), b.slice(0, 1)]))
    if flaw == "key" and len(sections) > 1:
        sections[-1], sections[0] = sections[0], sections[-1]
    gap = records_to_batch(gen_records(rnd, gaps, keys=5)) if gaps else None
    alone, runs = _write_both(sections, cuts, share_below, gap)
    assert runs == alone
    if flaw is None:
        assert isinstance(alone, tuple)


def test_write_rows_frames_a_section_that_weighs_exactly_share_below() -> None:
    heavy = records_to_batch([Record(i, 0, b"k", b"v" * 50, (("h", b"x"),)) for i in range(9)])
    light = records_to_batch([Record(0, 0, b"k", b"v", ())])
    weight = batching_weight(heavy)[1]
    sections = [("a", 0, light), ("a", 1, heavy), ("a", 2, light)]
    alone, runs = _write_both(sections, [], weight)
    assert runs == alone and isinstance(alone, tuple)
    assert [s.position for s in alone[1].sections].count(alone[1].sections[0].position) == 1


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(table_entries(), max_size=12), position=_uint64, length=_uint64)
def test_compiled_entry_metas_are_the_python_ones(
    entries: list[block_module.TableEntry], position: int, length: int
) -> None:
    """``_sections.entry_metas`` (a writer's block's sections, their slots set in C) makes
    what ``block.entry_meta`` makes of each entry: equal, the delete horizon too (which
    takes no part in equality), hashed, printed and pickled alike, and as frozen."""
    made = _sections.entry_metas(SectionMeta, entries, position, length)
    expected = [block_module.entry_meta(e, position, length) for e in entries]
    assert made == expected
    for m, x in zip(made, expected, strict=True):
        assert type(m) is SectionMeta
        assert m.to_json() == x.to_json()  # min_delete_horizon included
        assert (hash(m), repr(m)) == (hash(x), repr(x))
        assert pickle.loads(pickle.dumps(m)).to_json() == x.to_json()
        with pytest.raises(dataclasses.FrozenInstanceError):
            m.partition = 0  # type: ignore[misc]


def test_entry_metas_refuse_what_is_not_a_slots_class_or_an_entry() -> None:
    entry = block_module.TableEntry(0, 0, 1, 0, 20, 5, 5, None, "t", 0, (b"t", 0), 0, 1, -1, -1)
    assert _sections.entry_metas(SectionMeta, [entry], 7, 9)[0].position == 7

    @dataclasses.dataclass
    class Plain:  # fields, but no slots
        topic: str

    with pytest.raises(TypeError, match="no object slot topic"):
        _sections.entry_metas(Plain, [entry], 7, 9)
    with pytest.raises(TypeError, match="entry 0 is no TableEntry"):
        _sections.entry_metas(SectionMeta, [tuple(entry)[:10]], 7, 9)
