"""compactor simulate: replay agents writing L0 files through the planner, no I/O.

With --compare, the same workload also runs under Cassandra's size-tiered strategy,
and the two are printed side by side.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from compactor.catalog.config import CLEANUP_POLICIES
from compactor.cli.context import Context, UsageError, integer, number, positive_int
from compactor.cli.planner_options import add_planner_options, planner_config
from compactor.cli.progress import Progress
from compactor.planner.plan import plan
from compactor.planner.simulation.keys import KeyModel
from compactor.planner.simulation.sim import Result, Simulation, WorkerModel, Workload
from compactor.planner.stcs import stcs_plan


def _positive_float(text: str) -> float:
    value = number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _series(r: Result, rows: int = 12) -> None:
    step = max(1, len(r.samples) // rows)
    picked = r.samples[::step]
    if picked[-1] is not r.samples[-1]:
        picked.append(r.samples[-1])
    print(
        f"{'time':>8}  {'L0':>4} {'L1':>4} {'L2':>4} {'L3':>4} {'L4':>4}  "
        f"{'live records':>14} {'live MB':>9} {'duplicates':>14} {'tombstones':>11} "
        f"{'write amp':>9} {'dirty':>6}"
    )
    for s in picked:
        levels = " ".join(f"{n:>4}" for n in s.files_per_level)
        when = f"{s.t_s:>7,.0f}s" if r.samples[-1].t_s <= 7200 else f"{s.t_s / 3600:>7.2f}h"
        print(
            f"{when}  {levels}  {s.live_records:>14,} {s.live_bytes / 1e6:>9,.1f} "
            f"{s.duplicates_live:>14,} {s.tombstones_live:>11,} "
            f"{s.write_amplification:>9.2f} {s.dirty_files:>6}"
        )


def _summary_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    lag = doc["max_lag"]
    final = doc["final"]
    first = doc["first_dedup_seconds"]
    return [
        ("first dedup (s)", "-" if first is None else f"{first:,.0f}"),
        ("write amplification", f"{doc['write_amplification']:.2f}"),
        ("bytes compacted (read)", f"{doc['compaction_bytes_read']:,}"),
        ("duplicates live, end", f"{final['duplicates_live']:,}"),
        ("duplicates live, mean", f"{doc['duplicates_live_mean']:,}"),
        ("live files, end", f"{sum(final['files_per_level']):,}"),
        ("jobs", f"{sum(doc['jobs_by_rule'].values()):,}"),
        (
            "dirty files late",
            f"{lag['late']} of {lag['dirty_files']} (max {lag['max_delay_s']:,.0f} s)",
        ),
        *_time_rows(doc),
    ]


def _minutes(ms: int) -> str:
    return f"{ms / 60_000:,.1f} min"


def _time_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Retention and tombstone figures, for the workloads that exercise them."""
    ret, tomb = doc["retention"], doc["tombstones"]
    rows = [
        ("live MB, peak", f"{ret['peak_live_bytes'] / 1e6:,.1f}"),
        ("live MB, end", f"{ret['final_live_bytes'] / 1e6:,.1f}"),
    ]
    if ret["max_retention_lateness_ms"] is not None:
        rows += [
            ("live MB, last retention", f"{ret['steady_live_bytes'] / 1e6:,.1f}"),
            ("ingest x retention, MB", f"{ret['ingest_per_retention_bytes'] / 1e6:,.1f}"),
            (
                "retention late by, max",
                f"{_minutes(ret['max_retention_lateness_ms'])} "
                f"(max delay {_minutes(ret['retention_max_delay_ms'])})",
            ),
            (
                "retention jobs",
                f"{ret['drop_jobs']:,} drops ({ret['files_dropped']:,} files), "
                f"{ret['rewrite_jobs']:,} rewrites",
            ),
        ]
    if tomb["ingested"]:
        rows.append(("tombstones live, end", f"{tomb['live_end']:,} of {tomb['ingested']:,}"))
    if tomb["max_past_horizon_ms"] is not None:
        rows += [
            (
                "tombstone past horizon, max",
                f"{_minutes(tomb['max_past_horizon_ms'])} "
                f"(buffer {_minutes(tomb['tombstone_buffer_ms'])})",
            ),
            (
                "tombstone since stamped, max",
                f"{_minutes(tomb['max_since_horizon_set_ms'])} "
                f"(bound {_minutes(tomb['bound_ms'])})",
            ),
        ]
    if tomb["max_unstamped_age_ms"] is not None:
        rows.append(("tombstone before stamped, max", _minutes(tomb["max_unstamped_age_ms"])))
    return rows


