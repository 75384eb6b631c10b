"""compactor spark compact [--master URL] [--until-idle | --full] [--max-concurrent-jobs N]
[--key-buffer-bytes B] [--json]

pyspark is imported only when this command runs (``spark.driver``)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from compactor.catalog.garbage import DEFAULT_GRACE_MS, collect_all_garbage
from compactor.cli.codec_options import add_codec_options
from compactor.cli.context import Context, UsageError, non_negative_int, positive_int
from compactor.cli.key_buffer import add_key_buffer_option
from compactor.cli.planner_options import add_planner_options, planner_config
from compactor.cli.spark_log import spark_log
from compactor.objectstore.request_tally import SENT, as_json, from_json, total
from compactor.worker.compactor import DEFAULT_KEY_BUFFER_BYTES

FAULT_ENV = "COMPACTOR_SPARK_INJECT_FAULT"


def compact(ctx: Context, args: argparse.Namespace) -> int:
    from compactor.spark.driver import SparkCompaction, compact_on_spark  # pyspark only now
    from compactor.spark.task import FAULTS, TaskSettings

    fault = os.environ.get(FAULT_ENV) or None
    if fault is not None and fault not in FAULTS:
        raise UsageError(f"{FAULT_ENV} must be one of {', '.join(FAULTS)}, got {fault!r}")
    settings = TaskSettings(
        store_url=ctx.store.url,  # absolute: executors may run elsewhere
        endpoint_url=getattr(ctx.store, "endpoint_url", None),  # as the driver resolved it
        key_buffer_bytes=args.key_buffer_bytes,
        now_ms=ctx.now_ms,
        lease_ms=args.lease_ms,
        inject_fault=fault,
        compression_top=args.compression_top,
        compression_below_top=args.compression_below_top,
    )
    run = SparkCompaction(
        settings,
        planner_config(args),
        until_idle=args.until_idle,
        full=args.full,
        max_concurrent_jobs=args.max_concurrent_jobs,
    )
    spark = _session(args)
    try:
        reports = compact_on_spark(spark, run, ctx.catalog)
    finally:
        spark.stop()
    deleted = collect_all_garbage(ctx.catalog, ctx.now_ms, args.grace_ms)
    if args.json:
        print(
            json.dumps({"jobs": reports, "deleted": deleted, "requests": _requests(ctx, reports)})
        )
    elif not reports:
        print("nothing to compact")
    else:
        for r in reports:
            print(_summary(r))
    return 0


def index(ctx: Context, args: argparse.Namespace) -> int:
    from compactor.spark.driver import index_on_spark  # pyspark only now
    from compactor.spark.task import TaskSettings

    settings = TaskSettings(
        store_url=ctx.store.url,
        endpoint_url=getattr(ctx.store, "endpoint_url", None),
        key_buffer_bytes=DEFAULT_KEY_BUFFER_BYTES,
        now_ms=ctx.now_ms,
        lease_ms=1,
    )
    spark = _session(args)
    try:
        reports = index_on_spark(spark, settings, ctx.catalog)
    finally:
        spark.stop()
    if args.json:
        print(json.dumps({"indexed": reports, "requests": _requests(ctx, reports)}))
    else:
        for r in reports:
            state = "written" if r["written"] else "already there"
            print(f"{r['index']}: {r['sections']} sections, {r['gets']} GET; {state}")
        print(f"{sum(r['written'] for r in reports)} indexes written")
    return 0


def _requests(ctx: Context, reports: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The requests the command sent: the driver's (planning, leases, garbage collection)
    and those each task reported. A failed attempt reports nothing, so what Spark's
    retries of a task sent before they failed is not in it."""
    tasks = (from_json(r.get("requests", {})) for r in reports)
    return as_json(total(SENT.since(ctx.sent_at_start), *tasks))


def _session(args: argparse.Namespace) -> Any:
    """The command's SparkSession, its JVM's log on ``--spark-log`` (``cli.spark_log``)."""
    from compactor.spark.driver import spark_session

    conf = dict(_spark_setting(item) for item in args.conf)
    with spark_log(args.spark_log, on_stderr=args.debug):
        return spark_session(args.master, conf)


def _spark_setting(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.startswith("spark."):
        raise UsageError(f"--conf takes spark.NAME=VALUE, got {item!r}")
    return name, value


def _summary(r: dict[str, Any]) -> str:
    state = "committed" if r.get("committed") else f"not committed: {r.get('note', '')}"
    if "inputs" not in r:
        return f"{r.get('rule')} {r.get('job_id')}: {state}"
    gets = ",".join(str(i["gets"]) for i in r["inputs"])
    return (
        f"{r['rule']}: {len(r['inputs'])} files -> L{r['output_level']} "
        f"{len(r['outputs'])} files; records {r['records_in']:,} -> {r['records_out']:,}; "
        f"bytes {r['bytes_in']:,} -> {r['bytes_out']:,}; GETs per input [{gets}]; "
        f"executor pid {r['executor']['pid']}; {state}"
    )


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("spark", help="compaction on a Spark cluster", parents=[common])
    actions = p.add_subparsers(dest="spark_command", required=True, metavar="compact|index")
    c = actions.add_parser(
        "compact", help="plan, lease, and run one Spark task per job", parents=[common]
    )
    _spark_options(c)
    mode = c.add_mutually_exclusive_group()
    mode.add_argument("--until-idle", action="store_true", help="plan again after each wave")
    mode.add_argument("--full", action="store_true", help="the full compaction, now")
    c.add_argument(
        "--max-concurrent-jobs",
        type=positive_int,
        default=None,
        help="at most N jobs' tasks at a time (default: the whole wave)",
    )
    add_key_buffer_option(c)
    c.add_argument(
        "--lease-ms",
        type=positive_int,
        default=30 * 60 * 1000,
        help="each job's lease, taken by the driver, renewed by its task at a third",
    )
    c.add_argument(
        "--grace-ms",
        type=non_negative_int,
        default=DEFAULT_GRACE_MS,
        help="how long replaced files (and abandoned uploads) stay before deletion",
    )
    add_codec_options(c)
    add_planner_options(c)
    c.add_argument("--json", action="store_true", help="every task's report as JSON")
    c.set_defaults(run=compact, existing_store=True)
    i = actions.add_parser(
        "index",
        help="write the offset index of every live file that lacks one, one task per file",
        parents=[common],
    )
    _spark_options(i)
    i.add_argument("--json", action="store_true", help="every task's report as JSON")
    i.set_defaults(run=index, existing_store=True)


def _spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])"
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="spark.NAME=VALUE",
        help="a Spark setting, as spark-submit --conf takes it (repeatable)",
    )
    p.add_argument(
        "--spark-log",
        default=None,
        metavar="FILE",
        help="append Spark's own log (its JVM's stderr) to FILE (default: kept off stderr "
        "and discarded; with --debug it stays on stderr and FILE is not written)",
    )
