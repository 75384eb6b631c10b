"""compactor compact [--once | --until-idle | --full] [--key-buffer-bytes B] [--json]"""

from __future__ import annotations

import argparse
import json

from compactor.catalog.garbage import DEFAULT_GRACE_MS, DEFAULT_HISTORY_RETENTION_MS
from compactor.cli.codec_options import add_codec_options, level_codecs
from compactor.cli.context import Context, non_negative_int
from compactor.cli.key_buffer import add_key_buffer_option
from compactor.cli.planner_options import add_planner_options, planner_config
from compactor.cli.progress import Progress
from compactor.worker.compactor import Compactor
from compactor.worker.stats import JobProgress, JobReport


def job_summary(r: JobReport) -> str:
    s = r.stats
    gets = ",".join(str(f.gets) for f in r.inputs)
    state = "committed" if r.committed else r.note
    if r.output_level == 0:  # a drop job
        return (
            f"{r.rule}: {len(r.inputs)} files dropped unread (every record past retention.ms); "
            f"records {s.records_in:,} -> 0; bytes {r.bytes_in:,} -> 0; "
            f"GETs per input [{gets}]; {state}"
        )
    return (
        f"{r.rule}: {len(r.inputs)} files -> L{r.output_level} {len(r.outputs)} files; "
        f"records {s.records_in:,} -> {s.records_out:,}; bytes {r.bytes_in:,} -> {r.bytes_out:,}; "
        f"windows {s.windows}; GETs per input [{gets}]; {r.duration_s:.2f} s "
        f"({r.records_per_s:,.0f} records/s); {state}"
    )


def progress_line(p: JobProgress) -> str:
    return (
        f"{p.rule} {p.job_id}: {p.fraction:.0%} of {p.records_total:,} records, "
        f"{p.records_out:,} kept, {p.partitions:,} partitions, "
        f"{p.records_per_s:,.0f} records/s"
    )


def run(ctx: Context, args: argparse.Namespace) -> int:
    config = planner_config(args)
    compactor = Compactor(
        ctx.store,
        key_buffer_bytes=args.key_buffer_bytes,
        codecs=level_codecs(args),
        grace_ms=args.grace_ms,
        history_retention_ms=args.history_retention_ms,
    )
    progress = Progress()  # on stderr, and only when it is a terminal

    def on_report(r: JobReport) -> None:
        progress.done()
        if not args.json:
            print(job_summary(r))

    try:
        reports = compactor.run_planned(
            ctx.now_ms,
            config,
            full=args.full,
            until_idle=args.until_idle,
            on_job=lambda job: progress.update(
                f"{job.rule} {job.id}: {len(job.inputs)} files", force=True
            ),
            on_progress=lambda p: progress.update(progress_line(p), force=True),
            on_report=on_report,
        )
    finally:
        progress.done()
    deleted = compactor.collect_garbage(ctx.now_ms)
    if args.json:
        print(
            json.dumps(
                {
                    "jobs": [r.to_json() for r in reports],
                    "deleted": deleted,
                    "requests": ctx.requests_sent(),
                }
            )
        )
    elif not reports:
        print("nothing to compact")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("compact", help="run compaction jobs", parents=[common])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="run one job (the default)")
    mode.add_argument("--until-idle", action="store_true", help="run jobs until none is due")
    mode.add_argument(
        "--full", action="store_true", help="every live file into the top level, deduplicated"
    )
    add_key_buffer_option(p)
    p.add_argument(
        "--grace-ms",
        type=non_negative_int,
        default=DEFAULT_GRACE_MS,
        help="how long replaced files stay readable before deletion",
    )
    p.add_argument(
        "--history-retention-ms",
        type=non_negative_int,
        default=DEFAULT_HISTORY_RETENTION_MS,
        help="catalog.history.retention.ms: how long commits stay in `compactor history` "
        "(default 7 days; never less than the grace period)",
    )
    add_codec_options(p)
    add_planner_options(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="every job's report as one JSON document, with the S3 requests the command sent "
        "by operation",
    )
    p.set_defaults(run=run, existing_store=True)
