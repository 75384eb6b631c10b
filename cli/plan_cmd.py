"""compactor plan [--json] [--set NAME=VALUE]: the jobs the planner would run now."""

from __future__ import annotations

import argparse
import json

from compactor.cli.context import Context
from compactor.cli.planner_options import add_planner_options, planner_config
from compactor.planner.job import Job
from compactor.planner.plan import plan, plan_notes


def _levels(job: Job, levels: dict[str, int]) -> str:
    seen = sorted({levels[i.id] for i in job.inputs})
    return ",".join(f"L{lv}" for lv in seen)


def run(ctx: Context, args: argparse.Namespace) -> int:
    config = planner_config(args)
    snap = ctx.catalog.snapshot()
    result = plan(snap, ctx.now_ms, config, frozenset(snap.leased_inputs(ctx.catalog.clock())))
    notes = plan_notes(snap, ctx.now_ms, config)
    levels = {f.id: f.level for f in snap.files}
    if args.json:
        doc = {
            "now_ms": ctx.now_ms,
            "config": config.to_json(),
            "jobs": [
                {**job.to_json(), "input_levels": [levels[i.id] for i in job.inputs]}
                for job in result.jobs
            ],
            "notes": notes,
        }
        print(json.dumps(doc))
        return 0
    if result.jobs:
        print(
            f"{'#':>3}  {'rule':<8} {'inputs':>6} {'from':<8} {'to':<3} {'dedup':<5} "
            f"{'bytes':>14}  reason"
        )
        for n, job in enumerate(result.jobs, 1):
            print(
                f"{n:>3}  {job.rule:<8} {len(job.inputs):>6} {_levels(job, levels):<8} "
                f"{'--' if job.drop else f'L{job.output_level}':<3} "
                f"{'yes' if job.deduplicate else 'no':<5} "
                f"{job.input_bytes:>14,}  {job.reason}"
            )
    else:
        print("no jobs due")
    for note in notes:
        print(f"  {note}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "plan", help="the compaction jobs the planner would run now", parents=[common]
    )
    add_planner_options(p)
    p.add_argument("--json", action="store_true", help="the jobs (job documents) as JSON")
    p.set_defaults(run=run, existing_store=True)
