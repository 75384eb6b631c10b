"""Rows picked out of a run of batches (``fileformat.picked``, ``_rows``) are Arrow's
filter of their concatenation, whatever the chunks look like; bad input is refused."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import RECORD_SCHEMA, Record, _rows, records_to_batch
from compactor.fileformat.batches import concat, filter_batch
from compactor.fileformat.picked import picked
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


@settings(max_examples=300, deadline=None)
@given(runs(), st.booleans(), st.booleans())
def test_picked_rows_are_arrows_filter_of_the_concatenation(
    run: tuple[list[pa.RecordBatch], int], as_table: bool, uneven: bool
) -> None:
    batches, keep = run
    whole = concat(batches)
    records: pa.RecordBatch | pa.Table = whole
    if as_table:
        records = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
        if uneven:  # as decide leaves a table whose horizons it stamped: one chunk
            horizons = records.column("delete_horizon").combine_chunks()
            records = records.set_column(5, RECORD_SCHEMA.field(5), horizons)
    out = picked(records, keep, keep.bit_count())
    out.validate(full=True)
    assert out.schema == RECORD_SCHEMA
    expected = filter_batch(whole, bool_array(keep, whole.num_rows))
    assert out.to_pylist() == expected.to_pylist()
    for name in ("key", "value", "delete_horizon"):
        assert out.column(name).null_count == expected.column(name).null_count
    for name in ("key", "value"):  # no bytes for a null value, as Arrow's filter
        assert out.column(name).buffers()[2].size == expected.column(name).buffers()[2].size


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
