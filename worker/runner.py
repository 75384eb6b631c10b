"""Runs one job against a store: two GET streams per input file, one output file per
group written through a multipart upload, then the catalog commit.

Failure anywhere before the commit aborts the uploads and leaves the catalog and the
inputs as they were. Output keys derive from the job, and are written with
If-None-Match, so a retried job never leaves two copies; the commit replaces the inputs
only if they are still live and contiguous, so two workers racing on one job have
exactly one winner.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pyarrow as pa

from compactor.catalog import (
    Catalog,
    CatalogError,
    CommitConflict,
    CommitRecord,
    LiveFile,
    Snapshot,
)
from compactor.catalog.catalog import NewFiles
from compactor.catalog.changes import live_run_start, replace_files
from compactor.fileformat import (
    FileMeta,
    FileWriter,
    SectionMeta,
    SectionReader,
    StreamReader,
    read_footer,
)
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.objectstore import MultipartWriter, ObjectStore, ObjectStream, PreconditionFailed
from compactor.planner.job import OUTPUT_GROUPS, Job
from compactor.worker.memory import use_lean_memory_pool
from compactor.worker.merge import SectionMerge
from compactor.worker.partition import KeyIndex, copy_partition, phase2_windows
from compactor.worker.pipeline import Phase1Inline, Phase1Thread, pipelined
from compactor.worker.stats import (
    CompactionStats,
    FileStats,
    JobProgress,
    JobReport,
    ProgressReporter,
)

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


class StaleJob(CommitConflict):
    """The job's inputs are no longer a live, contiguous run (another job got there)."""


class _GroupOutput:
    """One output file, opened at its first record."""

    def __init__(self, store: ObjectStore, job: Job, group: str, compression: str | None):
        self.store, self.job, self.group, self.compression = store, job, group, compression
        self.key = job.output_key(group)
        self.upload: MultipartWriter | None = None
        self.writer: FileWriter | None = None

    def write_partition(
        self, topic: str, partition: int, batches: Iterator[pa.RecordBatch]
    ) -> None:
        started = False
        for batch in _coalesced(batches):
            if self.writer is None:
                self.upload = self.store.open_multipart(self.key, if_none_match=True)
                self.writer = FileWriter(
                    self.upload,
                    object_name=self.key,
                    compression=self.compression,
                    encode_ahead=True,
                )
            if not started:
                self.writer.begin_section(topic, partition)
                started = True
            self.writer.write_batch(batch)
        if started:
            assert self.writer is not None
            self.writer.end_section()

    def finish(self, now_ms: int) -> tuple[LiveFile, tuple[SectionMeta, ...]] | None:
        """The output file and its sections, None if no record reached it."""
        if self.writer is None or self.upload is None:
            return None
        meta = self.writer.finish()
        try:
            self.upload.complete()
        except PreconditionFailed:
            # An earlier attempt of this same job completed this output and died before
            # committing: adopt that object (a full compaction of the same inputs).
            meta = self._existing_meta()
        live = LiveFile.of_sections(
            self.job.output_file_id(self.group),
            self.key,
            self.job.output_level,
            meta.size,
            now_ms,
            meta.sections,
        )
        return live, meta.sections

    def _existing_meta(self) -> FileMeta:
        size = self.store.head(self.key).size
        return read_footer(
            functools.partial(self.store.get_range, self.key), size, object_name=self.key
        )

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.upload is not None:
            self.upload.abort()


COALESCE_BYTES = MIN_COMPRESS_BYTES
"""Survivor batches are gathered while together they hold fewer Arrow bytes than this (their
buffers' sizes, which a slice overstates: cheap, and at worst gathers less), and
written as one: a partition of small sections otherwise yields one small batch per input
section, and each costs the writer a fixed amount (checks, stats, encoding, a frame). The
bound keeps a gathered batch below the writer's compression threshold (Arrow bytes exceed
logical bytes), so the output is encoded as it would have been, only in fewer frames."""


def _coalesced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The non-empty ``batches``: the same records in the same order, small neighbours
    concatenated."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        nbytes = batch.get_total_buffer_size()  # of whole buffers: a slice counts more
        if pending and size + nbytes >= COALESCE_BYTES:
            yield _concat(pending)
            pending, size = [], 0
        if nbytes >= COALESCE_BYTES:
            yield batch
        else:
            pending.append(batch)
            size += nbytes
    if pending:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def check_job(snap: Snapshot, job: Job) -> tuple[LiveFile, ...]:
    """The job's input files as ``snap`` holds them; StaleJob unless they are still a
    live, contiguous run."""
    try:
        start = live_run_start(snap, [i.id for i in job.inputs])
    except CommitConflict as conflict:
        raise StaleJob(f"job {job.id}: {conflict}") from None
    return snap.files[start : start + len(job.inputs)]


