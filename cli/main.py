"""The ``compactor`` command line: parse, run one command, and turn any failure into one
line on stderr, ``compactor: <message>``, and the exit status of its kind (cli.exit_codes,
README.md "Exit codes"). No traceback unless ``--debug`` (or COMPACTOR_DEBUG) asks for
one; it goes to stderr before that line, and the status stays the same."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from compactor.catalog import CatalogError, ConfigError
from compactor.cli.commands import COMMANDS, command_of
from compactor.cli.context import Context, UsageError
from compactor.cli.exit_codes import ExitCode
from compactor.fileformat import FormatError
from compactor.jobqueue.errors import QueueError
from compactor.objectstore import StoreError
from compactor.objectstore.secrets import masked
from compactor.spark.failures import SparkUnavailable
from compactor.worker.errors import WorkerError

FAILURES: tuple[tuple[type[Exception], ExitCode], ...] = (
    (UsageError, ExitCode.USAGE),
    (ConfigError, ExitCode.CONFIG),  # a CatalogError: first
    (CatalogError, ExitCode.CATALOG),
    (StoreError, ExitCode.STORE),
    (FormatError, ExitCode.FORMAT),
    (WorkerError, ExitCode.WORKER),
    (QueueError, ExitCode.QUEUE),
    (SparkUnavailable, ExitCode.SPARK),
)
"""Each error family a user can act on, and its exit status; anything else is a bug
(ExitCode.INTERNAL)."""


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Global options are accepted before or after the command; on the subcommands their
    # default is SUPPRESS so a value given before the command is not overwritten.
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--store",
        default=default,
        help="store URL: a directory (default ./compactor-data) or s3://bucket[/prefix] "
        "(env COMPACTOR_STORE)",
    )
    parser.add_argument(
        "--endpoint-url",
        default=default,
        help="S3 endpoint, e.g. http://localhost:9000 for MinIO (env AWS_ENDPOINT_URL)",
    )
    parser.add_argument(
        "--now-ms",
        default=default,
        help="the clock every time rule reads, in ms since the epoch (env COMPACTOR_NOW_MS)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="on failure, print the traceback before the one-line message (env COMPACTOR_DEBUG=1)",
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # "compactor: topic create: argument --partitions: ...", not "compactor: compactor ..."
        command = self.prog.removeprefix("compactor").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def command_modules(argv: Sequence[str] | None) -> list[str]:
    """The modules whose commands the parser of ``argv`` needs: only its command's
    (``cli.commands.command_of``), else every command's (a line to refuse, or
    ``--help``). The others are not imported: every command's modules together take about
    a tenth of a second, paid by every start."""
    command = command_of(sys.argv[1:] if argv is None else argv)
    return [COMMANDS[command]] if command else list(dict.fromkeys(COMMANDS.values()))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser, for ``argv`` (``command_modules``; None: this process's
    arguments, as ``parse_args`` reads them)."""
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    parser = _Parser(
        prog="compactor",
        description="Compaction for Kafka-style compacted topics stored in object storage.",
    )
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="command", parser_class=_Parser
    )
    for name in command_modules(argv):
        importlib.import_module(f"compactor.cli.{name}").register(sub, common)
    return parser


class Terminated(BaseException):
    """SIGTERM arrived (an orchestrator stopping the worker). A BaseException, like
    KeyboardInterrupt, so that it unwinds everything: a running job aborts its multipart
    uploads and stops its threads, and the catalog is left as it was."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    # One-shot: a second SIGTERM (a supervisor repeating itself) must not interrupt the
    # unwinding the first one started, such as aborting a multipart upload.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While the command runs, the first SIGTERM raises Terminated in the main thread
    (unless something else, such as an embedding program, already handles SIGTERM)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _terminate:  # not fired: put back the default
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    debug = os.environ.get("COMPACTOR_DEBUG", "").lower() not in ("", "0", "false", "no")
    try:
        with _sigterm_unwinds():
            args = build_parser(argv).parse_args(argv)
            debug = args.debug = debug or args.debug  # the spark commands read it too
            ctx = Context.from_args(args)
            try:
                return int(args.run(ctx, args))
            finally:
                ctx.close()
    except BrokenPipeError:
        # Nothing to say to a reader that has gone; and Python's own flush of stdout at
        # exit must not fail again and print.
        with contextlib.suppress(OSError, ValueError):
            stdout = sys.stdout.fileno()  # not a file in-process (tests): nothing to do
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout)
        return int(ExitCode.BROKEN_PIPE)
    except KeyboardInterrupt as exc:
        return _failed(exc, "interrupted", ExitCode.INTERRUPTED, debug)
    except Terminated as exc:
        return _failed(exc, "terminated", ExitCode.TERMINATED, debug)
    except Exception as exc:
        code = exit_code(exc)
        return _failed(exc, failure_message(exc, code), code, debug)


def exit_code(exc: BaseException) -> ExitCode:
    """The exit status of a command that raised ``exc``. An error that stands for one
    raised elsewhere (``raised_as``: a Spark task's, which reaches the driver as text,
    ``spark.failures``) exits as that one would have; None there is a bug."""
    kind = getattr(exc, "raised_as", type(exc))
    for family, code in FAILURES:
        if kind is not None and issubclass(kind, family):
            return code
    return ExitCode.INTERNAL


def failure_message(exc: BaseException, code: ExitCode) -> str:
    """What the user reads after ``compactor: ``: the error's own message (each family's
    names what failed and where), or for a bug, its type and a pointer to ``--debug``."""
    if code is not ExitCode.INTERNAL:
        return str(exc) or type(exc).__name__
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"internal error: {what} (a bug; run again with --debug for the traceback)"


def _failed(exc: BaseException, message: str, code: ExitCode, debug: bool) -> int:
    if debug:
        print(masked("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"compactor: {masked(line)}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
