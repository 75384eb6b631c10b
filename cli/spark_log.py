"""Spark's own log, kept off a ``spark`` command's stderr.

A command's stderr is its own: on failure, one line (README.md, "Exit codes"). The
driver's JVM writes Spark's log to the stderr it inherits, and in local mode so do the
executors' Python workers under it: eight lines of warnings on every run, and a page of
Java and Python stack above the command's line when a task fails. So the JVM is started
with its stderr on another file: ``--spark-log FILE`` (appended to), else an unnamed
temporary file that goes with the command. ``--debug`` leaves it on stderr, as before.
Under spark-submit the JVM is already running when the command starts, and its log is
spark-submit's.

When the JVM exits before Spark starts, pyspark says only that it exited; the error the
command reports is the JVM's own line from that file instead (``jvm_words``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from compactor.cli.context import UsageError
from compactor.spark.failures import SparkUnavailable

_NOISE = re.compile(
    r"^(WARNING: Using incubator modules|Using Spark's default log4j profile"
    r"|Setting default log level|To adjust logging level"
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN) )"
)
_STACK = re.compile(r"^\s+(at |\.\.\. \d+ more)")
_THROWN = re.compile(r"^Exception in thread \"[^\"]*\" [\w.$]+: (.+)$")
_ERROR = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ERROR [\w.$]+: (.+)$")


def jvm_words(log: str) -> str | None:
    """The line of a JVM's log that says why it exited: the message of the exception its
    main thread died of, else the first line that is neither Spark's routine start-up
    chatter nor a stack frame (a launcher's "java: No such file or directory"), else
    Spark's last ERROR ("All masters are unresponsive! Giving up.")."""
    lines = [line.strip() for line in log.splitlines()]
    for line in lines:
        thrown = _THROWN.match(line)
        if thrown:
            return thrown.group(1)
    errors = [m.group(1) for m in map(_ERROR.match, lines) if m]
    if errors:
        return errors[-1]
    for line in lines:
        if line and not _NOISE.match(line) and not _STACK.match(line):
            return line
    return None


@contextmanager
def spark_log(path: str | None, *, on_stderr: bool) -> Iterator[None]:
    """Within this block, a JVM started from this process writes its stderr to ``path``
    (appended to) or to an unnamed temporary file; this process's own stderr is put
    back when the block ends. ``on_stderr``: leave the JVM on this stderr."""
    if on_stderr:
        yield
        return
    try:
        sink: BinaryIO = open(path, "a+b") if path else tempfile.TemporaryFile()  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--spark-log {path}: {exc.strerror}") from None
    with sink:
        start = sink.tell()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except SparkUnavailable as exc:
            sink.flush()
            os.dup2(saved, 2)
            words = jvm_words(_read_from(sink.fileno(), start))
            if words is None:
                raise
            raise SparkUnavailable(f"Spark did not start: {words}") from exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _read_from(fd: int, start: int) -> str:
    return os.pread(fd, 1 << 20, start).decode("utf-8", "replace")
