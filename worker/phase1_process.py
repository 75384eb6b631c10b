"""Runs phase 1 in a process of its own, a window ahead of phase 2.

A thread of its own (``worker.pipeline.Phase1Thread``) gives phase 1 a core only where
hashing and Arrow's decoding run without the GIL; everywhere else (reading frames,
checking sections, merging the inputs, grouping small partitions) the two phases take
turns at one interpreter, and on small sections that is most of the job. A process of
its own gives phase 1 an interpreter too, so both cores work on every shape
(``bench/README.md``, "Phase 1 in a process of its own").

That process is a *helper*: ``python -m compactor.worker.phase1_process``, started once
per worker process ahead of the first job and kept between jobs (``worker.helper_pool``),
with its own key buffer, allocated once and reused, like the worker's own
(docs/ARCHITECTURE.md §5). It is forked from a worker that runs a single thread, so no
lock another thread held can be inherited, and spawned afresh from any other
(``worker.helper_process``); either way it runs no code of the caller's ``__main__``.

A job sends its helper the snapshot, the job and a recipe for the store
(``ObjectStore.portable``). The helper opens phase 1's GET streams itself (one per input
file: the job's process opens only phase 2's, so still exactly two per input) and sends
each item of phase 1's walk (``worker.pipeline.Phase1Walk``), pickled, through a pipe:
the partitions, windows with their keep-sets, ends and groups, in order. Before the end
it sends its streams' GET requests and resumes, which the job's report counts with its
own. What it costs as it goes, it reports as it goes (``_Sent``): the requests it sent,
which the worker adds to its tally (``objectstore.request_tally.SENT``), and, where the
worker meters the job's reads, the bytes it read; every ``REPORT_BYTES`` read, and once
more at its end or its failure. A helper killed mid-job has its unread reports read
before its pipe is closed, so only what it did since its last report goes uncounted.

Bounds: the same as a thread's. At most ``MAX_KEEP_SETS`` keep-sets are out at a time
(the helper waits for the job's process to release one before it takes out a third), and
the pipe from the helper holds up to ``helper_pool.OUTBOX_PIPE_BYTES`` unread, so the
helper sends a window's keep-set and goes on to the next window without waiting for the
job's process to read it.

Failure: whatever phase 1 raises in the helper (FormatError, StoreError, WorkerError) is
pickled and raised on the job's thread when phase 2 gets there, as from a thread; an
error that does not survive pickling arrives as a WorkerError naming it. A helper that
dies without a word (killed, out of memory) is a WorkerError. A job that ends before its
phase 1 did (a failure on the job's thread, KeyboardInterrupt) kills its helper; the
next job starts another. A helper whose worker died reads the end of its pipe and exits.
It ignores SIGINT: the worker decides when it stops.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from compactor.catalog import Snapshot
from compactor.objectstore import ObjectStore
from compactor.objectstore.request_tally import SENT, Operation, difference
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.job import Job
from compactor.worker.collector import rare_collections
from compactor.worker.errors import WorkerError
from compactor.worker.helper_pool import Helper, checkin, checkout
from compactor.worker.kernel import KeyBuffer
from compactor.worker.memory import use_lean_memory_pool
from compactor.worker.merge import SectionMerge
from compactor.worker.partition import KeyIndex
from compactor.worker.pipeline import (
    _DONE,
    HASH_THREADS,
    MAX_KEEP_SETS,
    Phase1Feed,
    Phase1Walk,
    _Done,
    _Failed,
    _Item,
    _Stopped,
)
from compactor.worker.pointer import Reads, ReadTally, open_pointer

_PASSED_ENV = ("AWS_", "COMPACTOR_")
"""Environment variables a job's helper takes from the worker as they are when the job
starts (credentials, endpoints, settings), not as they were when the helper started."""

_STOP_S = 5.0
"""How long a helper that died may take to be reaped before its job's error is raised."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A job for a helper: everything phase 1 needs, pickled once."""

    snap: Snapshot
    job: Job
    store: Callable[[], ObjectStore]
    capacity_bytes: int
    hash_impl: str
    now_ms: int
    env: dict[str, str] = field(default_factory=dict)
    metered: bool = False
    """Count the bytes the helper's streams read, for the worker's meter."""


@dataclass(frozen=True, slots=True)
class _Sent:
    """What the helper sent and read since its last report: requests by operation, and
    bytes its streams read (0 unless the job is metered)."""

    requests: dict[Operation, int]
    read_bytes: int


@dataclass(frozen=True, slots=True)
class _Release:
    """Phase 2 is done with a keep-set of job ``job_id``."""

    job_id: str


# --- the worker's side ----------------------------------------------------------------


