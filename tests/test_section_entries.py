"""A block's table entries packed (``_sections.SectionEntries``) against the list of
``TableEntry`` tuples they stand for: each entry made again is the one packed, and every
compiled pass over a table's entries gives the same answer, or the same error, for
either form."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.fileformat import _sections
from compactor.fileformat import block as block_module
from compactor.fileformat.batches import RECORD_OVERHEAD
from compactor.fileformat.block import TableEntry
from compactor.fileformat.meta import section_key
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.section import dense_bitmap
from tests.test_shared_blocks import table_entries

PAYLOAD = bytes(range(64))


def packed(entries: list[TableEntry]) -> _sections.SectionEntries[TableEntry]:
    out = _sections.SectionEntries(TableEntry)
    for e in entries:
        out.append(e)
    return out


def outcome(f: object, *args: object) -> object:
    """What ``f(*args)`` gives, or its error's type and message."""
    try:
        return f(*args)  # type: ignore[operator]
    except (TypeError, ValueError, OverflowError) as e:
        return type(e), str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(table_entries(), max_size=12), at=st.integers(-14, 14))
def test_packed_entries_are_the_entries_appended(entries: list[TableEntry], at: int) -> None:
    table = packed(entries)
    assert len(table) == len(entries)
    assert list(table) == entries
    assert all(type(e) is TableEntry for e in table)
    assert [table.start(i) for i in range(-len(table), len(table))] == [
        e.start for e in entries + entries
    ]
    for beyond in (len(entries), -len(entries) - 1):
        with pytest.raises(IndexError):
            table.start(beyond)
    assert table[at : at + 3] == entries[at : at + 3]
    assert table[::-2] == entries[::-2]
    if -len(entries) <= at < len(entries):
        assert table[at] == entries[at]
    else:
        with pytest.raises(IndexError):
            table[at]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(table_entries(), max_size=12),
    position=st.integers(0, 2**64 - 1),
    length=st.integers(0, 2**64 - 1),
)
def test_every_pass_reads_packed_entries_as_their_list(
    entries: list[TableEntry], position: int, length: int
) -> None:
    table = packed(entries)
    bitmaps = [PAYLOAD[: i % 9] for i in range(len(entries))]
    for f, args in (
        (_sections.footer_entries, (position, length)),
        (_sections.unsettled, (PAYLOAD, dense_bitmap)),
        (_sections.table_columns, ()),
        (_sections.table_payload, (bitmaps,)),
        (_sections.index_entries, (bitmaps, position, length)),
    ):
        assert outcome(f, table, *args) == outcome(f, entries, *args), f


@settings(max_examples=300, deadline=None)
@given(
    sections=st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=8),
    off_by=st.sampled_from([0, 1]),
    which=st.sampled_from([0, 1, 3, 4, 5, 6, 7]),  # not the count: it places the rows
    horizon_known=st.booleans(),
)
def test_a_blocks_check_compares_packed_entries_as_their_list(
    sections: list[tuple[int, bool]], off_by: int, which: int, horizon_known: bool
) -> None:
    """``batch_figures`` and ``figures`` with ``compare``, over a block's batch: the first
    section whose stats disagree with its records is the same for the packed entries as
    for their list, whichever stat is off (or the horizon's None)."""
    entries: list[TableEntry] = []
    offsets: list[int] = []
    start = 0
    for i, (count, tombstones) in enumerate(sections):
        first = 10 * i
        offsets += range(first, first + count)
        horizon = 7 if tombstones and horizon_known else None
        size = RECORD_OVERHEAD * count + (0 if tombstones else count)  # one-byte values
        stats = [first, first + count - 1, count, count if tombstones else 0, size, 5, 5, horizon]
        if i == len(sections) - 1 and off_by:
            stats[which] = None if which == 7 and stats[7] is not None else (stats[which] or 0) + 1
        entries.append(
            TableEntry(*stats, "t", i, (b"t", i), start, 1, -1, -1)  # type: ignore[arg-type]
        )
        start += count
    n = len(offsets)
    tombstone = [t for count, t in sections for _ in range(count)]
    batch = pa.RecordBatch.from_pydict(
        {
            "offset": offsets,
            "timestamp": [5] * n,
            "key": [None] * n,
            "value": [None if t else b"v" for t in tombstone],
            "headers": [[]] * n,
            "delete_horizon": [7 if horizon_known else None] * n,
        },
        schema=RECORD_SCHEMA,
    )
    arrays = batch.__arrow_c_array__()
    start_at, count_at = TableEntry._fields.index("start"), TableEntry._fields.index("record_count")
    got = _sections.batch_figures(arrays, packed(entries), start_at, count_at, compare=True)
    assert got == _sections.batch_figures(arrays, entries, start_at, count_at, compare=True)
    if not off_by:
        assert got == (-1, -1)
    offsets_view = memoryview(pa.array(offsets, pa.int64()).buffers()[1])
    got = _sections.figures(packed(entries), start_at, count_at, offsets_view, compare=True)
    assert got == _sections.figures(entries, start_at, count_at, offsets_view, compare=True)
    if not (off_by and which in (0, 1)):
        assert got == (-1, -1)


