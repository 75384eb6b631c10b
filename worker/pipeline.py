"""Runs phase 1 one window ahead of phase 2: on the job's thread, a thread of its own,
or (``worker.phase1_process``) a process of its own.

Phase 1 (decode the key columns, hash the keys into the key buffer) and phase 2 (decode
whole batches, keep the survivors, encode the output) each leave the other core mostly
idle: the kernel releases the GIL while hashing and Arrow while decoding and
compressing. So a :class:`Phase1Thread` walks the phase-1 pointer partition by partition
and hands each closed window (its keep-set taken out of the key buffer, see
``worker.partition.phase1_windows``), or each closed window of a run of small partitions
(``worker.group.Group``), to the job's thread, which walks the phase-2 pointer and
writes. Each pointer stays on one thread, read in order: still exactly two GET
streams per input file. Jobs of small sections, where both phases are bound by Python
rather than by hashing or Arrow, gain nothing from a second thread (it only contends for
the GIL): they run phase 1 inline (:class:`Phase1Inline`, see ``pipelined``), unless it
can have a process of its own (``phase1_mode``). Whichever way it runs, the job's thread
sees a :class:`Phase1Feed` and phase 1 is a :class:`Phase1Walk`.

Bounds: at most ``MAX_KEEP_SETS`` windows' keep-sets exist at a time (the one phase 2 is
filtering and the next), so phase 1 waits before taking out a third; and at most
``MAX_ITEMS`` items (partition starts, windows, partition ends, groups) are queued.

Failure: anything phase 1 raises (a corrupt file's FormatError, a store error, a
WorkerError) is handed over in order and raised on the job's thread when phase 2 gets
there. Whatever ends the job's thread early (an exception, KeyboardInterrupt) stops phase
1 at its next batch or wait before the streams are closed; the thread is a daemon, so a
process exiting never waits for it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from compactor.catalog import LiveFile, Snapshot
from compactor.catalog.snapshot import InputEnds
from compactor.planner.job import Job
from compactor.worker.errors import WorkerError
from compactor.worker.gather import GroupRows, Weighed, gathered, section_batches
from compactor.worker.group import (
    GROUP_BYTES,
    Group,
    by_partition,
    group_weight,
    group_window,
    may_group,
    same_window,
)
from compactor.worker.helper_pool import process_pays
from compactor.worker.merge import Key, SectionMerge
from compactor.worker.partition import KeyIndex, Window, phase1_fields, phase1_windows
from compactor.worker.policy import Partition, PartitionPolicy

MAX_KEEP_SETS = 2
MAX_ITEMS = 16
_POLL_S = 0.05
"""How often a wait looks whether the other side has stopped."""


class _End:
    """The end of a partition's windows."""


class _Done:
    """The phase-1 pointer has no more sections."""


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


class _Stopped(Exception):
    """The job's thread asked phase 1 to stop."""


_Item = Partition | Window | _End | Group | _Done | _Failed
_END, _DONE = _End(), _Done()


HASH_THREADS = 1
"""Threads the key buffer hashes on while phase 1 has a thread of its own. Phase 2 and
the writer's encoder keep the other core busy, so a second hashing thread mostly adds
hand-over costs (measured: bench/README.md, "The worker's thread settings")."""

PIPELINE_MIN_SECTION_RECORDS = 1024
"""A job runs phase 1 on its own thread only if its input sections average at least this
many records. Small sections make both phases Python-bound (per-batch overhead, not
Arrow or hashing, which release the GIL): two threads then only fight over the GIL and
the job gets slower; big sections gain from the thread (measured: bench/README.md, "The
worker's thread settings")."""


def pipelined(inputs: Sequence[LiveFile]) -> bool:
    """Whether phase 1 should run on its own thread for a job of these input files."""
    sections = sum(f.section_count for f in inputs)
    records = sum(f.record_count for f in inputs)
    return sections > 0 and records >= PIPELINE_MIN_SECTION_RECORDS * sections


Phase1Mode = Literal["inline", "thread", "process"]
PHASE1_MODES: tuple[Phase1Mode, ...] = ("inline", "thread", "process")


def phase1_mode(inputs: Sequence[LiveFile], *, may_fork: bool, cpus: int) -> Phase1Mode:
    """How phase 1 runs for a job of these input files by default: in a process of its
    own where that pays (``process_pays``); else on a thread of its own if its sections
    are big enough (``pipelined``); else on the job's thread."""
    if process_pays(may_fork=may_fork, cpus=cpus):
        return "process"
    return "thread" if pipelined(inputs) else "inline"


