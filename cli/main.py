"""The ``compactor`` command line: parse, run one command, turn user mistakes into one
line on stderr and a non-zero exit (2 for usage, 1 for everything else)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from compactor.catalog import CatalogError
from compactor.cli import (
    compact,
    demo,
    dump,
    history_cmd,
    ingest_cmd,
    plan_cmd,
    simulate,
    stats,
    topic,
    verify_cmd,
)
from compactor.cli.context import Context, UsageError
from compactor.fileformat import FormatError
from compactor.objectstore import StoreError


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
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
    for module in (
        topic,
        ingest_cmd,
        dump,
        verify_cmd,
        stats,
        plan_cmd,
        compact,
        history_cmd,
        simulate,
        demo,
    ):
        module.register(sub, common)
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
    try:
        with _sigterm_unwinds():
            args = build_parser().parse_args(argv)
            ctx = Context.from_args(args)
            try:
                return int(args.run(ctx, args))
            finally:
                ctx.close()
    except UsageError as exc:
        print(f"compactor: {exc}", file=sys.stderr)
        return 2
    except (CatalogError, StoreError, FormatError) as exc:
        print(f"compactor: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compactor: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("compactor: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
