"""compactor demo: a synthetic agents' workload through the store, checked end to end.

Starts an embedded S3 endpoint on loopback unless --store is given, creates topics
(compacted under each strategy, and one delete-policy), ingests records shaped like
agents' traffic (many partitions per L0 file, UUID keys with skewed updates,
tombstones), verifies the store and reads every partition back, then reports.
"""

from __future__ import annotations

import argparse
import functools
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

from catalog import Snapshot, TopicConfig
from catalog.changes import create_topic
from catalog.verify import verify_store
from cli.context import Context, positive_int
from cli.embedded_s3 import embedded_s3
from cli.progress import Progress
from cli.stats import stats_json
from fileformat import read_section
from ingest.agent import L0Ingest
from ingest.workload import Workload

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


def _materialized_view(
    ctx: Context, snap: Snapshot
) -> dict[tuple[str, int], dict[bytes | None, bytes | None]]:
    """Latest value per key of every partition, read in offset order (null keys apart)."""
    views: dict[tuple[str, int], dict[bytes | None, bytes | None]] = {}
    for tp in snap.partitions():
        view: dict[bytes | None, bytes | None] = {}
        for live, section in snap.sections_of(*tp):

            def read_range(a: int, b: int, key: str = live.key) -> bytes:
                return ctx.store.get_range(key, a, b)

            for batch in read_section(read_range, section, object_name=live.key):
                view.update(
                    zip(
                        batch.column("key").to_pylist(),
                        batch.column("value").to_pylist(),
                        strict=True,
                    )
                )
        views[tp] = view
    return views


def run(ctx: Context, args: argparse.Namespace) -> int:
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
        records_per_agent = args.records // args.agents
        for agent in range(args.agents):
            workload = Workload(
                topics=tuple((name, partitions) for name, partitions, _ in TOPICS),
                records=records_per_agent,
                keys_per_partition=args.keys_per_partition,
                seed=agent,
                start_ms=demo.now_ms - args.records + agent * records_per_agent,
                versioned_topics=frozenset({"inventory"}),
            )
            ingest = L0Ingest(
                demo.store, demo.catalog, now_ms=demo.now_ms, max_file_bytes=args.max_file_bytes
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
        progress.done()
        ingest_s = time.monotonic() - started
        snap = demo.catalog.snapshot()
        report = verify_store(demo.store, snap, lambda f: progress.update(f"verifying {f.key}"))
        progress.done()
        views = _materialized_view(demo, snap)
        stats = stats_json(snap)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = sum(f.record_count for f in snap.files)
    print(
        f"ingested {args.records:,} records from {args.agents} agents in {ingest_s:.1f} s "
        f"({args.records / ingest_s:,.0f} records/s)"
    )
    print("files and bytes per level:")
    for level, entry in stats["levels"].items():
        if entry["files"]:
            print(f"  L{level}: {entry['files']:>6,} files {entry['bytes']:>14,} bytes")
    keys = sum(len(v) for v in views.values())
    print(f"live records: {total:,}; distinct keys across partitions: {keys:,}")
    verdict = "OK" if report.ok else "FAILED: " + "; ".join(report.problems[:5])
    print(f"verify: {verdict}")
    print(f"peak memory: {peak_mib:,.0f} MiB; total {time.monotonic() - started:.1f} s")
    return 0 if report.ok else 1


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("demo", help="run a synthetic workload end to end", parents=[common])
    p.add_argument("--records", type=positive_int, default=200_000)
    p.add_argument("--agents", type=positive_int, default=4)
    p.add_argument("--keys-per-partition", type=positive_int, default=2000)
    p.add_argument("--max-file-bytes", type=positive_int, default=1 << 20)
    p.set_defaults(run=run)