def test_packed_entries_refuse_what_is_no_table_entry() -> None:
    with pytest.raises(TypeError, match="NamedTuple"):
        _sections.SectionEntries(dict)
    table = _sections.SectionEntries(TableEntry)
    entry = TableEntry(0, 0, 1, 0, 0, 0, 0, None, "t", 0, (b"t", 0), 0, 1, -1, -1)
    with pytest.raises(TypeError, match="entry 0 is not a TableEntry"):
        table.append(tuple(range(15)))  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        table.append(entry._replace(first_offset=2**63))
    with pytest.raises(OverflowError):
        table.append(entry._replace(record_count=-1))
    assert len(table) == 0
    table.append(entry)
    assert table[-1] == entry and len(table) == 1
    with pytest.raises(TypeError, match="SectionEntries or a list"):
        _sections.footer_entries((entry,), 0, 0)  # type: ignore[arg-type]


def test_a_parsed_tables_entries_are_packed() -> None:
    """A table's parse packs its entries (the usual path and the field-by-field one)."""
    payload = block_module.shared_table(
        [
            TableEntry(5, 5, 1, 0, 20, 3, 3, None, "t", 1, (b"t", 1), -1, 1, -1, -1),
            TableEntry(9, 10, 2, 1, 40, 3, 4, 8, "t", 2, (b"t", 2), -1, 1, -1, -1),
        ],
        [dense_bitmap(1), dense_bitmap(2)],
    )
    table = block_module.parse_section_table(payload, 100, "f")
    assert type(table.entries) is _sections.SectionEntries
    assert [(e.key, e.start, e.min_delete_horizon) for e in table.entries] == [
        ((b"t", 1), 0, None),
        ((b"t", 2), 1, 8),
    ]


def entries_of(keys: list[tuple[str, int]]) -> list[TableEntry]:
    return [
        TableEntry(0, 0, 1, 0, 9, 0, 0, None, t, p, section_key(t, p), i, 1, -1, -1)
        for i, (t, p) in enumerate(keys)
    ]


def test_packed_tables_share_their_keys_and_still_give_every_one() -> None:
    """``table_columns`` makes a packed entry's key once for every table of the process
    (keys are kept by topic and partition, bounded): two tables of the same partitions
    give the same key objects; partitions past the kept ones, and more keys than are
    kept, still give every key right."""
    parts = [("a", p) for p in range(300)] + [("b", 2**31 - 1)]
    first, again = (_sections.table_columns(packed(entries_of(parts)))[0] for _ in range(2))
    assert first == again == [section_key(t, p) for t, p in parts]
    assert all(x is y for x, y in zip(first[:300], again[:300], strict=True))
    many = sorted((t, p) for t in ("c", "d", "e") for p in range(50_000))
    for _ in range(2):  # past the cache's slots, then after it is emptied
        keys, counts, sizes = _sections.table_columns(packed(entries_of(many)))
        assert keys == [section_key(t, p) for t, p in many]
        assert counts == [1] * len(many) and sizes == [9] * len(many)
