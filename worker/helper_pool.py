"""Phase 1's helper processes (``worker.phase1_process``): the idle ones kept between
jobs, when a worker uses one, and when an entry point starts one
(``start_for_command``). How a process starts, forked or spawned, is
``worker.helper_process``.

This module imports only the standard library, ``worker.memory`` and
``worker.helper_process``, so that an entry point can start a helper before it imports
anything else.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import os
import subprocess
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

from compactor.worker import helper_process
from compactor.worker.memory import pyarrow_starts_no_thread

MAX_IDLE_HELPERS = 2
"""Helpers kept between jobs (a process running jobs on two threads at once uses two)."""
COMMANDS_THAT_COMPACT = frozenset({"compact", "demo", "replay", "worker"})
"""The ``compactor`` commands that may run compaction jobs in their own process."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def process_pays(*, may_fork: bool, cpus: int) -> bool:
    """Whether phase 1 runs in a process of its own by default: if it may (``may_fork``:
    the store and the key buffer can be made again there) and the job may keep a second
    CPU busy (``cpus``). A worker that may use a process always does, whatever the job's
    size: the process is kept between jobs (its start is paid once), and its key buffer
    is then the only one touched."""
    return may_fork and cpus >= 2


OUTBOX_PIPE_BYTES = 1 << 20
"""What the pipe from a helper holds unread (Linux's default: 64 KiB). A window's keep-set
(8 bytes a winning record) is bigger than 64 KiB from about 8,000 winners on, so with the
default the helper blocks sending one until phase 2 has finished the window before it,
and cannot start the next: at bench-100p it blocked 0.3 s of a 1.1 s job, while phase 2
waited 0.2 s for its feed (``bench/README.md``, "A section's end behind its frames"). 1
MiB, Linux's default most an unprivileged process may ask for, holds a window of 130,000
winners; MAX_KEEP_SETS still bounds how many a job holds."""


def widen_pipe(fd: int, size: int = OUTBOX_PIPE_BYTES) -> int:
    """Asks for a pipe of ``size`` bytes; returns the size it has (as it was where the
    system refuses, e.g. a lower ``/proc/sys/fs/pipe-max-size``), or 0 where pipes cannot
    be sized (not Linux)."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    getsize = getattr(fcntl, "F_GETPIPE_SZ", None)
    if setsize is None or getsize is None:
        return 0
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, setsize, size)
    return int(fcntl.fcntl(fd, getsize))


class Helper:
    """One helper process and the two pipes to it."""

    def __init__(self, *, forked: bool | None = None) -> None:
        """``forked``: whether the process is forked or spawned (``worker.helper_process``);
        by default forked if that is safe and the helper's modules are loaded."""
        to_helper_r, to_helper_w = os.pipe()
        from_helper_r, from_helper_w = os.pipe()
        widen_pipe(from_helper_w)
        if forked is None:
            forked = helper_process.forks_at_once()
        try:
            start = helper_process.fork if forked else helper_process.spawn
            self.process: subprocess.Popen[bytes] | helper_process.ForkedProcess = start(
                to_helper_r, from_helper_w
            )
        finally:
            os.close(to_helper_r)
            os.close(from_helper_w)
        self.inbox = Connection(to_helper_w, readable=False)
        self.outbox = Connection(from_helper_r, writable=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, unread: Callable[[Connection], None] = lambda outbox: None) -> None:
        """SIGKILL, then the pipes: closed first, they would let the helper read the end
        of its inbox and exit on its own, tearing its interpreter down (and printing
        whatever its teardown prints) on the worker's stderr. ``unread`` is given the
        outbox once the helper is gone and before it is closed: what it sent and no one
        read is still there."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        unread(self.outbox)
        self.inbox.close()
        self.outbox.close()


_idle: list[Helper] = []
_idle_lock = threading.Lock()


def checkout() -> Helper:
    """An idle helper, or a new one."""
    with _idle_lock:
        while _idle:
            helper = _idle.pop()
            if helper.alive():
                return helper
            helper.kill()
    return Helper()


def checkin(helper: Helper) -> None:
    """Keeps ``helper`` for the next job, or kills it if enough are idle."""
    with _idle_lock:
        if helper.alive() and len(_idle) < MAX_IDLE_HELPERS:
            _idle.append(helper)
            return
    helper.kill()


def idle_pids() -> list[int]:
    """The process ids of the idle helpers."""
    with _idle_lock:
        return [h.process.pid for h in _idle]


def warm_up() -> None:
    """Starts a helper now, if none is idle, so that the first job does not wait for one
    to import its modules (it does so while the worker reads its catalog and plans)."""
    with _idle_lock:
        if _idle:
            return
    checkin(Helper())


def start_for_command(command: str | None) -> None:
    """``warm_up`` at an entry point, before the command line imports its modules, if
    ``command`` (the one a ``compactor`` line runs) may run compaction jobs in this
    process (``COMMANDS_THAT_COMPACT``) and a process would pay. A helper that no job then
    uses (a store that cannot travel, nothing to compact) is killed at exit.

    Where the helper can be forked (one thread, and pyarrow's import starts none), the
    helper's modules are imported first, so that the fork has nothing left to import and
    is ready when the first job is planned (a one-shot ``compact --full`` at 10,000
    partitions 0.04 s faster than with a spawned helper, ``bench/README.md``). Otherwise
    the helper is spawned at once, and its interpreter loads its modules beside the
    command line's."""
    if command not in COMMANDS_THAT_COMPACT or not process_pays(may_fork=True, cpus=usable_cpus()):
        return
    if helper_process.fork_is_safe() and pyarrow_starts_no_thread():
        importlib.import_module(helper_process.HELPER_MODULE)
    warm_up()


@atexit.register
def _stop_idle() -> None:
    """At the worker's exit: idle helpers are killed, not waited for. An idle helper holds
    nothing that outlives it (it only reads, and its job's reads are over); letting it
    tear its interpreter down would keep the worker's exit waiting."""
    with _idle_lock:
        helpers, _idle[:] = list(_idle), []
    for helper in helpers:
        helper.kill()
