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
import resource
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import pyarrow as pa

from compactor.catalog import Catalog, CommitConflict, CommitRecord, LiveFile, Snapshot
from compactor.catalog.catalog import NewFiles
from compactor.catalog.changes import live_run_start, replace_files
from compactor.fileformat import (
    RECORD_SCHEMA,
    FileMeta,
    FileWriter,
    SectionMeta,
    read_footer,
)
from compactor.fileformat.framing import EncodedFrame
from compactor.fileformat.meta import section_key
from compactor.fileformat.offset_index import IndexBuilder, index_key
from compactor.fileformat.second_read import Role
from compactor.fileformat.writer import MAX_BATCH_BYTES, SHARE_BELOW, frame_message
from compactor.objectstore import MultipartWriter, ObjectStore, PreconditionFailed
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.job import OUTPUT_GROUPS, Job
from compactor.planner.retention import why_not_droppable
from compactor.worker.collector import rare_collections
from compactor.worker.errors import InputMismatch, PhaseMismatch
from compactor.worker.gather import (
    GroupRows,
    gathered,
    gathered_tables,
    section_batches,
    weighed,
)
from compactor.worker.group import Group, group_survivors
from compactor.worker.helper_pool import usable_cpus
from compactor.worker.kernel import KeyBuffer
from compactor.worker.memory import use_lean_memory_pool
from compactor.worker.merge import SectionMerge
from compactor.worker.partition import (
    KeyIndex,
    copy_partition,
    counted,
    drop_expired_prefix,
    phase2_windows,
)
from compactor.worker.phase1_process import Phase1Process, store_recipe
from compactor.worker.pipeline import (
    Phase1Feed,
    Phase1Inline,
    Phase1Mode,
    Phase1Thread,
    phase1_mode,
)
from compactor.worker.pointer import Reads, ReadTally, open_pointer
from compactor.worker.policy import Partition
from compactor.worker.stats import (
    CompactionStats,
    FileStats,
    JobProgress,
    JobReport,
    ProgressReporter,
)


class StaleJob(CommitConflict):
    """The job's inputs are no longer a live, contiguous run (another job got there)."""


class _GroupOutput:
    """One output file, opened at its first record."""

    def __init__(
        self, store: ObjectStore, job: Job, group: str, compression: str | None, key: str
    ) -> None:
        self.store, self.job, self.group, self.compression = store, job, group, compression
        self.key = key
        self.upload: MultipartWriter | None = None
        self.writer: FileWriter | None = None
        self.index = IndexBuilder()

    def writes_as_read(self, frame: EncodedFrame) -> bool:
        """Whether a batch read in ``frame`` may be written here in that frame: one in
        this output's codec. Such a batch is not gathered with others (``gathered``),
        which would make it a new batch to encode; the writer makes the whole check
        where it writes it (``FileWriter.reuses``)."""
        message = frame_message(frame, self.key)
        return message is not None and message.codec == self.compression

    def write_partition(
        self, topic: str, partition: int, batches: Iterator[pa.RecordBatch]
    ) -> None:
        writer = None
        for batch in coalesced(batches, self.writes_as_read):
            if writer is None:
                writer = self._writer()
                writer.begin_section(topic, partition)
            writer.write_batch(batch)
        if writer is not None:
            writer.end_section()

    def write_rows(
        self, records: pa.RecordBatch, sections: Sequence[tuple[str, int, int, int]]
    ) -> None:
        """Many partitions, each (topic, partition, first row, rows) of ``records``, in
        order (a group's survivors): their small sections checked and measured at once
        (``FileWriter.write_rows``)."""
        if any(rows for *_, rows in sections):
            self._writer().write_rows(records, sections)

    def _writer(self) -> FileWriter:
        """The file's writer, its upload opened at the first record."""
        if self.writer is None:
            self.upload = self.store.open_multipart(self.key, if_none_match=True)
            self.writer = FileWriter(
                self.upload,
                object_name=self.key,
                compression=self.compression,
                encode_ahead=True,
                index=self.index,
                share_below=SHARE_BELOW,
            )
        return self.writer

    def finish(self, now_ms: int) -> tuple[LiveFile, tuple[SectionMeta, ...]] | None:
        """The output file and its sections, None if no record reached it."""
        if self.writer is None or self.upload is None:
            return None
        meta = self.writer.finish()
        try:
            self.upload.complete()
        except PreconditionFailed:
            # An earlier attempt of this same job completed this output and died before
            # committing: adopt that object (a full compaction of the same inputs), and
            # leave its index to that attempt or to `compactor spark index`.
            meta = self._existing_meta()
        else:
            assert self.writer.footer_crc is not None
            self.store.put(index_key(self.key), self.index.encode(meta, self.writer.footer_crc))
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


