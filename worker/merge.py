"""Walks the job's inputs partition by partition: one pointer's sections, merged.

Each input file's sections are sorted by (topic, partition); the merge takes the
smallest pending (topic, partition) and every input's section of it, in input order.
Inputs are a contiguous run of the live sequence, oldest first, so a partition's
sections come in offset order and their concatenation is the offset-ordered merge (the
writer still checks that offsets strictly increase).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence

from compactor.fileformat import SectionReader, StreamReader, _sections
from compactor.fileformat.block import TableEntry
from compactor.fileformat.reader import SharedRun
from compactor.worker.errors import PhaseMismatch
from compactor.worker.gather import GroupRows

Key = tuple[bytes, int]
"""A section's place in the order of a file (``fileformat.meta.section_key``)."""


class _Table:
    """A shared block's section table as columns: each section's key, rows and logical
    bytes, what a group's walk reads of every section, without an attribute chain each.
    Made in one compiled pass (``_sections.table_columns``); a section's first row is
    read from the packed entries (``entries.start``), no ``TableEntry`` made."""

    __slots__ = ("entries", "keys", "counts", "sizes")

    def __init__(self, entries: _sections.SectionEntries[TableEntry]) -> None:
        self.entries = entries
        self.keys, self.counts, self.sizes = _sections.table_columns(entries)


_NO_TABLE = _Table(_sections.SectionEntries(TableEntry))


class SectionMerge:
    """One pointer (phase 1 or phase 2) over all inputs.

    Each input's head is its next section: a framed one as its ``SectionReader``, or the
    i-th section of a shared block (``SharedRun``), held as the run and i, so that taking
    a block's sections makes no object per section: one partition at a time (``take``)
    or a group's run of partitions at once (``take_upto``). Invariant:
    ``_keys[i]``, ``_parts[i]`` are input i's head's key and (topic, partition), None once
    the input is done; ``_framed[i]`` is its head when that is a framed section, else
    ``_runs[i]`` and ``_at[i]`` are its block and index, and ``_tables[i]`` the block's
    table as columns. ``_ahead[i]`` holds input i's units read past its head's
    (``pending_shared`` reads them), in stream order: shared blocks with their tables,
    then possibly a framed section or the stream's end (None), after which nothing is
    read ahead; the head takes them from there before reading on (``_next_unit``)."""

    def __init__(self, readers: Sequence[StreamReader]) -> None:
        n = len(readers)
        self._units = [r.units() for r in readers]
        self._framed: list[SectionReader | None] = [None] * n
        self._runs: list[SharedRun | None] = [None] * n
        self._at = [0] * n
        self._tables = [_NO_TABLE] * n
        self._keys: list[Key | None] = [None] * n
        self._parts: list[tuple[str, int] | None] = [None] * n
        self._ahead: list[list[_Unit]] = [[] for _ in range(n)]
        for i in range(n):
            self._next_unit(i)

    def next_partition(self) -> tuple[str, int] | None:
        live = [(k, i) for i, k in enumerate(self._keys) if k is not None]
        return self._parts[min(live)[1]] if live else None

    def pending_shared(self, budget: int) -> list[tuple[Key, str, int, int]]:
        """The partitions from the pointer's head on whose every section is a shared one,
        in order, each as (key, topic, partition, its sections' logical bytes together):
        up to the first partition with a framed section in any input, and no further than
        the first partition at which those before it and itself weigh ``budget``
        together. The tables of the blocks read so far are merged in one compiled pass
        (``_sections.span_weights``) up to where the first of them ends (beyond it, that
        input may hold sections not yet seen); while the budget is not reached there,
        the inputs whose blocks end there read their next unit (``_ahead``) and the merge
        goes on. So a group's walk takes its partitions in one ``take_upto``, however
        many blocks they span, and the pointer holds, beyond the blocks at its heads, at
        most the blocks its budget reaches into."""
        found: list[tuple[Key, str, int, int]] = []
        after: Key | None = None  # the last key merged so far
        while True:
            cap, spans, ending = self._known(after)
            if spans:
                keys, sizes = _sections.span_weights(spans, budget)
                found += [(k, _topic(k[0]), k[1], w) for k, w in zip(keys, sizes, strict=True)]
                budget -= sum(sizes)
            if not spans or budget <= 0 or not ending:
                return found
            for i in ending:
                self._read_ahead(i)
            after = cap

    def _known(self, after: Key | None) -> tuple[Key | None, list[_Span], list[int]]:
        """What ``pending_shared`` may merge past ``after`` (from the heads if None) of the
        units read so far: the last key it may merge (None: every one), each table's
        entries after ``after`` up to it, and the inputs that may read on past it (their
        blocks read so far end there)."""
        bounds: list[tuple[Key, int, bool]] = []  # (last key input i may give, i, may read on)
        tables: list[tuple[_Table, int]] = []
        for i, key in enumerate(self._keys):
            if key is None:
                continue
            if self._runs[i] is None:  # a framed head: its partition and those after it wait
                bounds.append((_before(key), i, False))
                continue
            tables.append((self._tables[i], self._at[i]))
            last: Key | None = self._tables[i].keys[-1]
            more = True
            for unit, table in self._ahead[i]:
                if table is not None:
                    tables.append((table, 0))
                    last = table.keys[-1]
                else:  # a framed section (its partition and those after it wait) or the end
                    last = _before(unit.key) if isinstance(unit, SectionReader) else None
                    more = False
            if last is not None:
                bounds.append((last, i, more))
        cap = min(bounds)[0] if bounds else None
        spans: list[_Span] = []
        for table, at in tables:
            keys = table.keys
            if after is not None:
                at = bisect.bisect_right(keys, after, at)
            end = len(keys) if cap is None else bisect.bisect_right(keys, cap, at)
            if at < end:
                spans.append((keys, table.sizes, at, end))
        return cap, spans, [i for last, i, more in bounds if more and last == cap]

    def take(self, topic: str, partition: int) -> Iterator[SectionReader]:
        """The inputs' sections of this partition, oldest input first; each is consumed
        (or skipped) before the merge moves that input on."""
        tp = (topic, partition)
        for i, part in enumerate(self._parts):
            if part == tp:
                head = self._reader(i)
                yield head
                head.skip()
                self._advance(i)

    def take_upto(self, last: Key, rows: GroupRows, keys: Sequence[Key]) -> None:
        """Takes every pending section up to partition ``last`` (its key) into ``rows``:
        an input's sections of one block as one run (found by a bisect on the block's
        keys, no step per section), others one by one. ``keys`` are the group's
        partitions' keys in order, a partition's place there its ordinal; PhaseMismatch
        for a partition it lacks."""
        for i in range(len(self._keys)):
            while (key := self._keys[i]) is not None and key <= last:
                run = self._runs[i]
                if run is None or not run.placeable:
                    rows.add(i, self._reader(i), _ordinal(keys, key))
                    self._advance(i)
                    continue
                at, table = self._at[i], self._tables[i]
                end = bisect.bisect_right(table.keys, last, at)
                rows.add_run(
                    i,
                    run.block,
                    table.entries.start(at),
                    _ordinals(keys, table.keys, at, end),
                    table.counts[at:end],
                )
                if end < len(table.keys):
                    self._at[i] = end
                    self._head(i, table.keys[end])
                else:
                    self._next_unit(i)

    def _reader(self, i: int) -> SectionReader:
        """Input i's head as a SectionReader (a shared section's made on demand)."""
        run = self._runs[i]
        head = self._framed[i] if run is None else run.reader(self._at[i])
        assert head is not None
        return head

    def _advance(self, i: int) -> None:
        """Moves input i past its head."""
        keys = self._tables[i].keys
        if self._runs[i] is not None and self._at[i] + 1 < len(keys):
            self._at[i] += 1
            self._head(i, keys[self._at[i]])
        else:
            self._next_unit(i)

    def _head(self, i: int, key: Key) -> None:
        """Input i's head is the section of ``key`` in its block."""
        self._keys[i], self._parts[i] = key, (_topic(key[0]), key[1])

    def _next_unit(self, i: int) -> None:
        """Input i's next unit (a framed section or a block's run) becomes its head: the
        first one read ahead, if any."""
        unit, table = self._ahead[i].pop(0) if self._ahead[i] else self._unit(i)
        self._framed[i] = self._runs[i] = None
        self._at[i] = 0
        self._tables[i] = _NO_TABLE
        if unit is None:
            self._keys[i] = self._parts[i] = None
        elif isinstance(unit, SharedRun):
            assert table is not None
            self._runs[i] = unit
            self._tables[i] = table
            self._head(i, table.keys[0])
        else:
            self._framed[i] = unit
            self._keys[i], self._parts[i] = unit.key, (unit.topic, unit.partition)

    def _unit(self, i: int) -> _Unit:
        """Input i's next unit off its stream, a shared block's with its table."""
        unit = next(self._units[i], None)
        if isinstance(unit, SharedRun):
            return unit, _Table(unit.block.sections.entries)
        return unit, None

    def _read_ahead(self, i: int) -> None:
        self._ahead[i].append(self._unit(i))


