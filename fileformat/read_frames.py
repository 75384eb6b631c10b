"""The frame a decoded batch was read from, for as long as the batch lives.

A reader that decodes a batch frame whole (``SectionReader.batches``) leaves the frame
here, by the batch it gave. A writer handed that very batch (the same object, not an
equal one: a slice, a filter or a concatenation makes another) finds the frame and, where
it would encode the batch alike, writes the frame's payload as it is instead of encoding
the batch again (``FileWriter.write_batch``): the same records, without the cost of the
codec. So a batch that passes through a job unchanged (a copy, L0 -> L1; a batch of
which every record survives) is written in the frame it was read in.

Only the frames of batches of at least ``KEPT_FROM`` Arrow bytes are kept. An entry goes
when its batch is freed (a weak reference to it), so it holds the payload no longer than
the batch holds its records, and a batch made later at the same address cannot find it.
"""

from __future__ import annotations

import weakref
from typing import Final

import pyarrow as pa

from compactor.fileformat.framing import EncodedFrame

KEPT_FROM: Final = 512 << 10
"""The least a batch whose frame is kept holds in Arrow buffers: half a batch of the
writer's size (``writer.MAX_BATCH_BYTES``). A job gathers lighter batches into bigger
ones, encoded once (``worker.gather``), which costs less than writing each one's frame
(a batch whose kept frame is in its output's codec is not gathered): a frame costs the
writer its checks, stats and index entry on the job's thread, while the encoding it
saves runs on the writer's own thread (a copy of L0 files of about 130 KiB sections at
64 partitions took 10% longer with their frames kept, one of 1 MiB sections at 8
partitions 15% less time and a third less CPU; ``bench/README.md``, "Frames written as
they were read")."""

_kept: dict[int, tuple[weakref.ref[pa.RecordBatch], EncodedFrame]] = {}


def keep_frame(batch: pa.RecordBatch, frame: EncodedFrame) -> None:
    """Leaves ``frame`` as the one ``batch`` was decoded from (if it is heavy enough)."""
    if batch.get_total_buffer_size() < KEPT_FROM:
        return
    key = id(batch)

    def forget(_: object) -> None:
        _kept.pop(key, None)

    _kept[key] = (weakref.ref(batch, forget), frame)


def frame_of(batch: pa.RecordBatch) -> EncodedFrame | None:
    """The frame ``batch`` itself was decoded from, if one was kept."""
    entry = _kept.get(id(batch))
    if entry is None or entry[0]() is not batch:
        return None
    return entry[1]
