"""compactor worker --queue-url URL [--key-buffer-bytes B] [--visibility-timeout-s S]
[--exit-when-idle S] [--max-jobs N] [--max-bytes-per-second R] [--metrics-port P]
[--quarantine-after N] [--log-format text|json]"""

from __future__ import annotations

import argparse

from compactor.cli.codec_options import add_codec_options, level_codecs
from compactor.cli.context import Context, UsageError, integer, number, positive_int
from compactor.cli.key_buffer import add_key_buffer_option
from compactor.cli.metrics_port import add_metrics_port_option, serve_metrics
from compactor.jobqueue.consumer import QueueWorker, WorkerSettings
from compactor.jobqueue.events import FORMATS, EventLog
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.jobqueue.sqs import JobQueue
from compactor.worker.compactor import Compactor

MAX_VISIBILITY_S = 12 * 60 * 60
"""SQS's ceiling on a visibility timeout."""


def run(ctx: Context, args: argparse.Namespace) -> int:
    settings = _settings(args)
    log = EventLog(args.log_format, source="worker")
    metrics = WorkerMetrics()
    serve_metrics(metrics, args.metrics_port, log)  # first: a port in use fails before any work
    store = ctx.store
    compactor = Compactor(store, key_buffer_bytes=args.key_buffer_bytes, codecs=level_codecs(args))
    # Read once before the queue is asked, so a missing bucket, an unreachable endpoint or
    # a corrupt catalog fails here; by the Compactor's reader, which keeps the state.
    compactor.catalog.snapshot()
    queue = JobQueue(args.queue_url)
    try:
        queue_timeout_s = queue.visibility_timeout_s()  # the queue answers, before anything
        if queue_timeout_s != settings.visibility_timeout_s:
            log(
                "visibility_timeout_differs",
                queue_s=queue_timeout_s,
                worker_s=settings.visibility_timeout_s,
                note="a received job stays invisible for the worker's; a job waiting in the "
                "queue keeps its scheduler lease for the queue's, and is published again "
                "(a stale duplicate) if it waits longer",
            )
        worker = QueueWorker(
            compactor, queue, settings, metrics=metrics, log=log, now_ms=ctx.time_rules_now_ms
        )
        try:
            worker.serve()
        finally:
            log("worker_stopped", **worker.outcomes)
    finally:
        queue.close()
    return 0


def _settings(args: argparse.Namespace) -> WorkerSettings:
    if not 1 <= args.visibility_timeout_s <= MAX_VISIBILITY_S:
        raise UsageError(
            f"--visibility-timeout-s must be in 1..{MAX_VISIBILITY_S}, "
            f"got {args.visibility_timeout_s}"
        )
    if args.exit_when_idle is not None and args.exit_when_idle < 0:
        raise UsageError(f"--exit-when-idle must not be negative, got {args.exit_when_idle}")
    if args.max_bytes_per_second is not None and not args.max_bytes_per_second > 0:
        raise UsageError(
            f"--max-bytes-per-second must be positive, got {args.max_bytes_per_second}"
        )
    return WorkerSettings(
        visibility_timeout_s=args.visibility_timeout_s,
        exit_when_idle_s=args.exit_when_idle,
        max_jobs=args.max_jobs,
        max_bytes_per_second=args.max_bytes_per_second,
        quarantine_after=args.quarantine_after,
    )


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("worker", help="run jobs from an SQS queue, one at a time", parents=[common])
    p.add_argument("--queue-url", required=True, help="the SQS queue jobs come from")
    add_key_buffer_option(p)
    p.add_argument(
        "--visibility-timeout-s",
        type=integer,
        default=300,
        help="how long a received job stays invisible to other workers, renewed at a third "
        "of it while the job runs; also the job lease's duration (default 300)",
    )
    p.add_argument(
        "--exit-when-idle",
        type=number,
        default=None,
        metavar="S",
        help="exit 0 after S seconds without a message",
    )
    p.add_argument("--max-jobs", type=positive_int, default=None, help="exit after N messages")
    p.add_argument(
        "--max-bytes-per-second",
        type=number,
        default=None,
        metavar="R",
        help="throttle the job's reads to R bytes/s (log.cleaner.io.max.bytes.per.second)",
    )
    add_metrics_port_option(p)
    p.add_argument(
        "--quarantine-after",
        type=positive_int,
        default=None,
        metavar="N",
        help="set a job's input aside (as 'catalog quarantine' does) when the job fails on "
        "its damage at the N-th delivery of its message and a read of the whole file "
        "confirms the damage; the message is then deleted. Keep N below the queue's "
        "redrive maxReceiveCount (default: never)",
    )
    add_codec_options(p)
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="event log lines on stderr: text, or one JSON object a line (default text)",
    )
    p.set_defaults(run=run, existing_store=True)