COALESCE_BYTES = MAX_BATCH_BYTES
"""Survivor batches are gathered while together they hold fewer Arrow bytes than this
(``_gathered_size``) and written as one: a partition otherwise yields one survivor batch
per input batch, a third or less of it after deduplication, and each costs the writer a
fixed amount (checks, stats, a frame and ~600 bytes of Arrow metadata) and the codec a
context per buffer. Gathered up to the writer's own batch size (Arrow bytes exceed the
weight the writer cuts at, so a gathered batch is never cut again), the output of a full
compaction of L0 files at 64 partitions takes a third less CPU and 3% fewer bytes
(``bench/README.md``, "Survivors written in batches of the writer's size"). The
survivors of an input batch gathered up to 4 MiB (``gather.GATHER_BYTES``) may hold more
than this already: they pass on as they are and the writer cuts them, so its last
batch of them may be short. A partition holds at most this much more while it is
gathered, and a reader of one offset reads a batch of at most this size, as it already
does in any large partition."""

_HEADERS = RECORD_SCHEMA.get_field_index("headers")


def coalesced(
    survivors: Iterable[pa.RecordBatch], as_read: Callable[[EncodedFrame], bool]
) -> Iterator[pa.RecordBatch]:
    """A partition's survivor batches, consecutive ones concatenated while together they
    hold fewer Arrow bytes than COALESCE_BYTES (whatever each one's size); a batch
    passed on as it was read, in a frame kept for it that ``as_read`` accepts, is not
    gathered."""
    return gathered(weighed(survivors, _gathered_size), COALESCE_BYTES, COALESCE_BYTES, as_read)


def _gathered_size(batch: pa.RecordBatch) -> int:
    """A batch's Arrow bytes, cheaply: its buffers' sizes (a slice's whole buffers, which
    at worst gathers less; ``nbytes`` is exact but costs ~25 times more), except that an
    all-empty headers column counts 4 bytes a row. Survivors of a section without headers
    carry a slice of one cached column of empty lists (``filter_batch``), whose whole
    buffer would count 4 KiB each and keep them from ever being gathered."""
    size: int = batch.get_total_buffer_size()
    headers = batch.column(_HEADERS)
    if not len(headers.values):  # no header in the whole column the batch may slice
        size += 4 * batch.num_rows - headers.get_total_buffer_size()
    return size


def check_job(snap: Snapshot, job: Job) -> tuple[LiveFile, ...]:
    """The job's input files as ``snap`` holds them; StaleJob unless they are still a
    live, contiguous run; InputMismatch unless each has the key and size the job names
    (the pointers open the job's keys, the commit retires the catalog's ids: they must
    be the same files)."""
    try:
        start = live_run_start(snap, [i.id for i in job.inputs], unread=job.drop)
    except CommitConflict as conflict:
        raise StaleJob(f"job {job.id}: {conflict}") from None
    files = snap.files[start : start + len(job.inputs)]
    for named, live in zip(job.inputs, files, strict=True):
        if (named.key, named.size) != (live.key, live.size):
            raise InputMismatch(
                f"input {live.id} is {live.key} ({live.size} bytes) in the catalog, "
                f"not {named.key} ({named.size} bytes)",
                job_id=job.id,
            )
    return files


