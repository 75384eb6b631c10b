"""A job's pointers: one GET stream per input file, the inputs' sections merged.

A job reads each input through exactly two GET streams, one per pointer (phase 1's and
phase 2's). Both are opened here, by the job's process, or phase 1's by the process
phase 1 runs in (``worker.phase1_process``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from compactor.fileformat import StreamReader
from compactor.fileformat.reader import FileChecks
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
    file_checks: FileChecks,
) -> SectionMerge:
    """One GET stream per input file (closed with ``stack``, appended to ``streams``),
    paced by ``throttle`` if any, merged into one pointer. ``role``: the pointer's part in
    the pair reading the same bytes in this process (``fileformat.second_read``), None
    when the other pointer is in another process. ``file_checks``: phase 1's pointer
    makes the checks that need only an input's bytes ("all"), once for the job, and phase
    2's leaves them to it ("elsewhere"): both read the same immutable objects, and the
    job ends, and commits, only once phase 1's pointer has streamed every input to its
    end (``reader.FileChecks``)."""
    buffer_size = stream_buffer_size(len(inputs))
    readers = []
    for inp in inputs:
        stream = stack.enter_context(store.open_stream(inp.key, buffer_size=buffer_size))
        streams.append(stream)
        source = stream if throttle is None else ThrottledStream(stream, throttle)
        readers.append(
            StreamReader(
                source,
                object_name=inp.key,
                size=inp.size,
                keep_footer=False,
                role=role,
                file_checks=file_checks,
            )
        )
    return SectionMerge(readers)


@dataclass(frozen=True, slots=True)
class Reads:
    """A job's reads of its inputs in one process, per input key: GET requests and the
    streams' resumes; and, from phase 1's process, its peak RSS so far (KiB), for the
    job's memory report."""

    gets: dict[str, int]
    resumes: dict[str, int]
    peak_rss_kib: int = 0


class ReadTally:
    """Counts a job's reads of its inputs in this process from its making on: the store's
    GET requests per input, and the resumes of the streams ``open_pointer`` opened into
    ``streams``. A context manager: its inputs are watched in the store's GET counter
    (``GetCounter.watch``) from its making to its exit."""

    def __init__(self, store: ObjectStore, inputs: Sequence[JobInput]) -> None:
        self._store = store
        self._keys = [i.key for i in inputs]
        store.gets.watch(self._keys)
        self._before = {key: store.gets.get(key) for key in self._keys}
        self.streams: list[ObjectStream] = []

    def __enter__(self) -> ReadTally:
        return self

    def __exit__(self, *exc: object) -> None:
        self._store.gets.unwatch(self._keys)

    def reads(self, peak_rss_kib: int = 0) -> Reads:
        resumes = dict.fromkeys(self._before, 0)
        for stream in self.streams:
            resumes[stream.key] += stream.resumes
        gets = {key: self._store.gets.get(key) - n for key, n in self._before.items()}
        return Reads(gets, resumes, peak_rss_kib)
