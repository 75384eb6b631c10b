"""Gathers a pointer's small batches before phase 1 and phase 2 see them.

A partition of small sections reaches a pointer as one small batch per input file (a
section, or a section's rows of a shared block). Phase 1 and phase 2 each pay a fixed
cost per batch (an insert into the key buffer; a keep-set lookup, masks and a filter), so
consecutive small batches are concatenated first: the same records in the same order,
fewer calls. Gathering copies only the small batches, at most ``GATHER_BYTES`` of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from compactor.fileformat import SectionReader
from compactor.fileformat.batches import RECORD_OVERHEAD, concat

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
