"""How a phase-1 helper's process starts: forked from the worker, or spawned afresh.

A spawned helper (``python -m compactor.worker.phase1_process``) starts an interpreter and
imports pyarrow and this package itself: about 150 ms before it can take a job, on a
one-shot ``compactor compact`` longer than the worker takes to read its catalog and plan,
so that the job's first window waited for it.

A forked helper has nothing to import: it is a copy of a worker that has loaded the
helper's modules, and it can take a job at once. It is forked only where that is safe
(``fork_is_safe``): on Linux, while the worker runs a single thread (its
``/proc/self/task``), so that no lock held by another thread (the writer's encoder, a
store's event loop, a queue consumer's heartbeat, jemalloc's purger) is copied held. The
child closes every descriptor but its two pipes and standard output and error, reads
standard input from ``/dev/null`` (as a spawned one does), runs the helper's main loop and
ends with ``os._exit``: it never returns into the worker's code nor runs its exit
handlers. Everywhere else a helper is spawned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import compactor
from compactor.worker.memory import LEAN_POOL, POOL_ENV

HELPER_MODULE = "compactor.worker.phase1_process"
"""What a helper runs: its ``main``, in a forked child or as ``python -m``."""
_TASKS = Path("/proc/self/task")
_POLL_S = 0.002


def fork_is_safe() -> bool:
    """Whether a helper may be forked now: on Linux, with this process running one thread."""
    try:
        return sys.platform.startswith("linux") and len(os.listdir(_TASKS)) == 1
    except OSError:
        return False


def forks_at_once() -> bool:
    """Whether a forked helper would be ready at once: forking is safe and the helper's
    modules are loaded."""
    return HELPER_MODULE in sys.modules and fork_is_safe()


class ForkedProcess:
    """A forked helper, with the part of ``subprocess.Popen``'s interface a helper uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            code = self._reaped(0)
            assert code is not None  # a blocking wait returns only once it has ended
            return code
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(HELPER_MODULE, timeout)
            time.sleep(_POLL_S)
        return code

    def _reaped(self, flags: int) -> int | None:
        """The exit code, once the child has ended (``os.waitpid`` with ``flags``)."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped by another (SIGCHLD ignored): gone, as Popen
                self.returncode = 0  # says, with no status to be had
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def fork(inbox: int, outbox: int) -> ForkedProcess:
    """A helper forked from this process, reading ``inbox`` and writing ``outbox`` (the
    child's ends of its two pipes). Only where ``fork_is_safe()``."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()  # or the child's copy of what is buffered could be written twice
        sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedProcess(pid)
    code = 1
    try:
        _keep_only(inbox, outbox)
        from compactor.worker.phase1_process import main

        code = main([str(inbox), str(outbox)])
    except BaseException:
        traceback.print_exc()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
    finally:
        os._exit(code)


def _keep_only(*fds: int) -> None:
    """Closes every descriptor from 3 up but ``fds``; standard input from ``/dev/null``."""
    start = 3
    for fd in sorted(fds):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def spawn(inbox: int, outbox: int) -> subprocess.Popen[bytes]:
    """A helper started afresh: ``python -m`` ``HELPER_MODULE`` with its pipes' ends."""
    env = dict(os.environ)
    env.setdefault(POOL_ENV, LEAN_POOL)  # before the helper imports pyarrow
    root = str(Path(compactor.__file__).parent.parent)  # where this ``compactor`` is
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", HELPER_MODULE, str(inbox), str(outbox)],
        pass_fds=(inbox, outbox),
        stdin=subprocess.DEVNULL,
        env=env,
    )
