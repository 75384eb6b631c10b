"""Spark's own log, kept off a ``spark`` command's stderr.

A command's stderr is its own: on failure, one line (README.md, "Exit codes"). The
driver's JVM writes Spark's log to the stderr it inherits, and in local mode so do the
executors' Python workers under it: eight lines of warnings on every run, and a page of
Java and Python stack above the command's line when a task fails. So the JVM is started
with its stderr on another file: ``--spark-log FILE`` (appended to), else an unnamed
temporary file that goes with the command (Spark logs only its errors once started, so
it stays small). ``--debug`` leaves it on stderr instead. Under spark-submit the JVM is
already running when the command starts, and its log is spark-submit's.

When Spark does not start, pyspark says only that its JVM exited, or that the context
it made was stopped; the error the command reports carries the JVM's own words from
that file instead (``jvm_words``).
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

_LOGGED = re.compile(r"^[\d/:\-T,. ]+ (TRACE|DEBUG|INFO|WARN|ERROR) [\w.$]+: (.*)$")
"""A log4j line in Spark's default layout (``26/12/01 18:49:30 WARN Utils: ...``) or an
ISO-8601 one (``2026-12-01T19:05:49,650 WARN ...``): its level and message."""
_STARTUP = re.compile(
    r"^(WARNING: Using incubator modules|Using Spark's default log4j profile"
    r"|Setting default log level|To adjust logging level)"
)
_STACK = re.compile(r"^(at |\.\.\. \d+ more|Caused by: )")
_THROWN = re.compile(r"^Exception in thread \"[^\"]*\" [\w.$]+: (.+)$")
_EXCEPTION = re.compile(r"^[\w.$]+(Exception|Error): (.+)$")


def jvm_words(log: str, *, exited: bool) -> str | None:
    """The words of a JVM's log that say why Spark did not start, or None:
    - the message of the exception a thread of it died of;
    - else its last ERROR: the message of the exception logged with it ("Asked to run
      locally with 0 threads" under "Error initializing SparkContext."), or the ERROR's
      own ("All masters are unresponsive! Giving up.");
    - else, where the JVM ``exited``, its first line that is neither a log line, start-up
      chatter nor a stack frame (the launcher's "java: No such file or directory")."""
    lines = [line.strip() for line in log.splitlines()]
    for line in lines:
        thrown = _THROWN.match(line)
        if thrown:
            return thrown.group(1)
    errors = [
        (i, m) for i, line in enumerate(lines) if (m := _LOGGED.match(line)) and m[1] == "ERROR"
    ]
    if errors:
        last, logged = errors[-1]
        after = _EXCEPTION.match(lines[last + 1]) if last + 1 < len(lines) else None
        return after[2] if after else logged[2]
    if exited:
        for line in lines:
            if line and not (_LOGGED.match(line) or _STARTUP.match(line) or _STACK.match(line)):
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
        sink: BinaryIO = open(path, "ab") if path else tempfile.TemporaryFile()  # noqa: SIM115
    except OSError as exc:
        where = f"--spark-log {path}" if path else "a temporary file for Spark's log"
        raise UsageError(f"{where}: {exc.strerror or exc}") from None
    with sink:
        start = _position(sink)
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except SparkUnavailable as exc:
            words = jvm_words(_written(sink, path, start), exited=exc.jvm_exited)
            if words is None:
                raise
            raise SparkUnavailable(words, exc.jvm_exited) from exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _position(sink: BinaryIO) -> int | None:
    try:
        return os.lseek(sink.fileno(), 0, os.SEEK_END)
    except OSError:  # a pipe, a terminal, /dev/stderr: not read back
        return None


def _written(sink: BinaryIO, path: str | None, start: int | None) -> str:
    """What the JVM wrote to ``sink`` since ``start`` (its first MiB), or "" where it
    cannot be read back."""
    if start is None:
        return ""
    try:
        if path is None:  # the temporary file, opened for reading too
            data = os.pread(sink.fileno(), 1 << 20, start)
        else:  # opened to append only
            with open(path, "rb") as again:
                again.seek(start)
                data = again.read(1 << 20)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")
