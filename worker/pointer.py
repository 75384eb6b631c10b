"""A job's pointers: one GET stream per input file, the inputs' sections merged.

A job reads each input through exactly two GET streams, one per pointer (phase 1's and
phase 2's). Both are opened here, by the job's process, or phase 1's by the process
phase 1 runs in (``worker.phase1_process``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

from compactor.fileformat import StreamReader
from compactor.fileformat.second_read import Role
from compactor.objectstore import ObjectStore, ObjectStream
from compactor.objectstore.throttle import ReadThrottle, ThrottledStream
from compactor.planner.job import JobInput
from compactor.worker.merge import SectionMerge

READ_MEMORY_BUDGET = 32 << 20
"""What a job's open GET streams may buffer in all (read buffers, body chunks): the job
holds two streams per input file for its whole length, so a fixed per-stream buffer
would make memory grow with the number of inputs."""
MIN_STREAM_BUFFER = 32 << 10
"""No stream buffers less: frame headers and small sections' frames still come several to
a read (only jobs of more than 512 inputs reach this floor)."""
MAX_STREAM_BUFFER = 1 << 20
"""No stream buffers more: a batch frame is read straight into its payload anyway."""


def stream_buffer_size(inputs: int, budget: int = READ_MEMORY_BUDGET) -> int:
    """Each GET stream's buffer for a job of ``inputs`` files (two streams per file): the
    budget shared out, within [MIN_STREAM_BUFFER, MAX_STREAM_BUFFER], in 4 KiB pages."""
    share = budget // max(1, 2 * inputs)
    return max(MIN_STREAM_BUFFER, min(MAX_STREAM_BUFFER, share)) & ~0xFFF


def open_pointer(
    stack: ExitStack,
    store: ObjectStore,
    inputs: Sequence[JobInput],
    throttle: ReadThrottle | None,
    role: Role,
    streams: list[ObjectStream],
) -> SectionMerge:
    """One GET stream per input file (closed with ``stack``, appended to ``streams``),
    paced by ``throttle`` if any, merged into one pointer. ``role``: the pointer's part in
    the pair reading the same bytes in this process (``fileformat.second_read``), None
    when the other pointer is in another process."""
    buffer_size = stream_buffer_size(len(inputs))
    readers = []
    for inp in inputs:
        stream = stack.enter_context(store.open_stream(inp.key, buffer_size=buffer_size))
        streams.append(stream)
        source = stream if throttle is None else ThrottledStream(stream, throttle)
        readers.append(
            StreamReader(source, object_name=inp.key, size=inp.size, keep_footer=False, role=role)
        )
    return SectionMerge(readers)
