"""The ``compactor`` script and ``python -m compactor``: starts phase 1's helper before
the command line is imported when the command may run compaction jobs
(``worker.helper_pool.start_for_command``: forked once its modules are loaded, or
spawned at once to load them beside the command line); then runs the command line
(``cli.main``) and ends the process at once (``exit_at_once``)."""

from __future__ import annotations

import atexit
import os
import sys
import threading

from compactor.cli.commands import command_of
from compactor.worker.helper_pool import start_for_command


def main() -> int:
    start_for_command(command_of(sys.argv[1:]))
    from compactor.cli.main import main as command_line  # after the helper has started

    return exit_at_once(command_line())


def exit_at_once(code: int) -> int:
    """Ends the process with status ``code`` once the command has returned: its output
    flushed and the exit handlers run (the helper killed, logging flushed), as at any
    exit, but without the interpreter's teardown, which frees every module and object one
    by one: 29 ms after a 10,000-partition job, 6 ms without (``bench.command_timeline``).
    Everything the command made durable was written and closed before it returned; what
    is skipped is objects' finalizers (``__del__``), the exit handlers still run
    (``weakref.finalize`` is one of them).

    Returns ``code`` instead, for the usual exit, while a thread that Python would wait
    for is still running, or when the output cannot be flushed (a reader that has gone:
    the usual exit reports it as always)."""
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        return code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()  # what the exit handlers printed
        sys.stderr.flush()
    finally:
        os._exit(code)
