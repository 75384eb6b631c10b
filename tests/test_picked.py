"""Rows picked out of a run of batches (``fileformat.picked``, ``_rows``) are Arrow's
filter of their concatenation, whatever the chunks look like; bad input is refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import RECORD_SCHEMA, Record, _rows, records_to_batch
from compactor.fileformat.batches import concat, filter_batch
from compactor.fileformat.picked import picked
from compactor.worker.masks import bool_array

_binary = st.one_of(st.none(), st.binary(max_size=12))
_records = st.lists(
    st.tuples(
        _binary,
        _binary,
        st.one_of(st.none(), st.integers(-(2**62), 2**62)),
        st.lists(st.tuples(st.text(max_size=3), _binary), max_size=2),
    ),
    max_size=12,
)


Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]


def _batch(rows: list[Row], first: int) -> pa.RecordBatch:
    return records_to_batch(
        [
            Record(first + i, 1000 + i, k, v, tuple(h), horizon)
            for i, (k, v, horizon, h) in enumerate(rows)
        ]
    )


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[pa.RecordBatch], int]:
    """Batches as a gathered run holds them (some sliced, some empty), and a mask."""
    batches = []
    for n, rows in enumerate(draw(st.lists(_records, min_size=1, max_size=5))):
        batch = _batch(rows, 100 * n)
        if batch.num_rows and draw(st.booleans()):
            start = draw(st.integers(0, batch.num_rows))
            batch = batch.slice(start, draw(st.integers(0, batch.num_rows - start)))
        batches.append(batch)
    total = sum(b.num_rows for b in batches)
    return batches, draw(st.integers(0, (1 << total) - 1))


@settings(max_examples=300, deadline=None)
@given(runs(), st.booleans())
def test_picked_rows_are_arrows_filter_of_the_concatenation(
    run: tuple[list[pa.RecordBatch], int], as_table: bool
) -> None:
    batches, keep = run
    whole = concat(batches)
    records = pa.Table.from_batches(batches, schema=RECORD_SCHEMA) if as_table else whole
    out = picked(records, keep, keep.bit_count())
    out.validate(full=True)
    assert out.schema == RECORD_SCHEMA
    expected = filter_batch(whole, bool_array(keep, whole.num_rows))
    assert out.to_pylist() == expected.to_pylist()
    for name in ("key", "value", "delete_horizon"):
        assert out.column(name).null_count == expected.column(name).null_count


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