@rare_collections()
def run_job(
    store: ObjectStore,
    catalog: Catalog,
    job: Job,
    buffer: KeyIndex,
    *,
    now_ms: int,
    compression: str | None = "zstd",
    phase1: Phase1Mode | None = None,
    cpus: int | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
    progress_interval_s: float = 0.5,
    read_throttle: ReadThrottle | None = None,
    guard: Callable[[], None] = lambda: None,
    snapshot: Snapshot | None = None,
) -> JobReport:
    """Runs ``job`` and commits its outputs. ``phase1``: where phase 1 runs, "inline" (on
    the job's thread), "thread" or "process" (a window ahead of phase 2, on a thread or
    in a process of its own); None picks (``worker.pipeline.phase1_mode``), a process
    only if the job may keep ``cpus`` >= 2 busy (default: the CPUs this process may run
    on; a Spark task passes its share).
    ``on_progress`` hears how far phase 2 has got, at most every ``progress_interval_s``.
    ``read_throttle`` paces every GET stream's reads. ``guard`` is called after every
    output batch and before the uploads complete: whatever it raises stops the job as any
    failure does (a queue worker whose heartbeat failed no longer owns the job).
    ``snapshot``: the newest state, where the caller has just committed it (the job's
    lease), so that the job does not read the catalog again; else it is read.

    Steps: check the inputs (StaleJob unless they are a live, contiguous run), open the
    pointers, run the partitions, finish the outputs, commit, report. Invariants: each
    input is read through exactly two GET streams (one per pointer), each front to back;
    nothing reaches the catalog before every output is complete; a failure or interrupt
    before the commit (FormatError, StoreError, WorkerError, KeyboardInterrupt...) aborts
    every upload and leaves the catalog and the inputs as they were; a commit that loses
    to another worker is reported (``committed`` false), not raised.
    """
    started = time.monotonic()
    snap = catalog.snapshot() if snapshot is None else snapshot
    inputs = check_job(snap, job)
    run = RunSettings(snap.version, now_ms, buffer.capacity_bytes, compression)
    if job.drop:
        guard()
        return _drop(store, catalog, job, inputs, run, started, guard)
    written = write_outputs(
        store,
        snap,
        job,
        buffer,
        now_ms=now_ms,
        compression=compression,
        phase1=phase1,
        cpus=cpus,
        on_progress=on_progress,
        progress_interval_s=progress_interval_s,
        read_throttle=read_throttle,
        guard=guard,
    )
    committed, note = _commit(store, catalog, job, written.new_files, written.stats, run, guard)
    produced = written.produced
    return JobReport(
        job_id=job.id,
        rule=job.rule,
        output_level=job.output_level,
        outputs=[f.key for f in produced],
        bytes_in=job.input_bytes,
        bytes_out=sum(f.size for f in produced),
        duration_s=time.monotonic() - started,
        stats=written.stats,
        inputs=written.inputs,
        committed=committed,
        note=note,
        phase1=written.phase1,
        peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        phase1_peak_rss_kib=written.phase1_peak_rss_kib,
    )


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What, besides the job document and its inputs, decides a job's output bytes;
    recorded in the commit (``run``) so ``compactor replay --verify`` can run it again
    exactly: the catalog version the job read, the time rules' clock, the key buffer's
    size (it sets the windows, hence the batch frames) and the compression."""

    snapshot_version: int
    now_ms: int
    key_buffer_bytes: int
    compression: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "snapshot_version": self.snapshot_version,
            "now_ms": self.now_ms,
            "key_buffer_bytes": self.key_buffer_bytes,
            "compression": self.compression,
        }


@dataclass(frozen=True, slots=True)
class WrittenOutputs:
    """A job's outputs, complete in the store and not yet in the catalog."""

    new_files: NewFiles
    stats: CompactionStats
    inputs: list[FileStats]
    """Per input: its GETs during the job and its streams' resumes."""
    phase1: Phase1Mode
    phase1_peak_rss_kib: int
    """The peak RSS of phase 1's process (0 unless it had one)."""

    @property
    def produced(self) -> list[LiveFile]:
        return [live for live, _ in self.new_files.values()]


