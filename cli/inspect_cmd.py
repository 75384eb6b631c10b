"""compactor inspect KEY [--sections] [--check] [--json]: one data file, like RocksDB's
``sst_dump``.

Reads the footer (one or two ranged GETs; its CRC is checked) and prints the file's
totals. ``--sections`` adds each section's byte range, offsets, counts, bytes, timestamps
and delete horizon, and its offset bitmap's cardinality (one or two ranged GETs of the
section's trailer each; a cardinality that is not the section's record count is a
FormatError). ``--check`` first streams the whole file once and checks everything the
format defines (every frame's CRC, every batch decoded, trailers and footer against the
records) before the trailers are read again, so the byte it names is the first bad one
after the footer and tail (which are read first): any problem exits 6 with
``compactor: KEY: byte N: reason``. A corrupt footer or tail exits 6 without it.

``--json`` prints one object: ``key``, ``size``, ``format_version``, ``section_count``, ``topics``,
``partitions``, ``records``, ``tombstones``, ``uncompressed_bytes``, ``min_timestamp``,
``max_timestamp`` (null without sections), ``footer_position`` and ``footer_length`` (the
``FOOT`` frame's byte range; the 20-byte tail follows it), ``footer_crc`` ("ok"),
``checked`` (whether ``--check`` ran and passed) and, with ``--sections``, ``sections``:
``SectionMeta.to_json()`` (``min_delete_horizon`` null when no tombstone has one) plus
``bitmap_cardinality``.
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from compactor.cli.context import Context
from compactor.fileformat import (
    FileMeta,
    FormatError,
    SectionMeta,
    read_footer,
    read_section_offsets,
    verify_stream,
)
from compactor.fileformat.framing import FILE_HEADER, FILE_TAIL
from compactor.fileformat.ranged import ReadRange
from compactor.objectstore import StoreError
from compactor.objectstore.keys import check_key


def run(ctx: Context, args: argparse.Namespace) -> int:
    store, key = ctx.store, args.key
    size = store.head(key).size
    read_range = functools.partial(store.get_range, key)
    meta = read_footer(read_range, size, object_name=key)
    if args.check:  # before the trailer reads, so an error names the first bad byte
        with store.open_stream(key) as stream:
            verify_stream(stream, object_name=key, size=size)
    cardinalities = (
        [_cardinality(read_range, key, s) for s in meta.sections] if args.sections else []
    )
    summary = _summary(key, meta, checked=args.check)
    if args.json:
        if args.sections:
            summary["sections"] = [
                {**s.to_json(), "bitmap_cardinality": n}
                for s, n in zip(meta.sections, cardinalities, strict=True)
            ]
        print(json.dumps(summary))
        return 0
    _print_text(summary, meta.sections if args.sections else (), cardinalities)
    return 0


def _cardinality(read_range: ReadRange, key: str, section: SectionMeta) -> int:
    """How many offsets the section's trailer bitmap holds. A fetch by offset trusts that
    bitmap, so one that disagrees with the footer's record count is a corrupt file."""
    n = len(read_section_offsets(read_range, section, object_name=key))
    if n != section.record_count:
        raise FormatError(
            key,
            section.position,
            f"section {section.topic}/{section.partition}: its offset bitmap holds {n} "
            f"offsets, its footer entry {section.record_count} records",
        )
    return n


def _footer_position(meta: FileMeta) -> int:
    """Where the ``FOOT`` frame starts: ``read_footer`` has checked that the sections tile
    the file from the file header up to it (FORMAT.md §7), so the last one ends there."""
    if not meta.sections:
        return FILE_HEADER.size
    last = meta.sections[-1]
    return last.position + last.length


def _summary(key: str, meta: FileMeta, *, checked: bool) -> dict[str, Any]:
    sections = meta.sections
    footer_at = _footer_position(meta)
    return {
        "key": key,
        "size": meta.size,
        "format_version": meta.format_version,
        "section_count": len(sections),
        "topics": len({s.topic for s in sections}),
        "partitions": len({(s.topic, s.partition) for s in sections}),
        "records": sum(s.record_count for s in sections),
        "tombstones": sum(s.tombstones for s in sections),
        "uncompressed_bytes": sum(s.uncompressed_bytes for s in sections),
        "min_timestamp": min((s.min_timestamp for s in sections), default=None),
        "max_timestamp": max((s.max_timestamp for s in sections), default=None),
        "footer_position": footer_at,
        "footer_length": meta.size - FILE_TAIL.size - footer_at,
        "footer_crc": "ok",
        "checked": checked,
    }


def _print_text(
    summary: dict[str, Any], sections: tuple[SectionMeta, ...], cardinalities: list[int]
) -> None:
    checks = (
        "every frame's CRC, every batch decoded, trailers and footer match the records"
        if summary["checked"]
        else "footer CRC ok (--check reads and checks every byte)"
    )
    print(
        f"{summary['key']}: {summary['size']:,} bytes, format version {summary['format_version']}"
    )
    print(
        f"  footer at byte {summary['footer_position']:,} (+{summary['footer_length']:,}), "
        f"then the {FILE_TAIL.size}-byte tail"
    )
    print(
        f"  {summary['section_count']:,} sections ({summary['topics']} topics, "
        f"{summary['partitions']:,} partitions); {summary['records']:,} records, "
        f"{summary['tombstones']:,} tombstones, {summary['uncompressed_bytes']:,} "
        "uncompressed bytes"
    )
    if summary["min_timestamp"] is not None:
        print(f"  timestamps {summary['min_timestamp']} .. {summary['max_timestamp']}")
    print(f"  checked: {checks}")
    if not sections:
        return
    print(
        f"  {'topic':<16} {'part':>5} {'position':>12} {'length':>10} {'first':>10} "
        f"{'last':>10} {'records':>9} {'bitmap':>9} {'tombst':>7} {'bytes':>11}  "
        "timestamps / delete horizon"
    )
    for s, n in zip(sections, cardinalities, strict=True):
        horizon = "" if s.min_delete_horizon is None else f" / {s.min_delete_horizon}"
        print(
            f"  {s.topic:<16} {s.partition:>5} {s.position:>12,} {s.length:>10,} "
            f"{s.first_offset:>10} {s.last_offset:>10} {s.record_count:>9,} {n:>9,} "
            f"{s.tombstones:>7,} {s.uncompressed_bytes:>11,}  "
            f"{s.min_timestamp}..{s.max_timestamp}{horizon}"
        )


def object_key(text: str) -> str:
    """An argparse type: a key the store's rules allow (``objectstore.keys``), such as
    ``data/L0/....cf``; a local path or an empty key is a usage error."""
    try:
        return check_key(text, "inspect")
    except StoreError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("inspect", help="one data file: footer, sections, checks", parents=[common])
    p.add_argument("key", metavar="KEY", type=object_key, help="the object's key in the store")
    p.add_argument("--sections", action="store_true", help="every section, with its offset bitmap")
    p.add_argument(
        "--check", action="store_true", help="decode and check every byte; exit 6 on a problem"
    )
    p.add_argument("--json", action="store_true", help="what it prints, as JSON")
    p.set_defaults(run=run, existing_store=True)