def run_job(
    store: ObjectStore,
    catalog: Catalog,
    job: Job,
    buffer: KeyIndex,
    *,
    now_ms: int,
    compression: str | None = "zstd",
    phase1_thread: bool | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
    progress_interval_s: float = 0.5,
) -> JobReport:
    """Runs ``job`` and commits its outputs. ``phase1_thread``: run phase 1 on a thread of
    its own, a window ahead of phase 2 (None: when the job's sections are big enough to
    gain from it, ``worker.pipeline.pipelined``). ``on_progress`` hears how far phase 2
    has got, at most every ``progress_interval_s``."""
    started = time.monotonic()
    use_lean_memory_pool()
    snap = catalog.snapshot()
    inputs = check_job(snap, job)
    gets_before = {i.key: store.gets.get(i.key) for i in job.inputs}
    stats = CompactionStats()
    total = sum(f.record_count for f in inputs)
    progress = ProgressReporter(job.id, job.rule, total, stats, on_progress, progress_interval_s)
    outputs = {g: _GroupOutput(store, job, g, compression) for g in OUTPUT_GROUPS}
    try:
        with ExitStack() as stack:
            streams: list[ObjectStream] = []
            pointers = []
            buffer_size = stream_buffer_size(len(job.inputs))
            for _phase in (1, 2):
                readers = []
                for inp in job.inputs:
                    stream = stack.enter_context(
                        store.open_stream(inp.key, buffer_size=buffer_size)
                    )
                    streams.append(stream)
                    readers.append(StreamReader(stream, object_name=inp.key, size=inp.size))
                pointers.append(SectionMerge(readers))
            if phase1_thread is None:
                phase1_thread = pipelined(inputs)
            ahead = Phase1Thread if phase1_thread else Phase1Inline
            with ahead(snap, job, pointers[0], buffer, now_ms) as phase1:
                _compact(job, phase1, pointers[1], outputs, stats, progress)
            resumes = {i.key: 0 for i in job.inputs}
            for stream in streams:
                resumes[stream.key] += stream.resumes
        finished = [f for f in (o.finish(now_ms) for o in outputs.values()) if f is not None]
        new_files: NewFiles = {live.id: (live, sections) for live, sections in finished}
        produced = [live for live, _ in finished]
    except BaseException:
        for o in outputs.values():
            with contextlib.suppress(Exception):  # the job's own error is the one to raise
                o.abort()
        raise
    files = [
        FileStats(i.key, i.size, store.gets.get(i.key) - gets_before[i.key], resumes[i.key])
        for i in job.inputs
    ]
    committed, note = _commit(store, catalog, job, new_files, stats, now_ms)
    return JobReport(
        job_id=job.id,
        rule=job.rule,
        output_level=job.output_level,
        outputs=[f.key for f in produced],
        bytes_in=job.input_bytes,
        bytes_out=sum(f.size for f in produced),
        duration_s=time.monotonic() - started,
        stats=stats,
        inputs=files,
        committed=committed,
        note=note,
        phase1_thread=bool(phase1_thread),
    )


def _compact(
    job: Job,
    phase1: Phase1Inline | Phase1Thread,
    phase2: SectionMerge,
    outputs: dict[str, _GroupOutput],
    stats: CompactionStats,
    progress: ProgressReporter,
) -> None:
    """Phase 2 and the writes, partition by partition, as phase 1 hands them over."""
    while (part := phase1.next_partition()) is not None:
        tp = part.topic, part.partition
        if phase2.next_partition() != tp:
            raise CatalogError(f"job {job.id}: phase pointers disagree at {tp[0]}/{tp[1]}")
        stats.partitions += 1
        sections2 = phase2.take(*tp)
        if part.policy.deduplicate:
            survivors = phase2_windows(_batches(sections2), phase1.windows(), part.policy, stats)
        else:
            survivors = copy_partition(_batches(sections2), stats)
        outputs[part.group].write_partition(tp[0], tp[1], _polled(survivors, progress))
        progress.poll()
    if phase2.next_partition() is not None:
        raise CatalogError(f"job {job.id}: phase-2 pointer has sections phase 1 did not")


def _polled(
    batches: Iterator[pa.RecordBatch], progress: ProgressReporter
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch
        progress.poll()


def _batches(sections: Iterator[SectionReader]) -> Iterator[pa.RecordBatch]:
    for section in sections:
        yield from section.batches()


def _commit(
    store: ObjectStore,
    catalog: Catalog,
    job: Job,
    new_files: NewFiles,
    stats: CompactionStats,
    now_ms: int,
) -> tuple[bool, str]:
    """Swap inputs for outputs. If another worker won (the inputs are gone), our outputs
    are removed unless they are the very objects that worker committed (same job)."""
    input_ids = [i.id for i in job.inputs]
    produced = [f for f, _ in new_files.values()]
    record = CommitRecord(
        "compaction",
        {
            "job": job.to_json(),
            "inputs": input_ids,
            "outputs": [f.key for f in produced],
            "report": stats.to_json(),
        },
    )
    try:
        catalog.commit(
            functools.partial(
                replace_files,
                input_ids=input_ids,
                outputs=produced,
                now_ms=now_ms,
                full=job.is_full,
                job_id=job.id,
                wall_ms=catalog.clock(),
            ),
            record,
            new_files=new_files,
        )
        return True, ""
    except CommitConflict as conflict:
        live_keys = {f.key for f in catalog.snapshot().files}
        for f in produced:
            if f.key not in live_keys:
                store.delete(f.key)
        return False, f"not committed: {conflict}"