def run(ctx: Context, args: argparse.Namespace) -> int:
    config = planner_config(args)
    try:
        workload = Workload(
            agents=args.agents,
            files_per_second=args.files_per_second,
            hours=args.hours,
            records_per_file=args.records_per_file,
            record_bytes=args.record_bytes,
            keys=args.keys,
            key_skew=args.key_skew,
            max_compaction_lag_ms=args.max_compaction_lag_ms,
            cleanup_policy=args.cleanup_policy,
            retention_ms=args.retention_ms,
            tombstone_ratio=args.tombstone_ratio,
            delete_retention_ms=args.delete_retention_ms,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    worker = WorkerModel(
        workers=args.workers,
        worker_bytes_per_s=args.worker_mib_per_s * (1 << 20),
        job_overhead_s=args.job_overhead_s,
        step_s=args.step_seconds,
        sample_every_s=args.sample_every_s,
    )
    keys = KeyModel(workload.keys, workload.key_skew)
    policies = [("planner", lambda s, n, b: plan(s, n, config, b))]
    if args.compare:
        policies.append(("stcs", lambda s, n, b: stcs_plan(s, n, busy=b, limits=config)))
    runs: dict[str, Result] = {}
    progress = Progress()
    for name, policy in policies:
        sim = Simulation(name, policy, workload, worker, config, keys)
        runs[name] = sim.run(lambda t: progress.update(f"simulating: {t / 3600:.2f} h"))
    progress.done()
    results = {name: r.to_json() for name, r in runs.items()}
    if args.json:
        doc: dict[str, Any] = {
            "first_dedup_seconds": results["planner"]["first_dedup_seconds"],
            "workload": vars(workload),
            "worker": vars(worker),
            "planner_config": config.to_json(),
            **results["planner"],
        }
        if "stcs" in results:
            doc["stcs"] = results["stcs"]
        print(json.dumps(doc))
        return 0
    rate = workload.agents * workload.files_per_second
    print(
        f"{workload.agents} agents x {workload.files_per_second:g} files/s = {rate:g} files/s "
        f"for {workload.hours:g} h; {workload.records_per_file:,} records x "
        f"{workload.record_bytes} B per file; {workload.keys:,} keys, skew {workload.key_skew:g}"
    )
    print(
        f"cleanup.policy {workload.cleanup_policy}, retention.ms {workload.retention_ms}, "
        f"tombstones {workload.tombstone_ratio:g} of records, "
        f"delete.retention.ms {workload.delete_retention_ms}"
    )
    if args.compare:
        rows = {name: dict(_summary_rows(doc)) for name, doc in results.items()}
        names = list(rows["planner"])
        print(f"{'':<30} {'planner':>34} {'STCS':>34}")
        for n in names:
            print(f"{n:<30} {rows['planner'][n]:>34} {rows['stcs'].get(n, '-'):>34}")
        return 0
    _series(runs["planner"])
    for label, value in _summary_rows(results["planner"]):
        print(f"{label}: {value}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay agents writing files through the planner (no I/O)",
        parents=[common],
        description="Time-stepped simulation of ingest and compaction through the real "
        "planner, with a cost model of the worker: files per level, write amplification, "
        "duplicates live, max-lag compliance, time to the first deduplication, live size "
        "and lateness under retention.ms, tombstones past their delete horizon.",
    )
    w = Workload()
    m = WorkerModel()
    p.add_argument(
        "--agents", type=positive_int, default=w.agents, help="ingest agents writing L0 files"
    )
    p.add_argument(
        "--files-per-second", type=_positive_float, default=w.files_per_second, help="per agent"
    )
    p.add_argument("--hours", type=_positive_float, default=w.hours, help="simulated time")
    p.add_argument(
        "--records-per-file", type=positive_int, default=w.records_per_file, help="per L0 file"
    )
    p.add_argument(
        "--record-bytes", type=positive_int, default=w.record_bytes, help="a record's size"
    )
    p.add_argument("--keys", type=positive_int, default=w.keys, help="size of the key space")
    p.add_argument(
        "--key-skew", type=number, default=w.key_skew, help="Zipf exponent of updates (0: uniform)"
    )
    p.add_argument(
        "--max-compaction-lag-ms",
        type=integer,
        default=None,
        help="the simulated topic's max.compaction.lag.ms (raised to 2 h when lower)",
    )
    p.add_argument(
        "--cleanup-policy",
        choices=CLEANUP_POLICIES,
        metavar="POLICY",
        default=w.cleanup_policy,
        help="the simulated topic's cleanup.policy: "
        + ", ".join(repr(p) for p in CLEANUP_POLICIES[:-1])
        + f" or {CLEANUP_POLICIES[-1]!r}",
    )
    p.add_argument(
        "--retention-ms",
        type=integer,
        default=w.retention_ms,
        metavar="MS",
        help="the topic's retention.ms (-1: forever; only with a delete policy)",
    )
    p.add_argument(
        "--tombstone-ratio",
        type=number,
        default=w.tombstone_ratio,
        metavar="R",
        help="share of ingested records that are tombstones",
    )
    p.add_argument(
        "--delete-retention-ms",
        type=integer,
        default=w.delete_retention_ms,
        metavar="MS",
        help="the topic's delete.retention.ms",
    )
    p.add_argument("--workers", type=positive_int, default=m.workers, help="jobs that run at once")
    p.add_argument(
        "--worker-mib-per-s",
        type=_positive_float,
        default=m.worker_bytes_per_s / (1 << 20),
        help="input a worker compacts a second, MiB",
    )
    p.add_argument(
        "--job-overhead-s",
        type=_non_negative_float,
        default=m.job_overhead_s,
        help="a job's fixed cost",
    )
    p.add_argument(
        "--step-seconds", type=_positive_float, default=m.step_s, help="the simulation's time step"
    )
    p.add_argument(
        "--sample-every-s",
        type=_positive_float,
        default=m.sample_every_s,
        help="how often the files per level are sampled",
    )
    p.add_argument(
        "--compare", action="store_true", help="also run Cassandra's size-tiered strategy"
    )
    add_planner_options(p)
    p.add_argument("--json", action="store_true", help="the result as JSON")
    p.set_defaults(run=run)
