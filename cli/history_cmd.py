"""compactor history [--json] [--limit N]: the catalog's commits, newest first, and
compactor catalog upgrade: upgrade a format-1 store in place (and ``quarantine_cmd``'s
commands beside it)."""

from __future__ import annotations

import argparse
import json

from compactor.cli import quarantine_cmd
from compactor.cli.context import Context, positive_int


def history(ctx: Context, args: argparse.Namespace) -> int:
    entries = [e.history_json() for e in ctx.catalog.history(args.limit)]
    if args.json:
        print(json.dumps(entries))
        return 0
    print(f"{'id':>10}  {'kind':<11} {'time_ms':>14}  what")
    for e in entries:
        print(f"{e['id']:>10}  {e['kind']:<11} {e['time_ms']:>14}  {_what(e)}")
    return 0


def _what(e: dict[str, object]) -> str:
    if e["kind"] == "compaction":
        job = e.get("job")
        rule = job.get("rule", "?") if isinstance(job, dict) else "?"
        inputs = e.get("inputs")
        n = len(inputs) if isinstance(inputs, list) else 0
        outputs = e.get("outputs")
        listed = ", ".join(str(o) for o in outputs) if isinstance(outputs, list) else ""
        return f"{rule}: {n} inputs -> {listed}"
    if e["kind"] == "quarantine":
        return quarantine_cmd.history_line(e)
    details = {k: v for k, v in e.items() if k not in ("id", "version", "kind", "time_ms")}
    return json.dumps(details)[:120]


def upgrade(ctx: Context, args: argparse.Namespace) -> int:
    upgraded = ctx.catalog.upgrade()
    version = ctx.catalog.snapshot().version
    print(json.dumps({"upgraded": upgraded, "version": version}))
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("history", help="the catalog's commits, newest first", parents=[common])
    p.add_argument("--json", action="store_true", help="the commits as JSON")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N commits")
    p.set_defaults(run=history, existing_store=True)
    cat = sub.add_parser("catalog", help="catalog maintenance", parents=[common])
    actions = cat.add_subparsers(
        dest="catalog_command", required=True, metavar="{upgrade,quarantine,release,quarantined}"
    )
    u = actions.add_parser(
        "upgrade",
        help="upgrade a format-1 catalog in place (a first commit also does)",
        parents=[common],
    )
    u.set_defaults(run=upgrade, existing_store=True)
    quarantine_cmd.register(actions, common)
