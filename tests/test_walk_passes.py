"""The compiled passes of a job's walk over its inputs' blocks (``worker/merge.py``)
against Python models: a block's table as columns (``_sections.table_columns``), and
several inputs' pending runs merged in key order with their weights summed, up to a
budget (``_sections.span_weights``), a block's keys' places among a group's
(``_sections.key_ranks``); their refusals; and a group's rows taken in runs that continue
one another (``GroupRows.add_run``) against the same rows taken at once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import _sections
from compactor.fileformat.block import TableEntry
from compactor.fileformat.meta import section_key
from compactor.worker.gather import GroupRows

TOPICS = ("a", "ab", "b", "ü")
"""Topics whose raw bytes order one as a prefix of another, and one past ASCII."""

_keys = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.integers(0, 6)), unique=True, max_size=30
).map(lambda parts: sorted(section_key(t, p) for t, p in parts))


@st.composite
def spans(draw: st.DrawFn) -> tuple[list[Any], list[int], int, int]:
    """An input's entries (strictly increasing keys, sizes from 0) and a range of them."""
    keys = draw(_keys)
    sizes = draw(st.lists(st.integers(0, 100), min_size=len(keys), max_size=len(keys)))
    at = draw(st.integers(0, len(keys)))
    return keys, sizes, at, draw(st.integers(at, len(keys)))


def weights_model(
    spans: list[tuple[list[Any], list[int], int, int]], budget: int
) -> tuple[list[Any], list[int]]:
    """Every key of the spans' ranges once, in order, with its sizes summed; up to and
    including the first at which the sums so far reach ``budget``."""
    summed: dict[Any, int] = {}
    for keys, sizes, at, end in spans:
        for key, size in zip(keys[at:end], sizes[at:end], strict=True):
            summed[key] = summed.get(key, 0) + size
    out_keys, out_weights, total = [], [], 0
    for key in sorted(summed):
        out_keys.append(key)
        out_weights.append(summed[key])
        total += summed[key]
        if total >= budget:
            break
    return out_keys, out_weights


@settings(max_examples=400, deadline=None)
@given(st.lists(spans(), max_size=6), st.integers(-5, 1500))
def test_span_weights_merges_as_the_model_does(
    given_spans: list[tuple[list[Any], list[int], int, int]], budget: int
) -> None:
    assert _sections.span_weights(given_spans, budget) == weights_model(given_spans, budget)


def test_span_weights_stops_at_the_first_key_that_reaches_the_budget() -> None:
    a = [section_key("a", p) for p in range(4)]
    spans = [(a, [5, 5, 5, 5], 0, 4), (a[1:], [1, 1, 1], 0, 3)]
    assert _sections.span_weights(spans, 11) == (a[:2], [5, 6])
    assert _sections.span_weights(spans, 12) == (a[:3], [5, 6, 6])
    assert _sections.span_weights(spans, 0) == (a[:1], [5])
    assert _sections.span_weights(spans, 1 << 62) == (a, [5, 6, 6, 6])
    assert _sections.span_weights([(a, [1, 1, 1, 1], 2, 2)], 1) == ([], [])


@pytest.mark.parametrize(
    ("span", "error", "says"),
    [
        ([(b"a", 1)], TypeError, "not (keys, sizes, at, end)"),
        (([(b"a", 1)], [1], 0, 2), ValueError, "entries 0..2"),
        (([(b"a", 1)], [1], -1, 1), ValueError, "entries -1..1"),
        (([(b"a", 1)], [], 0, 1), ValueError, "0 sizes"),
        (([("a", 1)], [1], 0, 1), TypeError, "not (bytes, int)"),
        (([(b"a", 1), (b"a", 1)], [1, 1], 0, 2), ValueError, "do not increase"),
        (([(b"b", 1), (b"a", 2)], [1, 1], 0, 2), ValueError, "do not increase"),
        (([(b"a", 1)], [-1], 0, 1), ValueError, "size -1"),
        (([(b"a", 1)], ["1"], 0, 1), ValueError, "size '1'"),
    ],
)
def test_span_weights_refuses_what_is_no_span_of_entries(
    span: Any, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)")):
        _sections.span_weights([span], 1 << 40)


@settings(max_examples=400, deadline=None)
@given(_keys, _keys, st.data())
def test_key_ranks_are_a_dicts_places_or_a_key_error(
    group: list[Any], table: list[Any], data: st.DataObject
) -> None:
    """The model: a dict from each group key to its place. Every key of the range in the
    group gives its place; otherwise KeyError names the first key the group lacks."""
    at = data.draw(st.integers(0, len(table)), label="at")
    end = data.draw(st.integers(at, len(table)), label="end")
    places = {key: i for i, key in enumerate(group)}
    missing = [key for key in table[at:end] if key not in places]
    if missing:
        with pytest.raises(KeyError) as failure:
            _sections.key_ranks(tuple(group), table, at, end)
        assert failure.value.args == (missing[0],)
    else:
        assert _sections.key_ranks(tuple(group), table, at, end) == [
            places[key] for key in table[at:end]
        ]