def store_recipe(
    store: ObjectStore, buffer: KeyIndex, read_throttle: ReadThrottle | None = None
) -> Callable[[], ObjectStore] | None:
    """How a helper would make ``store`` again; None where phase 1 cannot have a process of
    its own: the store cannot travel (``ObjectStore.portable``), the key buffer is not a
    ``KeyBuffer`` (the helper makes one of the same size and hash), or reads are paced
    (one token bucket for both pointers is this process's). A throttle without a rate,
    a meter (a queue worker's ``read_bytes``), does not keep phase 1 here: the helper
    meters its own reads and reports them (``_Sent``)."""
    if (read_throttle is not None and read_throttle.paces) or not isinstance(buffer, KeyBuffer):
        return None
    return store.portable()


class Phase1Process(Phase1Feed):
    """Phase 1 of a whole job in a helper process; use as a context manager (leaving it
    hands the helper back, or kills it if phase 1 had not finished). ``reads`` holds the
    helper's GET requests and resumes per input key once phase 1 is done. With a
    ``meter`` (a throttle without a rate), the bytes the helper reports it read are
    consumed from it as its reports arrive (``_Sent``)."""

    def __init__(
        self,
        snap: Snapshot,
        job: Job,
        store: Callable[[], ObjectStore],
        buffer: KeyBuffer,
        now_ms: int,
        meter: ReadThrottle | None = None,
    ) -> None:
        super().__init__(job)
        if meter is not None and meter.paces:
            raise ValueError("a throttle with a rate keeps phase 1 in the job's process")
        env = {k: v for k, v in os.environ.items() if k.startswith(_PASSED_ENV)}
        self._plan = _Plan(
            snap,
            job,
            store,
            buffer.capacity_bytes,
            buffer.hash_impl,
            now_ms,
            env,
            metered=meter is not None,
        )
        self._meter = meter
        self._helper: Helper | None = None
        self._finished = False  # the helper has sent the job's last item
        self.reads = Reads({}, {})

    def __enter__(self) -> Phase1Process:
        self._helper = helper = checkout()
        try:
            _send(helper.inbox, self._plan)
        except OSError:  # it died idle: one more try with a new one
            helper.kill()
            self._helper = helper = Helper()
            _send(helper.inbox, self._plan)
        return self

    def close(self) -> None:
        """Hands the helper back if phase 1 finished, else kills it."""
        helper, self._helper = self._helper, None
        if helper is None:
            return
        if self._finished:
            checkin(helper)
        else:
            helper.kill(unread=self._count_unread)

    def _count_unread(self, outbox: Connection) -> None:
        """Counts the reports a killed helper sent that the job's thread never read; the
        rest of what is left in the pipe (windows, groups) goes unread."""
        with contextlib.suppress(Exception):  # a message cut by the kill ends the reading
            while outbox.poll(0):
                item = pickle.loads(outbox.recv_bytes())
                if isinstance(item, _Sent):
                    self._count(item)

    def _count(self, sent: _Sent) -> None:
        SENT.add(sent.requests)  # sent on this worker's behalf
        if self._meter is not None:
            self._meter.consume(sent.read_bytes)

    def _get(self) -> _Item:
        helper = self._helper
        assert helper is not None, "Phase1Process used outside its context"
        while True:
            try:
                item: _Item | Reads | _Sent = pickle.loads(helper.outbox.recv_bytes())
            except (EOFError, OSError):
                code = helper.process.wait(_STOP_S)
                raise WorkerError(
                    f"phase 1's process ended without a word (exit code {code})",
                    job_id=self._job.id,
                ) from None
            if isinstance(item, _Sent):
                self._count(item)
                continue
            if isinstance(item, Reads):
                self.reads = item
                continue
            if isinstance(item, _Failed | _Done):
                self._finished = True
            if isinstance(item, _Failed):
                raise item.error
            return item

    def _release(self) -> None:
        helper = self._helper
        if helper is not None:
            with contextlib.suppress(OSError):  # a helper that died: its silence says so
                _send(helper.inbox, _Release(self._job.id))


# --- the helper's side ----------------------------------------------------------------


class _HelperWalk(Phase1Walk):
    """Phase 1 in the helper: waits for a release from the worker before taking out a
    keep-set while ``MAX_KEEP_SETS`` are out."""

    def __init__(
        self, plan: _Plan, pointer: SectionMerge, buffer: KeyBuffer, inbox: Connection
    ) -> None:
        super().__init__(plan.snap, plan.job, pointer, buffer, plan.now_ms)
        self._inbox = inbox
        self._free = MAX_KEEP_SETS

    def _acquire(self) -> None:
        while self._free == 0:
            try:
                message = pickle.loads(self._inbox.recv_bytes())
            except (EOFError, OSError):
                raise _Stopped from None
            if isinstance(message, _Release) and message.job_id == self._job.id:
                self._free += 1
        self._free -= 1


