"""A partition copied without deduplication (L0 -> L1, topics that are not compacted), its
frames kept where nothing in them changes.

Every record goes through, so a batch frame of an input holds exactly the records its
copy holds. Each batch heavy enough to be framed on its own (``REUSE_FROM``) goes to the
writer with its frame as read; the writer writes that frame as it is where it would
encode the batch alike: one frame, the same codec (``FileWriter.write_batch``). The batch
is still decoded, checked against its section's trailer and measured, so a reused frame
is one the job has read as any other; only the encoding, the most costly step of a copy,
is skipped. Lighter batches are gathered and encoded again, as survivors are
(``gather.coalesced``), so small frames do not pass from level to level.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from compactor.fileformat import SectionReader
from compactor.fileformat.framing import EncodedFrame
from compactor.worker.gather import coalesced, weight
from compactor.worker.stats import CompactionStats

REUSE_FROM = 64 << 10
"""A batch of at least this weight (``gather.weight``) keeps its frame. Lighter batches
are gathered up to the writer's batch size instead, which a copy of small sections needs
(one frame per input section otherwise) and a batch of this size does not (an lz4 frame's
window is 64 KiB: a bigger batch compresses no better)."""

Framed = tuple[pa.RecordBatch, EncodedFrame | None]
"""A batch to write, and its frame as read where the writer may reuse it."""


def copied_frames(sections: Iterable[SectionReader], stats: CompactionStats) -> Iterator[Framed]:
    """A partition's records off the phase-2 pointer's ``sections``, all of them, in order:
    each batch of at least ``REUSE_FROM`` with its frame, the others gathered without one.
    Counts what goes in and what reaches the output (every record)."""
    light: list[pa.RecordBatch] = []
    for section in sections:
        for batch, frame in section.frames():
            _count(batch, stats)
            if frame is not None and weight(batch) >= REUSE_FROM:
                yield from _unframed(light)
                light = []
                yield batch, frame
            else:
                light.append(batch)
    yield from _unframed(light)


def unframed(batches: Iterable[pa.RecordBatch]) -> Iterator[Framed]:
    """Batches to be encoded by the writer."""
    return ((batch, None) for batch in batches)


def _unframed(light: list[pa.RecordBatch]) -> Iterator[Framed]:
    return unframed(coalesced(light))


def _count(batch: pa.RecordBatch, stats: CompactionStats) -> None:
    n = batch.num_rows
    stats.records_in += n
    stats.records_out += n
    stats.null_keys += batch.column("key").null_count
    stats.tombstones_kept += batch.column("value").null_count
