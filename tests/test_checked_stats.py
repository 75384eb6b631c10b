"""``batches.checked_stats``: a batch's checks and stats in one compiled pass over the
buffers Arrow's C data interface exports (``_sections.checked_figures``), against the
format's definition in plain Python (``stats_of_records``) and the problems the reader
names."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_shared_blocks import stats_of_records
from test_small_sections import _records, _with_shifted_header_items

from compactor.fileformat import FormatError, _sections, batch_to_records, records_to_batch
from compactor.fileformat.batches import (
    BatchStats,
    batch_problem,
    batch_stats,
    checked_stats,
    columns_problem,
    decoded_problem,
    section_figures,
)
from compactor.fileformat.ipc import BatchEncoder, decode_measured
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.second_read import MEMO


def _column(batch: pa.RecordBatch, name: str, array: pa.Array) -> pa.RecordBatch:
    columns = [array if f.name == name else batch.column(f.name) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    headers=st.booleans(),
    shifted=st.booleans(),
    cut=st.tuples(st.integers(0, 299), st.integers(1, 300)),
)
def test_checked_stats_are_the_formats_stats(
    seed: int, n: int, headers: bool, shifted: bool, cut: tuple[int, int]
) -> None:
    """Whole batches and slices starting anywhere (mid-byte of every bitmap), with null
    keys, values and header values, header items at an offset of their own and null
    values whose slots span bytes: the stats are the model's, ordered or not."""
    rnd = random.Random(seed)
    batch = records_to_batch(_records(rnd, n, headers))
    if shifted:
        batch = _with_shifted_header_items(batch, rnd)
    start = cut[0] % n
    batch = batch.slice(start, min(cut[1], n - start))
    expected = stats_of_records(batch_to_records(batch))
    assert checked_stats(batch) == expected
    assert checked_stats(batch, ordered=False) == expected
    assert batch_stats(batch) == expected
    assert decoded_problem(batch) is None
    # the same batch cut into sections, as a block's check and the writer measure them
    rows = batch.num_rows
    cuts = sorted({0, rows, *rnd.sample(range(1, rows), min(rows - 1, rnd.randint(0, 5)))})
    spans = [(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]
    descent, figures = section_figures(batch, spans)
    arrays = batch.__arrow_c_array__()
    assert _sections.batch_figures(arrays, spans, 0, 1, checked=True) == (descent, figures)
    records = batch_to_records(batch)
    assert [BatchStats(*f) for f in figures] == [
        stats_of_records(records[a : a + k]) for a, k in spans
    ]
    assert descent == -1


def test_a_decoded_batch_comes_with_its_stats() -> None:
    rnd = random.Random(7)
    batch = records_to_batch(_records(rnd, 500, True))
    for codec in (None, "lz4", "zstd"):
        payload = BatchEncoder(codec).encode(batch, 1 << 20)
        decoded, stats = decode_measured(payload, 0, "t")
        assert decoded.equals(batch)
        assert stats == stats_of_records(batch_to_records(batch))


def test_each_problem_is_named_in_the_readers_words() -> None:
    rnd = random.Random(3)
    batch = records_to_batch(_records(rnd, 40, True))
    n = batch.num_rows
    offsets = batch.column("offset").to_pylist()
    null_offset = _column(batch, "offset", pa.array([None, *offsets[1:]], pa.int64()))
    null_ts = _column(batch, "timestamp", pa.array([*([0] * (n - 1)), None], pa.int64()))
    headers = batch.column("headers").to_pylist()
    null_list = _column(
        batch, "headers", pa.array([None, *headers[1:]], RECORD_SCHEMA.field("headers").type)
    )
    headers_type = RECORD_SCHEMA.field("headers").type
    items = pa.StructArray.from_arrays(
        [pa.array([None], pa.string()), pa.array([b"b"])], fields=list(headers_type.value_type)
    )
    null_item = _column(
        batch,
        "headers",
        pa.ListArray.from_arrays(
            pa.array([0, 1, *([1] * (n - 1))], pa.int32()),
            pa.StructArray.from_arrays(
                [pa.array(["a"], pa.string()), pa.array([b"b"])],
                fields=list(headers_type.value_type),
                mask=pa.array([True]),
            ),
            type=headers_type,
        ),
    )
    null_key = _column(
        batch,
        "headers",
        pa.ListArray.from_arrays(
            pa.array([0, 1, *([1] * (n - 1))], pa.int32()), items, type=headers_type
        ),
    )
    swapped = batch.take(pa.array([*range(n - 2), n - 1, n - 2]))
    cases = {
        "null offset or timestamp": [null_offset, null_ts],
        "null headers list": [null_list],
        "null header or header key": [null_key, null_item],
        "offsets do not strictly increase": [swapped],
    }
    for problem, bad in cases.items():
        for b in bad:
            assert checked_stats(b) == problem
            assert _in_python(b) == problem
            # a whole block's check finds the nulls in the same words, and leaves the
            # order to its sections' descent
            checked = _sections.batch_figures(b.__arrow_c_array__(), [(0, n)], 0, 1, checked=True)
            if problem.startswith("null"):
                assert checked == problem
            else:
                assert checked == (n - 1, section_figures(b, [(0, n)])[1])
    assert checked_stats(swapped, ordered=False) == stats_of_records(batch_to_records(swapped))
    with pytest.raises(ValueError, match="unfit batch: null offset"):
        batch_stats(null_offset)


def test_a_decoder_refuses_what_the_checks_find() -> None:
    rnd = random.Random(5)
    batch = records_to_batch(_records(rnd, 30, False))
    swapped = batch.take(pa.array([*range(28), 29, 28]))
    payload = BatchEncoder(None).encode(swapped, 1 << 20)
    with pytest.raises(FormatError, match="offsets do not strictly increase"):
        decode_measured(payload, 0, "t")
    assert decode_measured(payload, 0, "t", ordered=False)[1].record_count == 30


def test_another_layout_is_a_type_error() -> None:
    other = pa.record_batch({"offset": pa.array([1], pa.int64())})
    with pytest.raises(TypeError, match="RECORD_SCHEMA"):
        _sections.checked_figures(other.__arrow_c_array__(), True)
    batch = records_to_batch(_records(random.Random(1), 3, False))
    wide_keys = batch.set_column(2, "key", batch.column("key").cast(pa.large_binary()))
    with pytest.raises(TypeError, match="RECORD_SCHEMA"):
        _sections.checked_figures(wide_keys.__arrow_c_array__(), True)
    with pytest.raises(TypeError, match="RECORD_SCHEMA"):
        _sections.batch_figures(wide_keys.__arrow_c_array__(), [(0, 3)], 0, 1)


def test_a_section_outside_its_batch_or_headers_out_of_order_are_refused() -> None:
    """``_sections.batch_figures`` reads nothing outside a batch's buffers: a span past
    its rows, or headers' list offsets that go back inside it (Arrow's validation would
    refuse them; the pass does not rely on it), are a ValueError."""

    batch = records_to_batch(_records(random.Random(2), 4, True))
    arrays = batch.__arrow_c_array__()
    with pytest.raises(ValueError, match="spans rows"):
        _sections.batch_figures(arrays, [(0, 2), (2, 3)], 0, 1)
    headers = batch.column("headers")
    items = headers.values
    n_items = len(items)
    lists = pa.array([0, 0, n_items, 0, n_items], pa.int32())  # row 2's end before its start
    disordered = pa.ListArray.from_buffers(
        headers.type, 4, [None, lists.buffers()[1]], children=[items]
    )
    bad = _column(batch, "headers", disordered)
    with pytest.raises(ValueError, match="out of order"):
        _sections.batch_figures(bad.__arrow_c_array__(), [(0, 2), (2, 1), (3, 1)], 0, 1)


def _in_python(batch: pa.RecordBatch) -> str | None:
    """The checks as pyarrow's objects make them, one column at a time (what the reader
    made before ``checked_stats``)."""
    return columns_problem(batch.column(0), batch.column(1), batch.column(4))


def test_nulls_outside_a_slice_are_not_its_own() -> None:
    """A null offset, headers list, header item or header key in rows sliced away (and in
    items before the headers' first) is not the slice's problem; inside it, it is."""
    rnd = random.Random(11)
    batch = records_to_batch(_records(rnd, 20, True))
    n = batch.num_rows
    offsets = pa.array([None, *batch.column("offset").to_pylist()[1:]], pa.int64())
    lists = pa.array(
        [None, *batch.column("headers").to_pylist()[1:]], RECORD_SCHEMA.field("headers").type
    )
    for name, column in (("offset", offsets), ("headers", lists)):
        bad = _column(batch, name, column)
        assert checked_stats(bad) == _in_python(bad) is not None
        tail = bad.slice(1)
        assert checked_stats(tail) == stats_of_records(batch_to_records(tail))
        assert _in_python(tail) is None
    headers_type = RECORD_SCHEMA.field("headers").type
    items = pa.StructArray.from_arrays(
        [pa.array([None, "a"], pa.string()), pa.array([b"x", b"y"])],
        fields=list(headers_type.value_type),
        mask=pa.array([True, False]),
    )
    starts = pa.array([1, 2, *([2] * (n - 1))], pa.int32())  # item 0, the null, is no one's
    padded = _column(batch, "headers", pa.ListArray.from_arrays(starts, items, type=headers_type))
    assert checked_stats(padded) == stats_of_records(batch_to_records(padded))
    assert _in_python(padded) is None


def test_an_empty_batch_has_no_problem() -> None:
    empty = records_to_batch([])
    assert batch_problem(empty) is None
    assert decoded_problem(empty) is None


def test_a_second_reader_takes_the_firsts_stats() -> None:
    """An uncompressed payload decoded by the first reader of a pair is handed to the
    second with its stats (``second_read.MEMO``)."""
    batch = records_to_batch(_records(random.Random(9), 50, True))
    payload = BatchEncoder(None).encode(batch, 1 << 20)
    expected = stats_of_records(batch_to_records(batch))
    assert MEMO.keeps(payload, "first")
    first = decode_measured(payload, 0, "t", role="first")
    second = decode_measured(payload, 0, "t", role="second")
    assert second[0] is first[0]
    assert first[1] == second[1] == expected
