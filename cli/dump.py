"""compactor dump --topic T --partition P [--from-offset O | --from-timestamp T]

From an offset or a time, a file with an offset index costs one GET of the index and one
ranged GET of its data (``catalog.partition_reader``)."""

from __future__ import annotations

import argparse
import sys

from compactor.catalog.partition_reader import read_partition
from compactor.cli.context import Context, UsageError, integer, non_negative_int, unknown_topic
from compactor.fileformat import batch_to_records
from compactor.ingest.jsonl import format_record


def run(ctx: Context, args: argparse.Namespace) -> int:
    snap = ctx.catalog.snapshot()
    topic = snap.topics.get(args.topic)
    if topic is None:
        raise unknown_topic(args.topic, ctx.store, snap.topics)
    if not 0 <= args.partition < topic.partitions:
        raise UsageError(
            f"topic {args.topic!r} has partitions 0..{topic.partitions - 1}, not {args.partition}"
        )
    out = sys.stdout
    batches = read_partition(
        ctx.catalog,
        args.topic,
        args.partition,
        from_offset=args.from_offset,
        from_timestamp=args.from_timestamp,
    )
    for batch in batches:
        out.writelines(
            format_record(args.topic, args.partition, r) + "\n" for r in batch_to_records(batch)
        )
    out.flush()
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("dump", help="print a partition's records as JSON Lines", parents=[common])
    p.add_argument("--topic", required=True, help="the topic to print")
    p.add_argument("--partition", type=integer, required=True, help="its partition to print")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-offset",
        type=non_negative_int,
        default=None,
        help="from the next present offset >= O",
    )
    start.add_argument(
        "--from-timestamp",
        type=integer,
        default=None,
        metavar="T",
        help="from the first record whose timestamp >= T (ms), as offsetsForTimes",
    )
    p.set_defaults(run=run)