_Unit = tuple[SectionReader | SharedRun | None, _Table | None]
"""An input's unit as read (None: the stream's end), with its table if it is a block."""
_Span = tuple[list[Key], list[int], int, int]
"""A table's keys and sizes, and the entries ``_sections.span_weights`` merges of them."""


def _before(key: Key) -> Key:
    """The greatest key a section before ``key`` may have, for comparisons: (topic,
    partition - 1), or, at partition 0, one below every key of the topic."""
    topic, partition = key
    return (topic, partition - 1) if partition else (topic, -1)


def _ordinals(keys: Sequence[Key], table: list[Key], at: int, end: int) -> list[int]:
    """The ordinals of ``table[at:end]``'s keys, a block's, among the group's ``keys``:
    a binary search and a walk of the two sorted lists in one compiled pass
    (``_sections.key_ranks``), no hashing; PhaseMismatch naming the first partition
    ``keys`` lacks."""
    try:
        return _sections.key_ranks(keys, table, at, end)
    except KeyError as missing:
        raise _missing(missing.args[0]) from None


@functools.cache
def _topic(raw: bytes) -> str:
    return raw.decode("utf-8")


def _ordinal(keys: Sequence[Key], key: Key) -> int:
    """``key``'s ordinal among the group's ``keys`` (a framed section's): ``_ordinals``
    of the one key, so both ask the same compiled search."""
    return _ordinals(keys, [key], 0, 1)[0]


def _missing(key: Key) -> PhaseMismatch:
    topic, partition = key
    return PhaseMismatch(
        "phase 2's pointer has a section of this partition, which phase 1's group does not hold",
        topic=topic.decode(),
        partition=partition,
    )
