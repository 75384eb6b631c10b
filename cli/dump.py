"""compactor dump --topic T --partition P [--from-offset O]"""

from __future__ import annotations

import argparse
import sys

from compactor.cli.context import Context, UsageError
from compactor.fileformat import batch_to_records, read_section
from compactor.ingest.jsonl import format_record


def run(ctx: Context, args: argparse.Namespace) -> int:
    snap = ctx.catalog.snapshot()
    topic = snap.topics.get(args.topic)
    if topic is None:
        raise UsageError(f"unknown topic {args.topic!r}")
    if not 0 <= args.partition < topic.partitions:
        raise UsageError(
            f"topic {args.topic!r} has partitions 0..{topic.partitions - 1}, not {args.partition}"
        )
    from_offset = args.from_offset
    out = sys.stdout
    for live in snap.files_holding(args.topic, args.partition):
        section = ctx.catalog.section(live, args.topic, args.partition)
        if from_offset is not None and section.last_offset < from_offset:
            continue
        key = live.key

        def read_range(start: int, end: int, key: str = key) -> bytes:
            return ctx.store.get_range(key, start, end)

        for batch in read_section(read_range, section, object_name=key, from_offset=from_offset):
            out.writelines(
                format_record(args.topic, args.partition, r) + "\n" for r in batch_to_records(batch)
            )
    out.flush()
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("dump", help="print a partition's records as JSON Lines", parents=[common])
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--from-offset", type=int, default=None)
    p.set_defaults(run=run)
