"""compactor schedule --queue-url URL [--once | --interval-s S] [--set NAME=VALUE ...]
[--metrics-port P] [--json]"""

from __future__ import annotations

import argparse
import json
import time

from compactor.catalog.garbage import (
    DEFAULT_GRACE_MS,
    DEFAULT_HISTORY_RETENTION_MS,
    collect_all_garbage,
)
from compactor.cli.context import Context, UsageError, integer, non_negative_int, number
from compactor.cli.metrics_port import add_metrics_port_option, serve_metrics
from compactor.cli.planner_options import add_planner_options, planner_config
from compactor.jobqueue.events import FORMATS, EventLog
from compactor.jobqueue.metrics import SchedulerMetrics
from compactor.jobqueue.scheduler import Pass, Published, Scheduler
from compactor.jobqueue.sqs import JobQueue


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.interval_s is not None and not args.interval_s > 0:
        raise UsageError(f"--interval-s must be positive, got {args.interval_s}")
    if args.lease_ms is not None and args.lease_ms < 1:
        raise UsageError(f"--lease-ms must be at least 1, got {args.lease_ms}")
    config = planner_config(args)
    log = EventLog(args.log_format, source="scheduler")
    metrics = SchedulerMetrics()
    serve_metrics(metrics, args.metrics_port, log)  # first: a port in use fails before any work
    queue = JobQueue(args.queue_url)
    scheduler = Scheduler(ctx.catalog, queue, config, lease_ms=args.lease_ms, metrics=metrics)
    try:
        while True:
            started = time.monotonic()
            now_ms = ctx.time_rules_now_ms()
            try:
                done = scheduler.publish_due(now_ms)
            except Exception as e:  # noqa: BLE001 (looping: the next pass tries again)
                if args.interval_s is None:
                    raise
                log("pass_failed", error=f"{type(e).__name__}: {e}")
                done = Pass([], [])
            for unsent in done.unsent:
                log(
                    "job_unsent",
                    job=unsent.job.id,
                    inputs=len(unsent.job.inputs),
                    error=unsent.error,
                )
            deleted = _collect(ctx, args, log, now_ms, metrics)
            metrics.pass_ended(done, now_ms, time.monotonic() - started)
            _report(args, log, done.published, deleted)
            if args.interval_s is None:
                return 0
            time.sleep(max(0.0, args.interval_s - (time.monotonic() - started)))
    finally:
        queue.close()


def _collect(
    ctx: Context, args: argparse.Namespace, log: EventLog, now_ms: int, metrics: SchedulerMetrics
) -> list[str]:
    try:
        deleted = collect_all_garbage(ctx.catalog, now_ms, args.grace_ms, args.history_retention_ms)
    except Exception as e:  # noqa: BLE001 (garbage waits for the next pass)
        metrics.collected(None)
        if args.interval_s is None:
            raise
        log("garbage_collection_failed", error=f"{type(e).__name__}: {e}")
        return []
    metrics.collected(len(deleted))
    return deleted


def _report(
    args: argparse.Namespace, log: EventLog, published: list[Published], deleted: list[str]
) -> None:
    if args.json:
        jobs = [{**p.job.to_json(), "message_id": p.message_id} for p in published]
        print(json.dumps({"jobs": jobs, "deleted": deleted}), flush=True)
    for p in published:
        log(
            "job_published",
            job=p.job.id,
            rule=p.job.rule,
            inputs=len(p.job.inputs),
            bytes=p.job.input_bytes,
            message_id=p.message_id,
            lease_expires_ms=p.lease_expires_ms,
        )
    if not args.json:
        print(f"published {len(published)} jobs; deleted {len(deleted)} objects", flush=True)


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "schedule",
        help="plan, lease and publish due jobs to an SQS queue",
        parents=[common],
    )
    p.add_argument("--queue-url", required=True, help="the SQS queue jobs are sent to")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--once", action="store_true", help="publish what is due now and exit (the default)"
    )
    mode.add_argument(
        "--interval-s", type=number, default=None, help="plan and publish every S seconds"
    )
    p.add_argument(
        "--lease-ms",
        type=integer,
        default=None,
        help="how long a published job's lease lasts until a worker renews it "
        "(default: the queue's visibility timeout)",
    )
    p.add_argument(
        "--grace-ms",
        type=non_negative_int,
        default=DEFAULT_GRACE_MS,
        help="how long replaced files (and abandoned uploads) stay before deletion",
    )
    p.add_argument(
        "--history-retention-ms",
        type=non_negative_int,
        default=DEFAULT_HISTORY_RETENTION_MS,
        help="catalog.history.retention.ms (default 7 days)",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="event log lines on stderr: text, or one JSON object a line (default text)",
    )
    add_metrics_port_option(p)
    add_planner_options(p)
    p.add_argument("--json", action="store_true", help="print the jobs published, as JSON")
    p.set_defaults(run=run, existing_store=True)
