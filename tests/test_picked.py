"""Rows picked out of a run of batches (``fileformat.picked``, ``_rows``) are Arrow's
filter of their concatenation, and rows taken out of it in any order Arrow's take,
whatever the chunks look like; bad input is refused."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import RECORD_SCHEMA, Record, _rows, records_to_batch
from compactor.fileformat.batches import concat, filter_batch, take_batch
from compactor.fileformat.picked import picked, taken
from compactor.worker.masks import bool_array

Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]


def _rows_of(n: int, seed: int, headers: bool) -> list[Row]:
    """``n`` records of keys and values of up to 12 bytes, about a fifth of each null, and
    (if ``headers``) a header on about one in ten."""
    rng = random.Random(seed)

    def binary() -> bytes | None:
        return None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))

    return [
        (
            binary(),
            binary(),
            None if rng.random() < 0.5 else rng.randint(-(2**62), 2**62),
            [("h", binary())] if headers and rng.random() < 0.1 else [],
        )
        for _ in range(n)
    ]


def _batch(rows: list[Row], first: int) -> pa.RecordBatch:
    return records_to_batch(
        [
            Record(first + i, 1000 + i, k, v, tuple(h), horizon)
            for i, (k, v, horizon, h) in enumerate(rows)
        ]
    )


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[pa.RecordBatch], int]:
    """Batches as a gathered run holds them (up to 150 records, some sliced anywhere,
    some empty; headers in few runs), and a mask of them."""
    headers = draw(st.integers(0, 9)) == 0
    batches = []
    for n in range(draw(st.integers(1, 5))):
        size = draw(st.integers(0, 150))
        batch = _batch(_rows_of(size, draw(st.integers(0, 2**32)), headers), 1000 * n)
        if size and draw(st.booleans()):
            start = draw(st.integers(0, size))
            batch = batch.slice(start, draw(st.integers(0, size - start)))
        batches.append(batch)
    total = sum(b.num_rows for b in batches)
    density = draw(st.sampled_from([0.0, 0.05, 0.35, 0.9, 1.0]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return batches, sum(1 << i for i in range(total) if rng.random() < density)


def _records(
    batches: list[pa.RecordBatch], as_table: bool, uneven: bool
) -> pa.RecordBatch | pa.Table:
    """The batches concatenated, or as a table of them, whose horizons are (if
    ``uneven``) one chunk, as decide leaves a table whose horizons it stamped."""
    if not as_table:
        return concat(batches)
    records = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
    if uneven:
        horizons = records.column("delete_horizon").combine_chunks()
        records = records.set_column(5, RECORD_SCHEMA.field(5), horizons)
    return records


@settings(max_examples=300, deadline=None)
@given(runs(), st.booleans(), st.booleans())
def test_picked_rows_are_arrows_filter_of_the_concatenation(
    run: tuple[list[pa.RecordBatch], int], as_table: bool, uneven: bool
) -> None:
    batches, keep = run
    whole = concat(batches)
    out = picked(_records(batches, as_table, uneven), keep, keep.bit_count())
    out.validate(full=True)
    assert out.schema == RECORD_SCHEMA
    expected = filter_batch(whole, bool_array(keep, whole.num_rows))
    assert out.to_pylist() == expected.to_pylist()
    for name in ("key", "value", "delete_horizon"):
        assert out.column(name).null_count == expected.column(name).null_count
    for name in ("key", "value"):  # no bytes for a null value, as Arrow's filter
        assert out.column(name).buffers()[2].size == expected.column(name).buffers()[2].size


@settings(max_examples=300, deadline=None)
@given(
    runs(), st.booleans(), st.booleans(), st.integers(0, 2**32), st.sampled_from(["group", "any"])
)
def test_taken_rows_are_arrows_take_of_the_concatenation(
    run: tuple[list[pa.RecordBatch], int], as_table: bool, uneven: bool, seed: int, kind: str
) -> None:
    """In a group's order (the kept rows, partition after partition, each partition's in
    row order: jumping back and forth between the chunks) or any order, repeats too."""
    batches, keep = run
    whole = concat(batches)
    n, rng = whole.num_rows, random.Random(seed)
    if kind == "group":
        labels = [rng.randrange(7) for _ in range(n)]
        rows = sorted((i for i in range(n) if keep >> i & 1), key=lambda i: labels[i])
    else:
        rows = [rng.randrange(n) for _ in range(rng.randint(0, 2 * n))] if n else []
    order = pa.array(rows, pa.int32())
    out = taken(_records(batches, as_table, uneven), order)
    out.validate(full=True)
    assert out.schema == RECORD_SCHEMA
    expected = take_batch(whole, order)
    assert out.to_pylist() == expected.to_pylist()
    for name in ("key", "value", "delete_horizon"):
        assert out.column(name).null_count == expected.column(name).null_count


def test_rows_not_of_the_records_are_refused() -> None:
    batches = [_batch([(b"k", b"v", None, [])] * 3, 10 * n) for n in range(2)]
    table = pa.Table.from_batches(batches)
    assert taken(table, pa.array([5, 0, 3], pa.int32())).column("offset").to_pylist() == [12, 0, 10]
    sliced = pa.array([1, 2, 3], pa.int32()).slice(1)
    assert taken(table, sliced).column("offset").to_pylist() == [2, 10]
    with pytest.raises(ValueError, match="row 6 is not one of the 6 rows"):
        taken(table, pa.array([0, 6], pa.int32()))
    with pytest.raises(ValueError, match="row -1 is not one of the 6 rows"):
        taken(table, pa.array([-1], pa.int32()))
    with pytest.raises(ValueError, match="int32 record numbers without nulls, not int64"):
        taken(table, pa.array([0], pa.int64()))
    with pytest.raises(ValueError, match="without nulls"):
        taken(table, pa.array([0, None], pa.int32()))
    # The passes check what they are given, not only what locate makes.
    located = pa.array([1, 3], pa.int32()).buffers()[1].to_pybytes()  # chunk 1, row 3
    chunk = (3, 0, None, bytes(24))
    with pytest.raises(ValueError, match="row 3 of chunk 1 is not one of the chunks' rows"):
        _rows.take_fixed(located, 8, [chunk, chunk])
    with pytest.raises(ValueError, match="row 3 of chunk 1"):
        _rows.take_binary(located, [(3, 0, None, bytes(16), b""), (3, 0, None, bytes(16), b"")])
    with pytest.raises(ValueError, match="not located rows"):
        _rows.take_fixed(b"\x00" * 4, 8, [chunk])
    with pytest.raises(ValueError, match="chunk 0's length -1 is out of range"):
        _rows.locate(b"", [-1])


def test_more_chunks_than_the_passes_take_go_arrows_way() -> None:
    one = _batch([(b"k", b"v", None, [])], 0)
    table = pa.Table.from_batches([one] * 65537)
    keep = (1 << 65537) - 1 - 2
    assert picked(table, keep, 65536).num_rows == 65536
    assert taken(table, pa.array([65536, 0], pa.int32())).num_rows == 2
    chunks = [(1, 0, None, bytes(8))] * 65537
    with pytest.raises(ValueError, match="65537 chunks, at most 65536"):
        _rows.pick_fixed(b"\xff" * 8193, 65537, 8, chunks)


def test_the_first_error_in_the_selection_is_reported() -> None:
    """A row outside its data in chunk 1 before the values pass 2 GiB: the ValueError;
    past 2 GiB first: the OverflowError (as when the passes stopped at the first)."""
    big = (1, 0, None, pa.array([0, 1 << 30], pa.int32()).buffers()[1], bytes(1 << 30))
    wrong = (1, 0, None, pa.array([0, 99], pa.int32()).buffers()[1], b"abcd")
    with pytest.raises(ValueError, match="chunk 1's offsets run outside its data"):
        _rows.pick_binary(b"\x0f", 4, [big, wrong, wrong, big])
    with pytest.raises(ValueError, match="chunk 1's offsets run outside"):  # not chunk 2
        _rows.pick_binary(b"\x07", 3, [big, wrong, wrong])
    with pytest.raises(OverflowError, match="more than 2 GiB"):
        _rows.pick_binary(b"\x0f", 4, [big, big, big, wrong])


def test_picked_values_are_new_buffers_of_only_the_survivors() -> None:
    rows: list[Row] = [(b"k%d" % i, b"v" * 100, None, []) for i in range(50)]
    batches = [_batch(rows, 100 * n) for n in range(4)]
    table = pa.Table.from_batches(batches)
    keep = sum(1 << i for i in range(0, 200, 10))
    out = picked(table, keep, 20)
    assert out.num_rows == 20
    values = out.column("value")
    assert values.buffers()[2].size == 20 * 100
    assert values.buffers()[0] is None  # no tombstone picked: no validity bitmap
    assert out.column("offset").to_pylist() == [100 * (i // 50) + i % 50 for i in range(0, 200, 10)]


def test_a_mask_that_does_not_match_is_refused() -> None:
    batch = _batch([(b"k", b"v", None, [])] * 5, 0)
    with pytest.raises(ValueError, match="picks 2 of 5 rows, not 3"):
        picked(batch, 0b11, 3)
    with pytest.raises(ValueError, match="beyond the 5 records"):
        picked(batch, 1 << 5, 1)


def test_short_buffers_and_offsets_outside_the_data_are_refused() -> None:
    offsets = pa.py_buffer(pa.array([0, 4, 99], pa.int32()).buffers()[1])
    with pytest.raises(ValueError, match="chunk 0's offsets run outside its data"):
        _rows.pick_binary(b"\x02", 1, [(2, 0, None, offsets, b"abcd")])
    with pytest.raises(ValueError, match="chunk 0's offsets holds 12 bytes, 16 needed"):
        _rows.pick_binary(b"\x01", 1, [(3, 0, None, offsets, b"abcd")])
    with pytest.raises(ValueError, match="chunk 1's data holds 8 bytes, 16 needed"):
        _rows.pick_fixed(b"\x01", 1, 8, [(1, 0, None, bytes(8)), (2, 0, None, bytes(8))])
    with pytest.raises(ValueError, match="the mask holds 0 bytes"):
        _rows.pick_fixed(b"", 0, 8, [(1, 0, None, bytes(8))])
    # Only the picked row is read: an unpicked row's wrong offsets are not looked at.
    assert _rows.pick_binary(b"\x01", 1, [(2, 0, None, offsets, b"abcd")])[1] == b"abcd"


def test_a_null_headers_list_is_kept_as_arrow_keeps_it() -> None:
    batch = _batch([(b"k", b"v", None, [])] * 3, 0)
    headers = pa.array([[], None, []], RECORD_SCHEMA.field("headers").type)
    batch = batch.set_column(4, pa.field("headers", headers.type), headers)
    assert picked(batch, 0b110, 2).column("headers").to_pylist() == [None, []]


def test_a_short_validity_bitmap_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk 0's validity holds 1 bytes, 2 needed"):
        _rows.pick_fixed(b"\x01\x00", 1, 8, [(9, 0, b"\xff", bytes(72))])


def test_picked_values_beyond_int32_offsets_are_refused_before_any_copy() -> None:
    data = bytes(1 << 20)
    offsets = pa.array([0, 1 << 20], pa.int32()).buffers()[1]
    chunks = [(1, 0, None, offsets, data)] * 2100  # 2,100 MiB picked, one buffer shared
    with pytest.raises(OverflowError, match="more than 2 GiB"):
        _rows.pick_binary(b"\xff" * 263, 2100, chunks)
