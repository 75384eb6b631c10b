"""compactor catalog quarantine FILE / release FILE / quarantined: files set aside.

A live file that cannot be read (a flipped byte, a truncated upload) fails every job that
takes it, and the planner keeps offering it: at L0, where every job takes the oldest
run, one damaged file stops the compaction of every partition. Quarantining it sets it
aside, as Kafka's log cleaner sets an uncleanable partition aside: no rule offers it to a
job that reads it, so the runs on either side of it are compacted without it, and a job
planned before fails its commit rather than replace it. Its records stay live (``dump``
and ``verify`` read it as before, and report its damage), and nothing is deleted until
every record in it is past retention.ms: retention's drop reads nothing, and takes it.
Releasing it, once the object is repaired (say, restored from a copy), gives it back to
the planner.
"""

from __future__ import annotations

import argparse
import json

from compactor.catalog import CatalogError, CommitRecord, LiveFile, Snapshot
from compactor.catalog.changes import release_file
from compactor.catalog.numbers import shown
from compactor.catalog.quarantine import LONGEST_REASON, is_control, set_aside
from compactor.cli.context import Context, UsageError

DEFAULT_REASON = "set aside by an operator"


def reason_text(text: str) -> str:
    """``--reason`` as kept: stripped, one line of at most ``LONGEST_REASON`` printable
    characters; UsageError otherwise."""
    reason = text.strip()
    if not reason:
        raise UsageError("catalog quarantine: --reason is empty: say why, or leave it out")
    if len(reason) > LONGEST_REASON:
        raise UsageError(
            f"catalog quarantine: --reason {shown(reason)!r} is longer than "
            f"{LONGEST_REASON} characters"
        )
    if any(is_control(c) for c in reason):
        raise UsageError(
            f"catalog quarantine: --reason {shown(reason)!r} holds a control character "
            "(a newline?): give it one line"
        )
    return reason


def quarantine(ctx: Context, args: argparse.Namespace) -> int:
    reason = DEFAULT_REASON if args.reason is None else reason_text(args.reason)
    live = _live_file(ctx.catalog.snapshot(), args.file)
    since_ms = set_aside(ctx.catalog, live, reason)
    out = {"quarantined": live.id, "key": live.key, "reason": reason, "since_ms": since_ms}
    print(json.dumps(out))
    return 0


def release(ctx: Context, args: argparse.Namespace) -> int:
    live = _live_file(ctx.catalog.snapshot(), args.file)
    ctx.catalog.commit(
        lambda s: release_file(s, live.id),
        CommitRecord("quarantine", {"action": "released", "file": live.id, "key": live.key}),
    )
    print(json.dumps({"released": live.id, "key": live.key}))
    return 0


def history_line(details: dict[str, object]) -> str:
    """A quarantine commit as ``history`` shows it: what, which file, and why."""
    if details.get("action") == "set":
        return f"set aside: {details.get('key')} ({details.get('reason')})"
    return f"released: {details.get('key')}"


def listed(ctx: Context, args: argparse.Namespace) -> int:
    snap = ctx.catalog.snapshot()
    live = {f.id: f for f in snap.files}
    rows = []
    for q in sorted(snap.quarantined.values(), key=lambda q: q.since_ms):
        f = live.get(q.file_id)  # always live, but for a checkpoint edited by hand
        key, level = (None, None) if f is None else (f.key, f.level)
        rows.append({"file": q.file_id, "key": key, "level": level,
                     "since_ms": q.since_ms, "reason": q.reason})  # fmt: skip
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print("no quarantined files")
        return 0
    print(f"{'since_ms':>14}  {'level':>5}  key: reason")
    for r in rows:
        print(f"{r['since_ms']:>14}  {'L' + str(r['level']):>5}  {r['key']}: {r['reason']}")
    return 0


def _live_file(snap: Snapshot, named: str) -> LiveFile:
    """The live file ``named`` names: its id, or its key as errors print it."""
    for f in snap.files:
        if named in (f.id, f.key):
            return f
    raise CatalogError(
        f"no live file {shown(named)!r} (give a live file's id, or its key as an error names it)"
    )


def register(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    q = actions.add_parser(
        "quarantine",
        help=(
            "set a damaged live file aside: no job takes it until it is released "
            "(but a retention drop, which reads nothing)"
        ),
        parents=[common],
    )
    q.add_argument("file", metavar="FILE", help="the file's id, or its key (data/L0/....cf)")
    q.add_argument(
        "--reason", default=None, help=f"why, kept in the catalog (default: {DEFAULT_REASON!r})"
    )
    q.set_defaults(run=quarantine, existing_store=True)
    r = actions.add_parser(
        "release", help="give a quarantined file back to the planner", parents=[common]
    )
    r.add_argument("file", metavar="FILE", help="the file's id, or its key")
    r.set_defaults(run=release, existing_store=True)
    s = actions.add_parser(
        "quarantined", help="the files set aside, oldest first", parents=[common]
    )
    s.add_argument("--json", action="store_true", help="as JSON")
    s.set_defaults(run=listed, existing_store=True)
