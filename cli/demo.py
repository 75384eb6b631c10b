"""compactor demo: a synthetic agents' workload through the store, checked end to end.

Starts an embedded S3 endpoint on loopback unless --store is given, creates topics
(compacted under each strategy, and one delete-policy), ingests records shaped like
agents' traffic (many partitions per L0 file, UUID keys with skewed updates,
tombstones), compacts until idle and then runs the daily full compaction, checks that
every partition's materialized view is unchanged and the store verifies, and reports.
"""

from __future__ import annotations

import argparse
import functools
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

from compactor.catalog import TopicConfig
from compactor.catalog.changes import create_topic
from compactor.catalog.verify import verify_store
from compactor.cli.codec_options import add_codec_option, add_codec_options, level_codecs
from compactor.cli.compact import progress_line
from compactor.cli.context import Context, UsageError, positive_int
from compactor.cli.embedded_s3 import embedded_s3
from compactor.cli.key_buffer import add_key_buffer_option
from compactor.cli.progress import Progress
from compactor.cli.stats import stats_json
from compactor.ingest.agent import L0Ingest
from compactor.ingest.workload import Workload
from compactor.planner.codecs import DEFAULT_CODECS
from compactor.worker.compactor import Compactor
from compactor.worker.view import store_views

DEMO_BUCKET = "compactor-demo"
TOPICS: tuple[tuple[str, int, dict[str, str]], ...] = (
    ("accounts", 16, {"cleanup.policy": "compact"}),
    ("prices", 8, {"cleanup.policy": "compact", "compaction.strategy": "timestamp"}),
    (
        "inventory",
        8,
        {
            "cleanup.policy": "compact",
            "compaction.strategy": "header",
            "compaction.strategy.header": "version",
        },
    ),
    ("clicks", 8, {"cleanup.policy": "delete"}),
)


@contextmanager
def _demo_context(ctx: Context, args: argparse.Namespace) -> Iterator[Context]:
    if args.store:
        yield ctx
        return
    with embedded_s3(DEMO_BUCKET) as endpoint:
        demo = Context(f"s3://{DEMO_BUCKET}", endpoint, ctx.now_ms)
        try:
            yield demo
        finally:
            demo.close()


