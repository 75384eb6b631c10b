"""The compiled passes over a writer's shared sections against Python models: what it
keeps of each (``_sections.small_sections``), and its table and index entries
(``_sections.table_payload``, ``_sections.index_entries``) against the Python encoders
of the same bytes, for any values a section may hold; and their refusals of what is not
a writer's section."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import _sections
from compactor.fileformat.batches import BatchStats
from compactor.fileformat.bitmap import KIND_ROARING32, KIND_ROARING64, OffsetSet, small_bitmap
from compactor.fileformat.block import TableEntry, encode_section_table, entry_meta, shared_table
from compactor.fileformat.meta import FileMeta, section_key
from compactor.fileformat.offset_index import IndexBuilder
from compactor.fileformat.section import encode_section_header, encode_trailer

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_int64 = st.integers(INT64_MIN, INT64_MAX)
_uint64 = st.integers(0, 2**64 - 1)
TOPICS = ("t", "orders", "ünïcode-topic", "x" * 300)


@st.composite
def sections(draw: st.DrawFn) -> tuple[TableEntry, bytes]:
    """A table entry with any values its fields can hold (as a writer makes it: field by
    field, -1 for the bitmap's place) and any bytes as its bitmap."""
    topic = draw(st.sampled_from(TOPICS))
    partition = draw(st.integers(0, 2**31 - 1))
    entry = TableEntry(
        draw(_int64),
        draw(_int64),
        draw(_uint64),
        draw(_uint64),
        draw(_uint64),
        draw(_int64),
        draw(_int64),
        draw(st.one_of(st.none(), _int64)),
        topic,
        partition,
        (topic.encode(), partition),
        draw(st.integers(0, 10_000)),
        draw(st.sampled_from([KIND_ROARING32, KIND_ROARING64])),
        -1,
        -1,
    )
    return entry, draw(st.binary(max_size=40))


def _offsets(e: TableEntry, bitmap: bytes) -> OffsetSet:
    return OffsetSet.made(e.kind, bitmap, e.first_offset, e.last_offset)


@settings(max_examples=300, deadline=None)
@given(st.lists(sections(), max_size=12))
def test_the_compiled_table_is_the_python_one(drawn: list[tuple[TableEntry, bytes]]) -> None:
    entries, bitmaps = [e for e, _ in drawn], [b for _, b in drawn]
    trailers = [
        (e.topic, e.partition, encode_trailer(BatchStats(*e[:8]), [(e[0], 0)], _offsets(e, b)))
        for e, b in drawn
    ]
    assert shared_table(entries, bitmaps) == encode_section_table(trailers)


@settings(max_examples=300, deadline=None)
@given(st.lists(sections(), max_size=12), _uint64, _uint64, _uint64, st.integers(0, 2**32 - 1))
def test_the_compiled_index_entries_are_the_python_ones(
    drawn: list[tuple[TableEntry, bytes]], position: int, length: int, size: int, crc: int
) -> None:
    """A block's sections told to an ``IndexBuilder`` at once (``shared``) make the index
    that telling it of each section, one batch at the block's start, makes."""
    entries, bitmaps = [e for e, _ in drawn], [b for _, b in drawn]
    at_once, one_by_one = IndexBuilder(), IndexBuilder()
    at_once.shared(entries, bitmaps, position, length)
    for e, bitmap in drawn:
        one_by_one.batch(e.first_offset, 0, e.max_timestamp)
        one_by_one.end_section(e.topic, e.partition, position, length, _offsets(e, bitmap))
    meta = FileMeta(tuple(entry_meta(e, position, length) for e in entries), size, 3)
    assert at_once.encode(meta, crc) == one_by_one.encode(meta, crc)


def _entry(**changes: object) -> TableEntry:
    e = TableEntry(0, 2, 3, 0, 100, 1, 2, None, "t", 1, (b"t", 1), 0, KIND_ROARING32, -1, -1)
    return e._replace(**changes)


@pytest.mark.parametrize(
    ("entries", "bitmaps", "error", "says"),
    [
        ([_entry()], [], ValueError, "1 entries but 0 bitmaps"),
        ([_entry(kind=3)], [b"x"], ValueError, "bitmap kind 3"),
        ([_entry()], ["x"], TypeError, "bitmap not bytes"),
        ([(1, 2)], [b"x"], TypeError, "not a TableEntry"),
        ([_entry(first_offset=2**63)], [b"x"], OverflowError, "too big"),
        ([_entry(partition=2**31)], [b"x"], OverflowError, "partition"),
        ([_entry(key=(b"t" * 70_000, 1))], [b"x"], OverflowError, "topic"),
    ],
)
def test_what_is_not_a_writers_section_is_refused(
    entries: list[TableEntry], bitmaps: list[object], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        _sections.table_payload(entries, bitmaps)  # type: ignore[arg-type]
    with pytest.raises(error, match=says):
        _sections.index_entries(entries, bitmaps, 0, 10)  # type: ignore[arg-type]


def test_a_block_placed_out_of_range_is_refused() -> None:
    with pytest.raises(OverflowError):
        _sections.index_entries([_entry()], [b"x"], -1, 10)
    with pytest.raises(OverflowError):
        _sections.index_entries([_entry()], [b"x"], 0, 2**64)


def test_an_index_told_of_other_sections_than_the_file_has_is_refused() -> None:
    builder = IndexBuilder()
    e = _entry()
    builder.shared([e], [b"x"], 8, 100)
    meta = FileMeta((entry_meta(e, 8, 100),) * 2, 200, 3)
    with pytest.raises(ValueError, match="holds 1 sections, the file 2"):
        builder.encode(meta, 0)


def _model(
    items: list[tuple[Any, Any, int, int]],
    figures: list[tuple[Any, ...]],
    offsets: list[int],
    headers_at: list[int],
    previous: tuple[bytes, int] | None,
) -> tuple[list[TableEntry], list[bytes | None], list[int]] | None:
    """What ``small_sections`` makes, in Python: None unless every section's topic and
    partition are valid, its keys strictly increase after ``previous`` and its rows are
    in the batch."""
    entries, bitmaps, weights = [], [], []
    for (topic, partition, start, rows), f in zip(items, figures, strict=True):
        try:
            encode_section_header(topic, partition)
        except ValueError:
            return None
        key = section_key(topic, partition)
        if previous is not None and key <= previous:
            return None
        if start < 0 or rows < 1 or start + rows > len(offsets):
            return None
        previous = key
        view = memoryview(array("q", offsets[start : start + rows]))
        entries.append(TableEntry(*f, topic, partition, key, -1, KIND_ROARING32, -1, -1))
        bitmaps.append(small_bitmap(view, f[0]))
        weights.append(f[4] + 8 * (headers_at[start + rows] - headers_at[start]))
    return entries, bitmaps, weights


@st.composite
def small_runs(
    draw: st.DrawFn,
) -> tuple[list[tuple[Any, Any, int, int]], list[tuple[Any, ...]], list[int], list[int]]:
    """Sections of a batch of offsets, valid mostly: topics and partitions that
    ``encode_section_header`` refuses now and then, keys out of order, spans past the
    batch; offsets that ``small_bitmap`` takes or not."""
    rows = draw(st.integers(1, 60))
    offsets = sorted(draw(st.sets(st.integers(0, 200_000), min_size=rows, max_size=rows)))
    headers_at = [0]
    for _ in range(rows):
        headers_at.append(headers_at[-1] + draw(st.integers(0, 3)))
    topics = st.sampled_from(["a", "b", "ünï", "", "\ud800", "x" * 70_000, 7])
    partitions = st.one_of(st.integers(0, 40), st.sampled_from([-1, 2**31, True, 2**70]))
    items, figures = [], []
    at = 0
    for _ in range(draw(st.integers(1, 8))):
        start = draw(
            st.integers(min(at, rows), rows) if draw(st.booleans()) else st.integers(-2, rows)
        )
        count = draw(st.integers(1, 10))
        topic = draw(topics) if draw(st.integers(0, 9)) == 0 else "a"
        partition = draw(partitions) if draw(st.integers(0, 9)) == 0 else len(items) * 2
        items.append((topic, partition, start, count))
        first = offsets[start] if 0 <= start < rows and draw(st.booleans()) else draw(_int64)
        figures.append((first, 0, count, 0, draw(st.integers(0, 10**6)), 0, 0, None))
        at = max(at, start + count) if start >= 0 else at
    return items, figures, offsets, headers_at


@settings(max_examples=400, deadline=None)
@given(
    small_runs(), st.one_of(st.none(), st.tuples(st.sampled_from([b"a", b"b"]), st.integers(-1, 5)))
)
def test_small_sections_are_kept_as_the_python_model_keeps_them(
    run: tuple[list[tuple[Any, Any, int, int]], list[tuple[Any, ...]], list[int], list[int]],
    previous: tuple[bytes, int] | None,
) -> None:
    items, figures, offsets, headers_at = run
    made = _sections.small_sections(
        items,
        figures,
        memoryview(array("q", offsets)),
        memoryview(array("i", headers_at)),
        previous,
        TableEntry,
    )
    assert made == _model(items, figures, offsets, headers_at, previous)
    if made is not None:
        assert all(type(e) is TableEntry for e in made[0])
