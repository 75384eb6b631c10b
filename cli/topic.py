"""compactor topic create|describe"""

from __future__ import annotations

import argparse
import json

from compactor.catalog import CommitRecord, TopicConfig
from compactor.catalog.changes import create_topic
from compactor.cli.context import Context, UsageError, positive_int


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config takes KEY=VALUE, got {pair!r}")
        settings[key] = value
    return settings


def create(ctx: Context, args: argparse.Namespace) -> int:
    config = TopicConfig.parse(parse_settings(args.config))
    ctx.catalog.commit(
        lambda s: create_topic(s, args.name, args.partitions, config),
        CommitRecord("topic", {"topic": args.name, "partitions": args.partitions}),
    )
    print(json.dumps({"created": args.name, "partitions": args.partitions}))
    return 0


def describe(ctx: Context, args: argparse.Namespace) -> int:
    snap = ctx.catalog.snapshot()
    topic = snap.topics.get(args.name)
    if topic is None:
        raise UsageError(f"unknown topic {args.name!r}")
    files: dict[int, int] = {}
    records: dict[int, int] = {}
    for live in snap.files:
        summary = live.topic(topic.name)
        if summary is None:
            continue
        for section in ctx.catalog.sections(live):
            if section.topic == topic.name:
                files[section.partition] = files.get(section.partition, 0) + 1
                records[section.partition] = (
                    records.get(section.partition, 0) + section.record_count
                )
    partitions = [
        {
            "partition": p,
            "next_offset": snap.next_offsets.get((topic.name, p), 0),
            "files": files.get(p, 0),
            "records": records.get(p, 0),
        }
        for p in range(topic.partitions)
    ]
    out = {"name": topic.name, "partitions": topic.partitions, "config": topic.config.to_json()}
    out["partition_state"] = partitions
    print(json.dumps(out, indent=2))
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    topic = sub.add_parser("topic", help="create or describe topics", parents=[common])
    actions = topic.add_subparsers(dest="topic_command", required=True, metavar="create|describe")
    c = actions.add_parser("create", help="create a topic", parents=[common])
    c.add_argument("name", help="the topic's name")
    c.add_argument(
        "--partitions", type=positive_int, required=True, help="how many partitions it has"
    )
    c.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka topic config, e.g. cleanup.policy=compact (repeatable)",
    )
    c.set_defaults(run=create)
    d = actions.add_parser("describe", help="print a topic as JSON", parents=[common])
    d.add_argument("name", help="the topic's name")
    d.set_defaults(run=describe)
