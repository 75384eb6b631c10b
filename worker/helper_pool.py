"""Phase 1's helper processes (``worker.phase1_process``): how one is started, the idle
ones kept between jobs, and when a worker uses one.

This module imports only the standard library and ``worker.memory``, so that an entry
point can start a helper before it imports anything else (``start_for_command``): the
helper's interpreter and the worker's then load their modules side by side, on two
cores, and the first job does not wait for the helper to finish importing pyarrow.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

import compactor
from compactor.worker.memory import LEAN_POOL, POOL_ENV

HELPER_MODULE = "compactor.worker.phase1_process"
"""What a helper runs: ``python -m`` this, with its two pipes' descriptors."""
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


class Helper:
    """One helper process and the two pipes to it."""

    def __init__(self) -> None:
        to_helper_r, to_helper_w = os.pipe()
        from_helper_r, from_helper_w = os.pipe()
        env = dict(os.environ)
        env.setdefault(POOL_ENV, LEAN_POOL)  # before the helper imports pyarrow
        root = str(Path(compactor.__file__).parent.parent)  # where this ``compactor`` is
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE, str(to_helper_r), str(from_helper_w)],
                pass_fds=(to_helper_r, from_helper_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(to_helper_r)
            os.close(from_helper_w)
        self.inbox = Connection(to_helper_w, readable=False)
        self.outbox = Connection(from_helper_r, writable=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, then the pipes: closed first, they would let the helper read the end
        of its inbox and exit on its own, tearing its interpreter down (and printing
        whatever its teardown prints) on the worker's stderr."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
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
    """``warm_up`` now, before the command line imports its modules, if ``command`` (the
    one a ``compactor`` line runs) may run compaction jobs in this process
    (``COMMANDS_THAT_COMPACT``) and a process would pay. A helper that no job then uses
    (a store that cannot travel, nothing to compact) is killed at exit."""
    if command not in COMMANDS_THAT_COMPACT or not process_pays(may_fork=True, cpus=usable_cpus()):
        return
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