class Phase1Feed:
    """What the job's thread sees of phase 1, however it runs: the partitions it starts,
    each with its windows, and the groups it closes, in order (``next_unit``,
    ``windows``); and the end of a keep-set's use (``release_group``, and asking for the
    next window), so phase 1 may take out another. Used as a context manager; leaving it
    ends phase 1 (``close``)."""

    def __init__(self, job: Job) -> None:
        self._job = job

    def next_unit(self) -> Partition | Group | None:
        """The next partition phase 1 started (its windows follow, under deduplication),
        or group it closed, or None when the pointer is done."""
        item = self._get()
        if isinstance(item, Partition | Group):
            return item
        if isinstance(item, _Done):
            return None
        raise WorkerError(
            f"phase 1 handed over {item!r} where a partition starts", job_id=self._job.id
        )

    def windows(self) -> Iterator[Window]:
        """The current partition's windows, in order; each is released (its keep-set
        may be replaced by the next) when the next is asked for."""
        while True:
            item = self._get()
            if isinstance(item, _End):
                return
            if not isinstance(item, Window):
                raise WorkerError(
                    f"phase 1 handed over {item!r} where a window goes", job_id=self._job.id
                )
            yield item
            del item  # the keep-set goes before its slot does (MAX_KEEP_SETS)
            self._release()

    def release_group(self) -> None:
        """Phase 2 is done with the group ``next_unit`` gave."""
        self._release()

    def _get(self) -> _Item:
        raise NotImplementedError

    def _release(self) -> None:
        """A keep-set phase 2 held is gone."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Phase1Feed:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Phase1Walk:
    """Phase 1 itself: the job, its phase-1 pointer and the key buffer, walked
    (``_walk``) to yield, in order, for each partition either its start, its windows and
    its end, or (a run of small partitions) one ``Group``; then the end of the pointer.
    Where it runs (the job's thread, a thread or a process of its own) decides how it
    waits (``_acquire``) and stops (``_check``)."""

    def __init__(
        self, snap: Snapshot, job: Job, pointer: SectionMerge, buffer: KeyIndex, now_ms: int
    ) -> None:
        self._snap, self._job, self._pointer, self._buffer = snap, job, pointer, buffer
        self._now_ms = now_ms
        self._input_ids = {i.id for i in job.inputs}
        self._ends = InputEnds(snap, self._input_ids)
        self._policies: dict[tuple[str, bool, bool], PartitionPolicy] = {}
        """A topic's policy by whether the inputs hold the partition's oldest and newest
        data: one object for all partitions alike, so a group's message to phase 2
        pickles it once."""

    def _walk(self) -> Generator[_Item, None, None]:
        part = self._next()
        while part is not None:
            small = self._pointer.pending_shared(GROUP_BYTES) if may_group(part.policy) else []
            if small and group_weight(part.policy, small[0][3]) is not None:
                part = yield from self._group(part, small)
                continue
            if not part.policy.deduplicate:
                self._skip(part)  # before phase 2 reads it: the second-read memo
                yield part
            else:
                yield part
                batches = gathered(self._phase1_batches(part))
                yield from phase1_windows(batches, part.policy, self._buffer, self._acquire)
                yield _END
            part = self._next()
        yield _DONE

    def _next(self) -> Partition | None:
        """The partition the pointer is at, None at its end."""
        tp = self._pointer.next_partition()
        return None if tp is None else self._partition(tp)

    def _group(
        self, first: Partition, small: list[tuple[Key, str, int, int]]
    ) -> Generator[_Item, None, Partition | None]:
        """Takes a run of small partitions from ``first`` on and yields their ``Group``
        (or, if one window cannot hold them, each partition's own windows); returns the
        partition after the run, None at the pointer's end. ``small`` is what
        ``pending_shared`` gave, ``first``'s entry first (it reads the inputs' blocks
        ahead as far as the budget reaches, so one round usually lists the whole run).
        Each round's partitions are taken at once, each input's part as one run of each
        of its blocks (``SectionMerge.take_upto``). The group's phase-1 rows are held
        until its window closes (at most ``GROUP_BYTES``)."""
        assert small[0][1:3] == (first.topic, first.partition)
        parts: list[Partition] = []
        keys: list[Key] = []
        rows = GroupRows(phase1_fields(first.policy))
        weight = 0
        while True:
            last: Key | None = None
            full = False
            for key, topic, partition, size in small:
                if parts and weight >= GROUP_BYTES:
                    full = True
                    break
                part = self._partition((topic, partition)) if parts else first
                more = group_weight(part.policy, size)
                if more is None or not same_window(part.policy, first.policy):
                    full = True
                    break
                keys.append(key)
                parts.append(part)
                weight += more
                last = key
            if last is not None:
                self._pointer.take_upto(last, rows, keys)
            if full or last is None:
                break
            self._check()
            small = self._pointer.pending_shared(GROUP_BYTES - weight)
        records, labels, counts = rows.batch(len(parts))
        del rows
        window = group_window(records, labels, first.policy, self._buffer, self._acquire)
        if window is not None:
            del records  # not held while phase 2 works on the group
            yield Group(tuple(parts), tuple(counts), tuple(keys), *window)
        else:
            records = by_partition(records, labels, len(parts))
            at = 0
            for one, count in zip(parts, counts, strict=True):
                yield one
                own = records.slice(at, count)
                yield from phase1_windows([own], one.policy, self._buffer, self._acquire)
                yield _END
                at += count
        return self._next()

    def _partition(self, tp: tuple[str, int]) -> Partition:
        """What compacting partition ``tp`` in this job may do, and where its output goes."""
        snap, job = self._snap, self._job
        topic = snap.topics.get(tp[0])
        if topic is None:
            raise WorkerError(
                f"an input holds a section of topic {tp[0]!r}, which the catalog does not "
                "know (compactor verify names the file)",
                job_id=job.id,
            )
        oldest, newest = self._ends(*tp)
        policy = self._policies.get((tp[0], oldest, newest))
        if policy is None:
            policy = self._policies[(tp[0], oldest, newest)] = PartitionPolicy.for_partition(
                topic.config,
                deduplicate=job.deduplicate,
                now_ms=self._now_ms,
                includes_oldest=oldest,
                includes_newest=newest,
            )
        group = "compacted" if topic.config.compacted else "plain"
        return Partition(tp[0], tp[1], policy, group)

    def _skip(self, part: Partition) -> None:
        """Takes a copied partition's sections off the phase-1 pointer unread (checksummed,
        not decoded: a copy needs no keys)."""
        for section in self._pointer.take(part.topic, part.partition):
            self._check()
            section.skip()

    def _phase1_batches(self, part: Partition) -> Iterator[Weighed]:
        """``part``'s sections off the phase-1 pointer: their batches, with the columns
        phase 1 reads, to be consumed before the pointer moves on."""
        sections = self._pointer.take(part.topic, part.partition)
        for item in section_batches(sections, phase1_fields(part.policy)):
            self._check()
            yield item

    def _check(self) -> None:
        """Raises if phase 1 is to stop (only a phase 1 on a thread of its own is told)."""

    def _acquire(self) -> None:
        """Waits for room for one more keep-set (only a phase 1 on its own thread waits)."""


class Phase1Inline(Phase1Feed, Phase1Walk):
    """Phase 1 on the caller's thread, interleaved with phase 2 window by window (each
    window's phase 1 runs when phase 2 asks for it): the same interface as
    :class:`Phase1Thread`, for jobs that gain nothing from a second thread."""

    def __init__(
        self, snap: Snapshot, job: Job, pointer: SectionMerge, buffer: KeyIndex, now_ms: int
    ) -> None:
        Phase1Feed.__init__(self, job)
        Phase1Walk.__init__(self, snap, job, pointer, buffer, now_ms)
        self._items = self._walk()

    def __enter__(self) -> Phase1Inline:
        return self

    def close(self) -> None:
        self._items.close()

    def _get(self) -> _Item:
        return next(self._items)


class Phase1Thread(Phase1Feed, Phase1Walk):
    """Phase 1 of a whole job, on its own thread; use as a context manager (leaving it
    stops and joins the thread)."""

    def __init__(
        self, snap: Snapshot, job: Job, pointer: SectionMerge, buffer: KeyIndex, now_ms: int
    ) -> None:
        Phase1Feed.__init__(self, job)
        Phase1Walk.__init__(self, snap, job, pointer, buffer, now_ms)
        self._items: queue.Queue[_Item] = queue.Queue(MAX_ITEMS)
        self._slots = threading.Semaphore(MAX_KEEP_SETS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"phase1-{job.id}", daemon=True)

    def __enter__(self) -> Phase1Thread:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops phase 1 at its next batch or wait, and joins its thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    # --- the job's thread ---------------------------------------------------------------

    def _get(self) -> _Item:
        while True:
            try:
                item = self._items.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._items.empty():
                    raise WorkerError(
                        "phase 1's thread ended without a word", job_id=self._job.id
                    ) from None
                continue
            if isinstance(item, _Failed):
                raise item.error
            return item

    def _release(self) -> None:
        self._slots.release()

    # --- the phase-1 thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            threads, self._buffer.threads = self._buffer.threads, HASH_THREADS
            try:
                for item in self._walk():
                    self._put(item)
            finally:
                self._buffer.threads = threads
        except _Stopped:
            return
        except BaseException as e:  # handed to the job's thread, raised there
            try:
                self._put(_Failed(e))
            except _Stopped:
                return

    def _check(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _acquire(self) -> None:
        while not self._slots.acquire(timeout=_POLL_S):
            self._check()
        self._check()

    def _put(self, item: _Item) -> None:
        while True:
            self._check()
            try:
                self._items.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue
