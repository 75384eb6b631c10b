"""Gathers a pointer's small batches before phase 1 and phase 2 see them.

A partition of small sections reaches a pointer as one small batch per input file (a
section, or a section's rows of a shared block). Phase 1 and phase 2 each pay a fixed
cost per batch (an insert into the key buffer; a keep-set lookup, masks and a filter), so
consecutive small batches are concatenated first: the same records in the same order,
fewer calls. Gathering copies only the small batches, at most ``GATHER_BYTES`` of them.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from compactor.fileformat import SectionReader
from compactor.fileformat.batches import RECORD_OVERHEAD, concat
from compactor.fileformat.block import Block
from compactor.fileformat.reader import SharedSectionReader

GATHER_BYTES = 64 << 10
"""Batches are gathered while together they weigh less than this (``weight``)."""
_BINARY = ("key", "value")


def weight(batch: pa.RecordBatch) -> int:
    """About the bytes of a batch's records: its keys' and values' bytes and a fixed
    overhead per record. From the offsets of the rows the batch holds, so a slice of a
    big batch (a section of a shared block) weighs its own rows, not the whole buffers."""
    n = batch.num_rows
    total: int = RECORD_OVERHEAD * n
    if not n:
        return 0
    names = batch.schema.names
    for name in _BINARY:
        if name in names:
            column = batch.column(name)
            offsets = column.buffers()[1]
            if offsets is not None:
                view = memoryview(offsets).cast("i")
                total += int(view[column.offset + n]) - int(view[column.offset])
    return total


Weighed = tuple[pa.RecordBatch, int]
"""A batch and its weight."""


def weighed(
    batches: Iterable[pa.RecordBatch], size: Callable[[pa.RecordBatch], int] = weight
) -> Iterator[Weighed]:
    """Each batch with its ``size``."""
    return ((batch, size(batch)) for batch in batches)


def section_batches(
    sections: Iterable[SectionReader], fields: Sequence[str] | None = None
) -> Iterator[Weighed]:
    """The sections' batches (whole or ``fields``), weighed: a shared section's one batch
    by its logical size, which its trailer gives for free, others by ``weight``."""
    for section in sections:
        known = section.logical_bytes
        for batch in section.batches(fields):
            yield batch, weight(batch) if known is None else known


def gathered(batches: Iterable[Weighed], limit: int = GATHER_BYTES) -> Iterator[pa.RecordBatch]:
    """The batches less the empty ones, with consecutive batches concatenated while
    together they weigh less than ``limit``."""
    pending: list[pa.RecordBatch] = []
    total = 0
    for batch, w in batches:
        if not batch.num_rows:
            continue
        if pending and total + w >= limit:
            yield concat(pending)
            pending, total = [], 0
        if w >= limit:
            yield batch
        else:
            pending.append(batch)
            total += w
    if pending:
        yield concat(pending)


class PlacedRows:
    """The rows of many sections, taken in order and assembled as one batch in that order
    (a group's partitions, each from every input: ``worker.group``).

    A shared section is taken by its place in its block (``SharedSectionReader.place``),
    not sliced out: one input's consecutive sections of a block are consecutive rows of
    it, so the rows of all the sections come from a few runs, one per block. The runs are
    concatenated (in the order their blocks were first met) and the sections' rows taken
    from them in the order the sections came: one concatenation of a few pieces and one
    ``take``, instead of a slice per section and a concatenation of all of them. (Any
    other section's batches are runs of their own.)"""

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        self._fields = fields
        self._runs: dict[int, list[Any]] = {}  # id(batch) -> [batch, first row, end row]
        self._sections: list[tuple[int, int, int]] = []  # (run, first row, rows)
        self._in_order = True  # each section's rows follow the last's in one run
        self._rows = 0

    def add(self, section: SectionReader) -> int:
        """Takes ``section``'s rows; returns how many it has."""
        if isinstance(section, SharedSectionReader) and section.placeable:
            return self._add(*section.place(self._fields))
        return sum(self._add(b, 0, b.num_rows) for b in section.batches(self._fields))

    def add_placed(self, block: Block, start: int, count: int) -> int:
        """Takes the ``count`` rows from ``start`` of a shared block's batch (a section
        by its place, ``SharedSectionReader.place``, without the section object)."""
        return self._add(block.shaped(self._fields), start, count)

    def _add(self, batch: pa.RecordBatch, start: int, count: int) -> int:
        key = id(batch)
        run = self._runs.get(key)
        if run is None:
            self._in_order &= not self._runs
            self._runs[key] = [batch, start, start + count]
        else:
            self._in_order &= key == self._sections[-1][0] and run[2] == start
            run[1], run[2] = min(run[1], start), max(run[2], start + count)
        self._sections.append((key, start, count))
        self._rows += count
        return count

    def batch(self) -> pa.RecordBatch:
        """All the rows taken, in order (ValueError if none were)."""
        if not self._runs:
            raise ValueError("no rows were taken")
        if self._in_order:
            ((batch, first, end),) = self._runs.values()
            return batch.slice(first, end - first)
        bases, pieces, at = {}, [], 0
        for key, (batch, first, end) in self._runs.items():
            bases[key] = at - first
            pieces.append(batch.slice(first, end - first))
            at += end - first
        indices = array.array("q")
        for key, start, count in self._sections:
            base = bases[key] + start
            indices.extend(range(base, base + count))
        take = pa.Array.from_buffers(pa.int64(), self._rows, [None, pa.py_buffer(indices)])
        return concat(pieces).take(take)
