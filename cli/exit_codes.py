"""The ``compactor`` command's exit statuses, one per kind of failure (README.md, "Exit
codes"). ``cli.main`` maps each error family to its status."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    VERIFY_FAILED = 1
    """``verify`` ran and found a broken invariant (its report names each problem)."""
    USAGE = 2
    """The command line: an unknown command or option, a malformed argument, a topic
    that does not exist, a bad input line (UsageError, argparse)."""
    CONFIG = 3
    """A topic config or planner setting that the rules reject (ConfigError)."""
    CATALOG = 4
    """The catalog: a commit whose precondition no longer holds, a corrupt catalog
    (CatalogError)."""
    STORE = 5
    """The object store: unreachable, access denied, an object missing (StoreError)."""
    FORMAT = 6
    """A data file's bytes are not valid: truncated or corrupt (FormatError: object and
    byte position)."""
    WORKER = 7
    """A compaction job found one of its own invariants broken (WorkerError)."""
    QUEUE = 8
    """The job queue: unreachable, missing, or refusing a request (QueueError)."""
    SPARK = 9
    """Spark did not start: no Java, a bad JAVA_HOME, a master URL it refuses
    (SparkUnavailable)."""
    INTERNAL = 70
    """An unexpected error: a bug (EX_SOFTWARE); ``--debug`` shows the traceback."""
    INTERRUPTED = 130
    """Ctrl-C (128 + SIGINT)."""
    BROKEN_PIPE = 141
    """stdout's reader went away, as in ``compactor dump ... | head`` (128 + SIGPIPE)."""
    TERMINATED = 143
    """SIGTERM (128 + SIGTERM)."""
