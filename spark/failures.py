"""A Spark task's failure as the command reports it: the one line and the exit status of
the error the task raised, not the driver's Py4J error wrapped around it.

A task's exception reaches the driver only as text: Spark puts the Python traceback
inside a Java exception, with the JVM's stack, and the command printed all of it as an
"internal error" (exit 70), for a corrupt input file as for a bug. So each task raises
its error again as ``TaskError``, whose message is one marked line of JSON naming the
error's class and message. Spark still retries the task as before
(``spark.task.maxFailures``). When ``collect`` fails, ``task_failure`` finds the last
marked line in its error, and the driver raises ``SparkTaskFailed`` in its place. It
carries the task error's class as ``raised_as``, which ``cli.main`` maps to that error's
exit status: a FormatError in a task exits 6, as ``compact`` does.

Plain Python: the executor's side imports it without pyspark.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

MARKER = "compactor task error: "
_MARKED = re.compile(re.escape(MARKER) + r"(\{.*\})$", re.MULTILINE)

P = ParamSpec("P")
R = TypeVar("R")


class TaskError(RuntimeError):
    """What a task raises in place of its error: ``MARKER`` and one line of JSON."""


class SparkTaskFailed(Exception):
    """A job or index task failed on Spark. ``str(e)`` is the task error's own message;
    ``raised_as`` is its class where this package defines it (so the command exits as
    if the error had been raised here), else None (a bug: exit 70)."""

    def __init__(self, message: str, raised_as: type[BaseException] | None) -> None:
        super().__init__(message)
        self.raised_as = raised_as


class SparkUnavailable(Exception):
    """Spark did not start: the driver's JVM exited before pyspark could reach it (no
    Java, a bad JAVA_HOME, a master URL Spark refuses; ``jvm_exited``), or its context
    failed to start (a standalone master that never answered, a setting it refuses).
    ``reason`` is the JVM's own words where they were kept (``cli.spark_log``), else
    pyspark's."""

    def __init__(self, reason: str, jvm_exited: bool) -> None:
        super().__init__(f"Spark did not start: {reason}")
        self.reason = reason
        self.jvm_exited = jvm_exited


def reported(task: Callable[P, R]) -> Callable[P, R]:
    """``task``, raising any error as a ``TaskError`` the driver can read back."""

    @functools.wraps(task)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return task(*args, **kwargs)
        except Exception as exc:
            kind = type(exc)
            line = json.dumps(
                {"module": kind.__module__, "name": kind.__qualname__, "message": str(exc)}
            )
            raise TaskError(MARKER + line) from exc

    return run


def task_failure(error: BaseException) -> SparkTaskFailed | None:
    """The task error that made ``collect`` raise ``error``, or None if no task's marked
    line is in it (the driver's own failure: a lost executor, a refused submission)."""
    found = _MARKED.findall(str(error))
    if not found:
        return None
    try:
        told = json.loads(found[-1])
        module, name, message = str(told["module"]), str(told["name"]), str(told["message"])
    except (ValueError, KeyError, TypeError):
        return None
    raised_as = _our_class(module, name)
    if raised_as is None:
        message = f"{name}: {message}" if message else name
    return SparkTaskFailed(message, raised_as)


def _our_class(module: str, name: str) -> type[BaseException] | None:
    """The exception class ``module.name`` if this package defines it."""
    if module != "compactor" and not module.startswith("compactor."):
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None