class _HelperState:
    """What a helper keeps between jobs: its key buffer and its stores."""

    def __init__(self) -> None:
        self.buffer: KeyBuffer | None = None
        self.stores: dict[bytes, ObjectStore] = {}

    def key_buffer(self, plan: _Plan) -> KeyBuffer:
        buffer = self.buffer
        if buffer is None or (buffer.capacity_bytes, buffer.hash_impl) != (
            plan.capacity_bytes,
            plan.hash_impl,
        ):
            self.buffer = None  # the old one goes before the new one is mapped
            buffer = self.buffer = KeyBuffer(
                plan.capacity_bytes, threads=HASH_THREADS, hash_impl=plan.hash_impl
            )
        return buffer

    def store(self, plan: _Plan) -> ObjectStore:
        recipe = pickle.dumps((plan.store, sorted(plan.env.items())))
        store = self.stores.get(recipe)
        if store is None:
            if len(self.stores) >= 4:
                self.close()
            store = self.stores[recipe] = plan.store()
        return store

    def close(self) -> None:
        """Closes the stores (an S3 store's client and its event loop's sessions), so
        that none is left for the interpreter's teardown to complain about."""
        stores, self.stores = list(self.stores.values()), {}
        for store in stores:
            store.close()


@rare_collections()
def _run(plan: _Plan, state: _HelperState, inbox: Connection, outbox: Connection) -> None:
    """One job's phase 1, each item sent as it comes."""
    os.environ.update(plan.env)
    store = state.store(plan)
    buffer = state.key_buffer(plan)
    counts = _Counts(ReadThrottle(None) if plan.metered else None)
    done = False
    try:
        with ReadTally(store, plan.job.inputs) as tally, ExitStack() as stack:
            pointer = open_pointer(
                stack, store, plan.job.inputs, counts.meter, None, tally.streams, "all"
            )
            for item in _HelperWalk(plan, pointer, buffer, inbox)._walk():
                if counts.due() or item is _DONE:
                    _send(outbox, counts.report())
                if item is _DONE:
                    done = True
                    _send(outbox, tally.reads(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
                _send(outbox, item)
    except Exception:
        if done:
            return  # the job has had its end; closing a stream after it is no news to it
        with contextlib.suppress(OSError):  # what phase 1 cost counts, failed or not
            _send(outbox, counts.report())
        raise


REPORT_BYTES = 8 << 20
"""A metered helper reports its costs each time its streams have read this much more."""


class _Counts:
    """The helper's costs not yet reported: this process's requests (``SENT``) and the
    bytes ``meter`` saw."""

    def __init__(self, meter: ReadThrottle | None) -> None:
        self.meter = meter
        self._requests = SENT.snapshot()
        self._bytes = 0

    def due(self) -> bool:
        """Whether the streams have read ``REPORT_BYTES`` since the last report."""
        return self.meter is not None and self.meter.bytes_total - self._bytes >= REPORT_BYTES

    def report(self) -> _Sent:
        now = SENT.snapshot()
        read = self.meter.bytes_total if self.meter is not None else 0
        sent = _Sent(difference(now, self._requests), read - self._bytes)
        self._requests, self._bytes = now, read
        return sent


def _send(conn: Connection, message: object) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _portable(error: BaseException, job: Job) -> BaseException:
    """``error`` if it survives pickling as itself, else a WorkerError naming it."""
    try:
        again = pickle.loads(pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL))
        if type(again) is type(error) and str(again) == str(error):
            return error
    except Exception:
        pass
    return WorkerError(f"phase 1 failed: {type(error).__name__}: {error}", job_id=job.id)


def main(argv: list[str]) -> int:
    """The helper: jobs from the worker, one at a time, until the worker closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    use_lean_memory_pool()
    state = _HelperState()
    try:
        _serve(state, inbox, outbox)
    finally:
        state.close()
    return 0


def _serve(state: _HelperState, inbox: Connection, outbox: Connection) -> None:
    """Runs the jobs that come, until the worker has gone."""
    while True:
        try:
            message = pickle.loads(inbox.recv_bytes())
        except (EOFError, OSError):
            return
        if not isinstance(message, _Plan):
            continue  # a release of a job that is over
        try:
            _run(message, state, inbox, outbox)
        except (_Stopped, BrokenPipeError, EOFError):
            return  # the worker has gone
        except BaseException as e:
            try:
                _send(outbox, _Failed(_portable(e, message.job)))
            except OSError:
                return


if __name__ == "__main__":
    # Run as a script, this file is ``__main__``; the classes the worker pickles are
    # those of ``compactor.worker.phase1_process``, so the helper runs that module's main.
    from compactor.worker.phase1_process import main as helper_main

    raise SystemExit(helper_main(sys.argv[1:]))