def write_outputs(
    store: ObjectStore,
    snap: Snapshot,
    job: Job,
    buffer: KeyIndex,
    *,
    now_ms: int,
    compression: str | None = "zstd",
    phase1: Phase1Mode | None = None,
    cpus: int | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
    progress_interval_s: float = 0.5,
    read_throttle: ReadThrottle | None = None,
    guard: Callable[[], None] = lambda: None,
    output_key: Callable[[str], str] | None = None,
) -> WrittenOutputs:
    """Everything of ``run_job`` but the commit: reads the job's inputs as ``snap`` holds
    them (two GET streams each) and completes its output files, at ``output_key(group)``
    (default ``job.output_key``; ``replay --verify`` writes to a scratch prefix). On any
    failure the uploads are aborted and nothing is left behind."""
    inputs = check_job(snap, job)
    use_lean_memory_pool()
    recipe = store_recipe(store, buffer, read_throttle)
    if phase1 is None:
        cpus = usable_cpus() if cpus is None else cpus
        phase1 = phase1_mode(inputs, may_fork=recipe is not None, cpus=cpus)
    if phase1 == "process" and recipe is None:
        raise ValueError(
            "phase 1 cannot run in a process of its own with this store, key buffer or "
            "read throttle (it needs ObjectStore.portable, a KeyBuffer and no throttle "
            "with a rate)"
        )
    with ReadTally(store, job.inputs) as tally:
        stats = CompactionStats()
        total = sum(f.record_count for f in inputs)
        progress = ProgressReporter(
            job.id, job.rule, total, stats, on_progress, progress_interval_s, guard
        )
        key_of = output_key or job.output_key
        outputs = {g: _GroupOutput(store, job, g, compression, key_of(g)) for g in OUTPUT_GROUPS}
        with _aborted_on_failure(outputs):
            with ExitStack() as stack:
                feed = _phase1(
                    stack, store, recipe, snap, job, buffer, now_ms, phase1, read_throttle, tally
                )
                with feed:
                    role: Role = None if phase1 == "process" else "second"
                    phase2 = open_pointer(
                        stack, store, job.inputs, read_throttle, role, tally.streams, "elsewhere"
                    )
                    _run_partitions(job, feed, phase2, outputs, stats, progress)
            stats.frames_reused = sum(o.writer.frames_reused for o in outputs.values() if o.writer)
            guard()  # the last moment an upload can still be aborted
            new_files = _finish_outputs(outputs, now_ms)
        elsewhere = feed.reads if isinstance(feed, Phase1Process) else None
        files = _input_stats(job, tally.reads(), elsewhere)
    rss = elsewhere.peak_rss_kib if elsewhere is not None else 0
    return WrittenOutputs(new_files, stats, files, phase1, rss)


def _phase1(
    stack: ExitStack,
    store: ObjectStore,
    recipe: Callable[[], ObjectStore] | None,
    snap: Snapshot,
    job: Job,
    buffer: KeyIndex,
    now_ms: int,
    mode: Phase1Mode,
    throttle: ReadThrottle | None,
    tally: ReadTally,
) -> Phase1Feed:
    """Phase 1, to run as ``mode`` says. Its pointer's GET streams (one per input file)
    are opened here, or by its process (made from ``recipe``)."""
    if mode == "process":
        assert recipe is not None and isinstance(buffer, KeyBuffer)
        return Phase1Process(snap, job, recipe, buffer, now_ms, throttle)
    pointer = open_pointer(stack, store, job.inputs, throttle, "first", tally.streams, "all")
    return (Phase1Thread if mode == "thread" else Phase1Inline)(snap, job, pointer, buffer, now_ms)


def _drop(
    store: ObjectStore,
    catalog: Catalog,
    job: Job,
    inputs: tuple[LiveFile, ...],
    run: RunSettings,
    started: float,
    guard: Callable[[], None],
) -> JobReport:
    """A drop job: its inputs leave the catalog unread (no GET, no output), if every
    record in them is past retention.ms (checked again at the commit)."""
    stats = CompactionStats(
        records_in=sum(f.record_count for f in inputs),
        dropped_retention=sum(f.record_count for f in inputs),
        tombstones_removed=sum(f.tombstones for f in inputs),
        partitions=sum(f.section_count for f in inputs),
    )
    committed, note = _commit(store, catalog, job, {}, stats, run, guard)
    return JobReport(
        job_id=job.id,
        rule=job.rule,
        output_level=0,
        outputs=[],
        bytes_in=job.input_bytes,
        bytes_out=0,
        duration_s=time.monotonic() - started,
        stats=stats,
        inputs=[FileStats(i.key, i.size) for i in job.inputs],
        committed=committed,
        note=note,
    )


