"""compactor stats [--json]: files and bytes per level, and every live file in sequence."""

from __future__ import annotations

import argparse
import json
from typing import Any

from compactor.catalog import Snapshot
from compactor.cli.context import Context


def stats_json(snap: Snapshot) -> dict[str, Any]:
    levels = {
        str(level): {"files": files, "bytes": size}
        for level, (files, size) in snap.level_totals().items()
    }
    return {
        "levels": levels,
        "files": [{"key": f.key, "level": f.level, "bytes": f.size} for f in snap.files],
    }


def run(ctx: Context, args: argparse.Namespace) -> int:
    stats = stats_json(ctx.catalog.snapshot())
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"{'level':>5}  {'files':>8}  {'bytes':>15}")
    for level, entry in stats["levels"].items():
        print(f"{'L' + level:>5}  {entry['files']:>8,}  {entry['bytes']:>15,}")
    total_files = sum(e["files"] for e in stats["levels"].values())
    total_bytes = sum(e["bytes"] for e in stats["levels"].values())
    print(f"{'all':>5}  {total_files:>8,}  {total_bytes:>15,}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("stats", help="files and bytes per level", parents=[common])
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    p.set_defaults(run=run, existing_store=True)
