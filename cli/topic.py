"""compactor topic create|describe"""

from __future__ import annotations

import argparse
import json
import re

from compactor.catalog import CommitRecord, TopicConfig, topic_names
from compactor.catalog.changes import MAX_PARTITIONS, create_topic
from compactor.catalog.numbers import shown
from compactor.cli.context import Context, UsageError, integer_in, unknown_topic

TOPIC_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{topic_names.LONGEST}}}")
"""Kafka's rule for a topic name (``Topic.validate``), applied when a topic is created;
a catalog holding another name still loads."""


def topic_name(text: str) -> str:
    """An argparse type: a name Kafka would accept for a new topic."""
    if not TOPIC_NAME.fullmatch(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a topic name: as in Kafka, 1 to 249 ASCII letters, digits, "
            "'.', '_' or '-', and not '.' or '..'"
        )
    return text


def partition_count(text: str) -> int:
    """An argparse type: a topic's partition count, 1 to ``MAX_PARTITIONS``."""
    return integer_in(text, 1, MAX_PARTITIONS)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """The ``--config KEY=VALUE`` options as a dict; a key given twice is a usage error
    (even with the same value: the later one would silently win)."""
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config takes KEY=VALUE, got {pair!r}")
        if key in settings:
            raise UsageError(
                f"--config {key} given twice ({shown(settings[key])!r}, then {shown(value)!r}): "
                "give each topic config once"
            )
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
        raise unknown_topic(args.name, ctx.store, snap.topics)
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
    c.add_argument(
        "name", type=topic_name, help="the topic's name (Kafka's rule: [A-Za-z0-9._-]{1,249})"
    )
    c.add_argument(
        "--partitions",
        type=partition_count,
        required=True,
        help=f"how many partitions it has (1 to {MAX_PARTITIONS})",
    )
    c.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka topic config, e.g. cleanup.policy=compact (repeatable, each key once)",
    )
    c.set_defaults(run=create)
    d = actions.add_parser("describe", help="print a topic as JSON", parents=[common])
    d.add_argument("name", help="the topic's name")
    d.set_defaults(run=describe)