def _run_partitions(
    job: Job,
    phase1: Phase1Feed,
    phase2: SectionMerge,
    outputs: dict[str, _GroupOutput],
    stats: CompactionStats,
    progress: ProgressReporter,
) -> None:
    """Phase 2 and the writes, partition by partition (or group by group), as phase 1
    hands them over. PhaseMismatch, naming the job and the partition, where the two
    pointers disagree."""
    while (unit := phase1.next_unit()) is not None:
        if isinstance(unit, Group):
            _run_group(job, unit, phase2, outputs, stats, progress)
            del unit  # its keep-set goes before its slot does (MAX_KEEP_SETS)
            phase1.release_group()
            continue
        _check_phase2_at(job, phase2, unit)
        try:
            _run_partition(unit, phase1, phase2, outputs[unit.group], stats, progress)
        except PhaseMismatch as mismatch:
            mismatch.locate(job.id, unit.topic, unit.partition)
            raise
    if (at := phase2.next_partition()) is not None:
        raise PhaseMismatch(
            f"phase 2's pointer has sections phase 1's did not, from {at[0]}/{at[1]}",
            job_id=job.id,
        )


def _check_phase2_at(job: Job, phase2: SectionMerge, part: Partition) -> None:
    """PhaseMismatch unless the phase-2 pointer is at ``part`` too."""
    at = phase2.next_partition()
    if at != (part.topic, part.partition):
        where = "has no more sections" if at is None else f"is at {at[0]}/{at[1]}"
        raise PhaseMismatch(
            f"phase 2's pointer {where}",
            job_id=job.id,
            topic=part.topic,
            partition=part.partition,
        )


def _run_partition(
    part: Partition,
    phase1: Phase1Feed,
    phase2: SectionMerge,
    output: _GroupOutput,
    stats: CompactionStats,
    progress: ProgressReporter,
) -> None:
    """One partition: its survivors (or, without deduplication, all its records) from the
    phase-2 pointer's sections, written to the partition's output group."""
    sections2 = phase2.take(part.topic, part.partition)
    batches = gathered_tables(section_batches(sections2), as_read=output.writes_as_read)
    if part.policy.deduplicate:
        survivors = phase2_windows(batches, phase1.windows(), part.policy, stats)
    else:
        survivors = copy_partition(batches, stats)
    _write_survivors(part, survivors, output, stats, progress)


def _run_group(
    job: Job,
    group: Group,
    phase2: SectionMerge,
    outputs: dict[str, _GroupOutput],
    stats: CompactionStats,
    progress: ProgressReporter,
) -> None:
    """A group of small partitions in one window (``worker.group``): their records off the
    phase-2 pointer as a table of its pieces (PhaseMismatch unless it holds the same
    partitions, each with as many records as phase 1 saw), the survivors taken into one
    batch (``group_survivors``), each partition's survivors written."""
    first, last = group.parts[0], group.parts[-1]
    _check_phase2_at(job, phase2, first)
    rows = GroupRows()
    try:
        phase2.take_upto(section_key(last.topic, last.partition), rows, group.keys)
    except PhaseMismatch as mismatch:
        mismatch.locate(job.id, first.topic, first.partition)
        raise
    records, labels, counts = rows.table(len(group.parts))
    for part, seen, count in zip(group.parts, counts, group.counts, strict=True):
        if seen != count:
            raise PhaseMismatch(
                f"phase 2's pointer holds {seen} records, phase 1's held {count}",
                job_id=job.id,
                topic=part.topic,
                partition=part.partition,
            )
    survivors, kept = group_survivors(records, labels, group, stats)
    written: dict[str, list[tuple[str, int, int, int]]] = {}
    for part, at, reaching in _reaching_rows(group.parts, kept, survivors, stats):
        written.setdefault(part.group, []).append((part.topic, part.partition, at, reaching))
    for name, sections in written.items():
        outputs[name].write_rows(survivors, sections)
    progress.poll()


def _reaching_rows(
    parts: Sequence[Partition],
    kept: Sequence[int],
    survivors: pa.RecordBatch,
    stats: CompactionStats,
) -> list[tuple[Partition, int, int]]:
    """``_reaching_output`` for partitions whose survivors are ``survivors``, ``kept[i]``
    rows of ``parts[i]`` after another: each partition's rows that reach the output, as
    (partition, first row, rows). Counted for all rows at once, then, for a partition
    that retention.ms trims, its rows' count taken back and its trimmed rows counted."""
    values = survivors.column("value")
    stats.records_out += survivors.num_rows
    stats.tombstones_kept += values.null_count
    out, start = [], 0
    for part, count in zip(parts, kept, strict=True):
        at, rows = start, count
        if part.policy.retention_cutoff_ms is None:
            stats.partitions += 1
        else:
            stats.records_out -= count
            stats.tombstones_kept -= values.slice(start, count).null_count
            batch = survivors.slice(start, count)
            rows = sum(b.num_rows for b in _reaching_output(part, iter((batch,)), stats))
            at = start + count - rows
        out.append((part, at, rows))
        start += count
    return out


