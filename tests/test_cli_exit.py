"""How the ``compactor`` script ends (``cli.launch.exit_at_once``): with the command's
status, its output whole and its exit handlers run, but without the interpreter's
teardown; or, while a thread Python would wait for still runs, the usual way."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_script_ends_at_once_with_its_status_its_output_and_its_exit_handlers() -> None:
    done = _python(
        """
        import atexit, sys
        from compactor.cli.launch import exit_at_once
        atexit.register(lambda: print("handled", file=sys.stderr))
        print("x" * 200_000)  # more than a pipe holds: buffered until the flush
        exit_at_once(3)
        print("unreached")
        """
    )
    assert done.returncode == 3
    assert done.stdout == "x" * 200_000 + "\n"
    assert done.stderr == "handled\n"


def test_a_thread_python_waits_for_keeps_the_usual_exit() -> None:
    done = _python(
        """
        import sys, threading
        from compactor.cli.launch import exit_at_once
        go = threading.Event()
        late = threading.Thread(target=lambda: (go.wait(), print("late", flush=True)))
        late.start()
        code = exit_at_once(3)
        print("returned", code, flush=True)
        go.set()
        sys.exit(code + 1)
        """
    )
    assert done.returncode == 4
    assert done.stdout == "returned 3\nlate\n"
