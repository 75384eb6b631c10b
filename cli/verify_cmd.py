"""compactor verify: exit 0 iff every invariant holds; strays are listed, not failed."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from compactor.catalog.verify import verify_store
from compactor.cli.context import Context
from compactor.cli.exit_codes import ExitCode
from compactor.cli.progress import Progress
from compactor.objectstore import ObjectInfo


def run(ctx: Context, args: argparse.Namespace) -> int:
    snap = ctx.catalog.snapshot()
    progress = Progress()
    done = 0

    def on_file(_: object) -> None:
        nonlocal done
        done += 1
        progress.update(f"verifying file {done}/{len(snap.files)}")

    report = verify_store(ctx.catalog, snap, on_file)
    progress.done()
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "files": report.files,
                    "partitions": report.partitions,
                    "records": report.records,
                    "problems": list(report.problems),
                    "strays": [
                        {"key": s.key, "size": s.size, "written_ms": s.modified_ms}
                        for s in report.strays
                    ],
                }
            )
        )
    else:
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        for stray in report.strays:
            print(
                f"stray: {stray.key} ({stray.size} bytes{_written(stray)}): no live file or "
                "garbage entry names it (an upload not committed yet, or left by a failed "
                "ingest or job)",
                file=sys.stderr,
            )
        verdict = "OK" if report.ok else f"FAILED ({len(report.problems)} problems)"
        strays = f", {len(report.strays)} stray objects" if report.strays else ""
        print(
            f"{verdict}: {report.files} files, {report.partitions} partitions, "
            f"{report.records} records{strays}"
        )
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("verify", help="check every live file and partition", parents=[common])
    p.add_argument("--json", action="store_true", help="the report as one JSON document on stdout")
    p.set_defaults(run=run, existing_store=True)


def _written(info: ObjectInfo) -> str:
    """ ", written <UTC time>" when the store says when ``info`` was written."""
    if info.modified_ms is None:
        return ""
    when = datetime.datetime.fromtimestamp(info.modified_ms / 1000, datetime.UTC)
    return f", written {when:%Y-%m-%dT%H:%M:%SZ}"