def _write_survivors(
    part: Partition,
    survivors: Iterator[pa.RecordBatch],
    output: _GroupOutput,
    stats: CompactionStats,
    progress: ProgressReporter,
) -> None:
    """A partition's survivors, less what retention.ms removes from its start, written to
    its output group."""
    survivors = _reaching_output(part, survivors, stats)
    output.write_partition(part.topic, part.partition, _polled(survivors, progress))
    progress.poll()


def _reaching_output(
    part: Partition, survivors: Iterator[pa.RecordBatch], stats: CompactionStats
) -> Iterator[pa.RecordBatch]:
    """A partition's survivors less what retention.ms removes from its start, counted."""
    stats.partitions += 1
    if part.policy.retention_cutoff_ms is not None:
        survivors = drop_expired_prefix(survivors, part.policy.retention_cutoff_ms, stats)
    return counted(survivors, stats)


@contextlib.contextmanager
def _aborted_on_failure(outputs: dict[str, _GroupOutput]) -> Iterator[None]:
    """Whatever ends the block early (an error, KeyboardInterrupt, SIGTERM) aborts every
    output's multipart upload first; the job's own error is the one raised."""
    try:
        yield
    except BaseException:
        for o in outputs.values():
            with contextlib.suppress(Exception):
                o.abort()
        raise


def _finish_outputs(outputs: dict[str, _GroupOutput], now_ms: int) -> NewFiles:
    """Completes each output group's upload; the files the commit will make live, with
    their sections (for their manifests)."""
    finished = [f for f in (o.finish(now_ms) for o in outputs.values()) if f is not None]
    return {live.id: (live, sections) for live, sections in finished}


def _input_stats(job: Job, mine: Reads, elsewhere: Reads | None) -> list[FileStats]:
    """Per input file: its GET requests during the job and its streams' resumes, this
    process's (``mine``) and the phase-1 process's (``elsewhere``) together."""
    other = elsewhere or Reads({}, {})
    return [
        FileStats(
            i.key,
            i.size,
            mine.gets[i.key] + other.gets.get(i.key, 0),
            mine.resumes[i.key] + other.resumes.get(i.key, 0),
        )
        for i in job.inputs
    ]


def _polled(
    batches: Iterator[pa.RecordBatch], progress: ProgressReporter
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch
        progress.poll()


def _commit(
    store: ObjectStore,
    catalog: Catalog,
    job: Job,
    new_files: NewFiles,
    stats: CompactionStats,
    run: RunSettings,
    guard: Callable[[], None] = lambda: None,
) -> tuple[bool, str]:
    """Swap inputs for outputs (``guard`` is called again inside the change: a worker that
    lost the job meanwhile commits nothing). If another worker won (the inputs are gone),
    our outputs are removed unless they are the very objects that worker committed (same
    job)."""
    input_ids = [i.id for i in job.inputs]
    produced = [f for f, _ in new_files.values()]
    record = CommitRecord(
        "compaction",
        {
            "job": job.to_json(),
            "inputs": input_ids,
            "outputs": [f.key for f in produced],
            "report": stats.to_json(),
            "run": run.to_json(),
        },
    )
    now_ms = run.now_ms
    wall_ms = catalog.clock()

    def change(s: Snapshot) -> Snapshot:
        guard()
        if job.drop and (why := why_not_droppable(s, now_ms, input_ids)) is not None:
            raise CommitConflict(f"job {job.id} drops files no longer past retention: {why}")
        return replace_files(
            s,
            input_ids,
            produced,
            now_ms,
            full=job.is_full,
            job_id=job.id,
            wall_ms=wall_ms,
            unread=job.drop,
        )

    try:
        catalog.commit(change, record, new_files=new_files)
        return True, ""
    except CommitConflict as conflict:
        live_keys = {f.key for f in catalog.snapshot().files}
        for f in produced:
            if f.key not in live_keys:
                store.delete(f.key)
                store.delete(index_key(f.key))
        return False, f"not committed: {conflict}"
