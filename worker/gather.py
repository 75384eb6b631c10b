"""Gathers a pointer's small batches before phase 1 and phase 2 see them.

A partition of small sections reaches a pointer as one small batch per input file (a
section, or a section's rows of a shared block). Phase 1 and phase 2 each pay a fixed
cost per batch (an insert into the key buffer; a keep-set lookup, masks and a filter), so
consecutive small batches are concatenated first: the same records in the same order,
fewer calls. Gathering copies only the small batches, at most ``GATHER_BYTES`` of them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import pyarrow as pa

from compactor.fileformat import SectionReader
from compactor.fileformat.batches import RECORD_OVERHEAD, concat
from compactor.fileformat.block import Block
from compactor.fileformat.framing import EncodedFrame
from compactor.fileformat.picked import Records
from compactor.fileformat.read_frames import frame_of
from compactor.fileformat.writer import MAX_BATCH_BYTES
from compactor.worker.kernel import run_labels

GATHER_BYTES = 4 * MAX_BATCH_BYTES
"""Batches are gathered while together they weigh less than this (``weight``). Up to
64 KiB at first, then the writer's batch size (``bench/README.md``, "Input batches
gathered up to 1 MiB"), then four times that: phase 2 still paid about half a
millisecond per gathered batch in its verdict, filter and keep-set lookup alone, and a
full compaction of L0 files of hundreds of records a section took 5-9% less time with
batches of 4 MiB, the same with 8 (``bench/README.md``, "Input batches gathered up to 4
MiB"). A gathered batch's survivors are cut at the writer's size where they are
written. Each pointer holds at most this much more while it gathers, and as much again
while a gathered batch is made (its pieces are let go before it is handed on)."""
GATHER_BELOW = MAX_BATCH_BYTES
"""Only batches lighter than this are gathered: the writer's batch size. At 256 KiB
before, so that a 64 MiB L1 file's sections of 4,000 records (about 640 KiB) were not
copied once more; gathered into batches of 4 MiB they took 4-5% less time in a full
compaction. A batch whose frame its output may write as it was read is never gathered
(``gathered``'s ``as_read``)."""
_BINARY = ("key", "value")
_Joined = TypeVar("_Joined")


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


def gathered(
    batches: Iterable[Weighed],
    limit: int = GATHER_BYTES,
    below: int = GATHER_BELOW,
    as_read: Callable[[EncodedFrame], bool] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batches less the empty ones, with consecutive batches lighter than ``below``
    concatenated while together they weigh less than ``limit``. A batch read in a frame
    kept for it (``read_frames``) that ``as_read`` accepts (one its output may write as
    it was read) is not gathered: passed on as it is, it may be written in that frame."""
    return _gathered(batches, limit, below, as_read, concat)


def gathered_tables(
    batches: Iterable[Weighed], as_read: Callable[[EncodedFrame], bool] | None = None
) -> Iterator[Records]:
    """``gathered``, each run of small batches joined as a table of them rather than
    concatenated: nothing is copied. Phase 2 decides about a table's records at once and
    copies only its survivors (``fileformat.picked``), where a concatenation first
    copied every record once more."""
    return _gathered(batches, GATHER_BYTES, GATHER_BELOW, as_read, _table)


def _table(batches: list[pa.RecordBatch]) -> Records:
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)


def _gathered(
    batches: Iterable[Weighed],
    limit: int,
    below: int,
    as_read: Callable[[EncodedFrame], bool] | None,
    join: Callable[[list[pa.RecordBatch]], _Joined],
) -> Iterator[pa.RecordBatch | _Joined]:
    below = min(below, limit)
    pending: list[pa.RecordBatch] = []
    total = 0
    for batch, w in batches:
        if not batch.num_rows:
            continue
        if as_read is not None and w < below:
            frame = frame_of(batch)
            if frame is not None and as_read(frame):
                w = below
        if pending and (total + w >= limit or w >= below):
            joined, pending, total = join(pending), [], 0
            yield joined  # the pieces already let go: not held while the caller works
        if w >= below:
            yield batch
        else:
            pending.append(batch)
            total += w
    if pending:
        joined, pending = join(pending), []
        yield joined


class _Piece:
    """A run of an input's rows in a group (``GroupRows``): ``rows`` rows from ``start``
    of a shared block's decoded batch (``block``), or a framed section's ``batches``;
    its sections' partition ordinals and row counts."""

    __slots__ = ("input", "block", "start", "rows", "batches", "ordinals", "counts")

    def __init__(
        self,
        input: int,
        block: pa.RecordBatch | None,
        start: int,
        rows: int,
        batches: list[pa.RecordBatch],
        ordinals: list[int],
        counts: list[int],
    ) -> None:
        self.input, self.block, self.start, self.rows = input, block, start, rows
        self.batches, self.ordinals, self.counts = batches, ordinals, counts


class GroupRows:
    """The rows of a group's partitions (``worker.group``), taken from a pointer's inputs
    and assembled in the group's order: input after input, oldest first, and within an
    input in its order, which is partition order and, within a partition, offset order.
    So a partition's rows come in offset order, though not next to each other: each row
    is labelled with its partition's ordinal in the group.

    The merge hands over whole runs: an input's consecutive sections of one block are
    consecutive rows of its batch, so a run is one slice, whatever the number of sections
    in it (``add_run``), with each section's partition ordinal in the group and row count.
    A run that continues the input's last one in the same block extends it: a group's
    walk may take its runs in several rounds (``SectionMerge.pending_shared`` stops at a
    framed section), so an input's block may come in several runs. Runs may come in any
    order of inputs; ``batch`` puts whole runs in the group's order, slices the blocks
    and concatenates them (phase 1's narrow columns), and ``table`` does the same without
    the concatenation (phase 2's records, of which only the survivors are copied). No
    Python runs per row, and per section only a list entry."""

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        self.fields = fields
        self._pieces: list[_Piece] = []
        self._last: dict[int, _Piece] = {}
        """Each input's last piece, while a run may extend it (a block's)."""
        self._rows = 0

    def add_run(
        self, input: int, block: Block, start: int, ordinals: Sequence[int], counts: Sequence[int]
    ) -> None:
        """Takes the rows from ``start`` of a shared block's batch of input ``input``:
        sections of the partitions ``ordinals``, ``counts`` rows each, one after another."""
        rows = sum(counts)
        batch = block.shaped(self.fields)  # decoded and checked once, the same object after
        last = self._last.get(input)
        if last is not None and last.block is batch and last.start + last.rows == start:
            last.rows += rows
            last.ordinals += ordinals
            last.counts += counts
        else:
            piece = _Piece(input, batch, start, rows, [], list(ordinals), list(counts))
            self._pieces.append(piece)
            self._last[input] = piece
        self._rows += rows

    def add(self, input: int, section: SectionReader, ordinal: int) -> int:
        """Takes a section of input ``input`` through its reader (a framed one, or one of
        a verifying stream); returns how many rows it has."""
        batches = list(section.batches(self.fields))
        rows: int = sum(b.num_rows for b in batches)
        self._pieces.append(_Piece(input, None, 0, rows, batches, [ordinal], [rows]))
        self._last.pop(input, None)
        self._rows += rows
        return rows

    def batch(self, partitions: int) -> tuple[pa.RecordBatch, pa.Array, list[int]]:
        """All the rows taken, in the group's order, as one batch; each row's partition
        ordinal (int32); and how many rows each of the ``partitions`` ordinals has.
        ValueError if no rows were taken."""
        batches, labels, per_partition = self._assembled(partitions)
        return concat(batches), labels, per_partition

    def table(self, partitions: int) -> tuple[pa.Table, pa.Array, list[int]]:
        """``batch``, the rows as a table of the blocks' slices and the sections'
        batches, uncopied: phase 2 copies only the survivors out of it
        (``fileformat.picked.taken``)."""
        batches, labels, per_partition = self._assembled(partitions)
        return pa.Table.from_batches(batches), labels, per_partition

    def _assembled(self, partitions: int) -> tuple[list[pa.RecordBatch], pa.Array, list[int]]:
        if not self._rows:
            raise ValueError("no rows were taken")
        pieces = self._pieces
        if any(a.input > b.input for a, b in itertools.pairwise(pieces)):
            pieces = sorted(pieces, key=operator.attrgetter("input"))  # stable: runs keep order
        batches: list[pa.RecordBatch] = []
        ordinals: list[int] = []
        counts: list[int] = []
        for piece in pieces:
            if piece.block is None:
                batches += piece.batches
            else:
                batches.append(piece.block.slice(piece.start, piece.rows))
            ordinals += piece.ordinals
            counts += piece.counts
        labels, per_partition = run_labels(ordinals, counts, partitions)
        return batches, labels, per_partition
