"""The frame a decoded batch was read from, for as long as the batch lives.

A reader that decodes a batch frame whole (``SectionReader.batches``) leaves the frame
here, by the batch it gave. A writer handed that very batch (the same object, not an
equal one: a slice, a filter or a concatenation makes another) finds the frame and, where
it would encode the batch alike, writes the frame's payload as it is instead of encoding
the batch again (``FileWriter.write_batch``): the same records, without the cost of the
codec. So a batch that passes through a job unchanged (a copy, L0 -> L1; a batch of
which every record survives) is written in the frame it was read in.

Only frames of at least ``KEPT_FROM`` payload bytes are kept: a writer gathers lighter
batches into bigger ones, which it then encodes anyway. An entry goes when its batch is
freed (a weak reference to it), so it holds the payload no longer than the batch holds
its records, and a batch made later at the same address cannot find it.
"""

from __future__ import annotations

import weakref
from typing import Final

import pyarrow as pa

from compactor.fileformat.framing import EncodedFrame

KEPT_FROM: Final = 64 << 10
"""The least payload a kept frame has: one of hundreds of records or more."""

_kept: dict[int, tuple[weakref.ref[pa.RecordBatch], EncodedFrame]] = {}


def keep_frame(batch: pa.RecordBatch, frame: EncodedFrame) -> None:
    """Leaves ``frame`` as the one ``batch`` was decoded from (if it is heavy enough)."""
    if len(frame.payload) < KEPT_FROM:
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