def agent_shares(records: int, agents: int) -> Iterator[int]:
    """How many of ``records`` each of ``agents`` writes: all of them, the remainder one
    each to the first agents (before, ``records // agents`` each, and the rest not
    written though the summary counted them)."""
    share, extra = divmod(records, agents)
    return (share + (agent < extra) for agent in range(agents))


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.agents > args.records:  # an agent of no records would commit empty ingests
        raise UsageError(
            "--agents must be at most --records (each agent writes at least one record), "
            f"got {args.agents} agents for {args.records} records"
        )
    progress = Progress()
    started = time.monotonic()
    with _demo_context(ctx, args) as demo:
        where = demo.store_url + (f" at {demo.endpoint_url}" if demo.endpoint_url else "")
        print(f"store: {where}")
        snap = demo.catalog.snapshot()
        for name, partitions, settings in TOPICS:
            if name not in snap.topics:
                demo.catalog.commit(
                    functools.partial(
                        create_topic,
                        name=name,
                        partitions=partitions,
                        config=TopicConfig.parse(settings),
                    )
                )
        first = 0
        for agent, records in enumerate(agent_shares(args.records, args.agents)):
            workload = Workload(
                topics=tuple((name, partitions) for name, partitions, _ in TOPICS),
                records=records,
                keys_per_partition=args.keys_per_partition,
                seed=agent,
                start_ms=demo.now_ms - args.records + first,
                versioned_topics=frozenset({"inventory"}),
            )
            ingest = L0Ingest(
                demo.store,
                demo.catalog,
                now_ms=demo.now_ms,
                max_file_bytes=args.max_file_bytes,
                compression=args.compression,
            )
            try:
                for n, record in enumerate(workload.generate(), start=1):
                    ingest.add(record)
                    if n % 5000 == 0:
                        progress.update(f"agent {agent + 1}/{args.agents}: {n:,} records")
                ingest.commit()
            except BaseException:
                ingest.abandon()
                raise
            first += records
        progress.done()
        ingest_s = time.monotonic() - started
        before_snap = demo.catalog.snapshot()
        before_stats = stats_json(before_snap)
        progress.update("reading every partition's materialized view", force=True)
        views_before = store_views(demo.catalog, before_snap)
        compactor = Compactor(
            demo.store, key_buffer_bytes=args.key_buffer_bytes, codecs=level_codecs(args)
        )
        reports = []
        compact_started = time.monotonic()
        for full in (False, True):
            reports += compactor.run_planned(
                demo.now_ms,
                full=full,
                until_idle=True,
                on_job=lambda job: progress.update(
                    f"compacting: {job.rule}, {len(job.inputs)} files", force=True
                ),
                on_progress=lambda p: progress.update(f"compacting: {progress_line(p)}"),
            )
        compact_s = time.monotonic() - compact_started
        after_snap = demo.catalog.snapshot()
        progress.update("verifying", force=True)
        report = verify_store(demo.catalog, after_snap)
        views_after = store_views(demo.catalog, after_snap)
        progress.done()
        after_stats = stats_json(after_snap)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"ingested {args.records:,} records from {args.agents} agents in {ingest_s:.1f} s")
    print("files and bytes per level, before -> after compaction:")
    for level in before_stats["levels"]:
        b, a = before_stats["levels"][level], after_stats["levels"][level]
        if b["files"] or a["files"]:
            print(
                f"  L{level}: {b['files']:>5,} files {b['bytes']:>13,} B  ->  "
                f"{a['files']:>5,} files {a['bytes']:>13,} B"
            )
    for r in reports:
        s = r.stats
        gets = sorted({f.gets for f in r.inputs})
        print(
            f"job {r.rule}: {len(r.inputs)} files -> {len(r.outputs)}; records "
            f"{s.records_in:,} -> {s.records_out:,}; dropped {s.dropped}; tombstones kept "
            f"{s.tombstones_kept:,} removed {s.tombstones_removed:,}; windows {s.windows}; "
            f"GETs per input file {gets}; {r.records_per_s:,.0f} records/s"
        )
    records_in = sum(r.stats.records_in for r in reports)
    if compact_s > 0:
        print(
            f"compaction: {records_in:,} records in {compact_s:.1f} s "
            f"({records_in / compact_s:,.0f} records/s)"
        )
    same = views_before == views_after
    keys = sum(len(v) for v in views_after.values())
    print(
        f"materialized views: {'unchanged' if same else 'CHANGED'} "
        f"({len(views_after)} partitions, {keys:,} live keys)"
    )
    verdict = "OK" if report.ok else "FAILED: " + "; ".join(report.problems[:5])
    print(f"verify: {verdict}")
    whose = "" if args.store else ", the embedded S3 endpoint's included"
    print(
        f"peak memory: {peak_mib:,.0f} MiB (this process{whose}); "
        f"total {time.monotonic() - started:.1f} s"
    )
    return 0 if report.ok and same else 1


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("demo", help="run a synthetic workload end to end", parents=[common])
    p.add_argument(
        "--records", type=positive_int, default=200_000, help="records ingested (default 200,000)"
    )
    p.add_argument(
        "--agents", type=positive_int, default=4, help="ingest agents writing L0 files (default 4)"
    )
    p.add_argument(
        "--keys-per-partition",
        type=positive_int,
        default=2000,
        help="distinct keys a partition's records are drawn from (default 2,000)",
    )
    p.add_argument(
        "--max-file-bytes",
        type=positive_int,
        default=256 << 10,
        help="an L0 file's size at most (default 262,144)",
    )
    add_key_buffer_option(p)
    add_codec_option(
        p, "--compression", DEFAULT_CODECS.for_level(0), "the agents' L0 files (as ingest's)"
    )
    add_codec_options(p)
    p.set_defaults(run=run)