@pytest.mark.parametrize(
    ("keys", "error", "says"),
    [
        ([(b"a", 2), (b"a", 1)], KeyError, r"\(b'a', 1\)"),  # out of order: never a place
        ([(b"a", 1), (b"a", 1)], KeyError, r"\(b'a', 1\)"),  # twice: the second has none
        ([(b"a", 1), ("a", 2)], TypeError, "key 1 is not"),
        ([(b"a", 1), (b"a", 2, 0)], TypeError, "key 1 is not"),
    ],
)
def test_key_ranks_refuses_keys_out_of_order_or_of_another_shape(
    keys: list[Any], error: type[Exception], says: str
) -> None:
    group = ((b"a", 1), (b"a", 2), (b"a", 3))
    with pytest.raises(error, match=says):
        _sections.key_ranks(group, keys, 0, 2)
    with pytest.raises(TypeError, match="group key"):
        _sections.key_ranks(((b"a", 1), "x"), [(b"a", 1)], 0, 1)
    with pytest.raises(ValueError, match="keys 1..3 of 2"):
        _sections.key_ranks(group, keys, 1, 3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 9), st.integers(0, 2**64 - 1))))
def test_table_columns_are_the_entries_fields(parts: list[tuple[str, int, int]]) -> None:
    entries = [
        TableEntry(0, 0, n + 1, 0, size, 0, 0, None, t, p, section_key(t, p), n, 1, -1, -1)
        for n, (t, p, size) in enumerate(parts)
    ]
    table = _sections.SectionEntries(TableEntry)
    for e in entries:
        table.append(e)
    for form in (entries, table):  # a writer's list, a parsed table's packed entries
        keys, counts, sizes = _sections.table_columns(form)
        assert keys == [e.key for e in entries]
        assert counts == [e.record_count for e in entries]
        assert sizes == [e.uncompressed_bytes for e in entries]


def test_table_columns_refuses_what_is_no_table_entry() -> None:
    entry = TableEntry(0, 0, 1, 0, 0, 0, 0, None, "t", 0, section_key("t", 0), 0, 1, -1, -1)
    with pytest.raises(TypeError, match="entry 1 is not a TableEntry"):
        _sections.table_columns([entry, (1, 2)])
    with pytest.raises(TypeError, match="entry 0 is not a TableEntry"):
        _sections.table_columns([tuple(range(15))])
    with pytest.raises(TypeError):
        _sections.table_columns((tuple(range(15)),))  # type: ignore[arg-type]


class _Block:
    """What ``GroupRows`` reads of a block: its decoded batch (``Block.shaped``)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch

    def shaped(self, fields: Any = None) -> pa.RecordBatch:
        return self.batch


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_runs_that_continue_one_another_are_one_piece(data: st.DataObject) -> None:
    """Two inputs' blocks taken in runs in rounds, as a group's walk takes them: a round
    may stop anywhere in a block, a new block starts a piece of its own, and (not from a
    walk, but to hold the rule) a run may skip rows. The rows, labels and counts are
    each input's runs in order, input after input; each stretch of runs that continue
    one another is one piece, one slice of its block."""
    runs: list[list[tuple[_Block, int, int]]] = []
    for i in range(2):
        mine = []
        for b in range(2):
            block = _Block(
                pa.record_batch({"offset": list(range(100 * i + 10 * b, 100 * i + 10 * b + 6))})
            )
            edges = sorted(data.draw(st.sets(st.integers(0, 6), min_size=2, max_size=6)))
            skips = data.draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
            mine += [
                (block, a, z)
                for a, z, skip in zip(edges, edges[1:], skips, strict=False)
                if not skip
            ]
        runs.append(mine)
    rows = GroupRows()
    for round_ in range(max(map(len, runs))):
        for i in data.draw(st.permutations([0, 1])):
            if round_ < len(runs[i]):
                block, a, z = runs[i][round_]
                rows.add_run(i, block, a, [i] * (z - a), [1] * (z - a))  # type: ignore[arg-type]
    stretches = 0
    for mine in runs:
        stretches += sum(
            1
            for k, (block, a, _) in enumerate(mine)
            if k == 0 or mine[k - 1][0] is not block or mine[k - 1][2] != a
        )
    taken = [
        n for mine in runs for block, a, z in mine for n in block.batch.column(0)[a:z].to_pylist()
    ]
    if not taken:
        return
    got, labels, counts = rows.batch(2)
    assert got.column(0).to_pylist() == taken
    assert len(rows._pieces) == stretches
    assert labels.to_pylist() == [n // 100 for n in taken]
    assert counts == [sum(1 for n in taken if n // 100 == i) for i in range(2)]
