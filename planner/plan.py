"""The planner: (catalog snapshot, clock, config) -> jobs. Pure and deterministic.

Rules run in priority order and each sees only the files no earlier job took, so no
file is in two jobs; files that running jobs hold (``busy``) are never offered to any
rule, and files too large to compact or quarantined to none but retention's drop, which
reads nothing (``sequence.droppable_ids``). The time rules come first:

1. retention   files past retention.ms dropped unread, files holding some rewritten
               without them (``planner.retention``);
2. daily       the full compaction across sizes, when one is due: it takes every
               file left, so only retention jobs run beside it;
3. tombstones  tombstones past their delete horizon, with their partitions' oldest
               data, after buffering (``planner.tombstones``);
4. max-lag     files past max.compaction.lag.ms, after buffering (``planner.maxlag``);
5. levels      L0 -> L1 (copy), L1 -> L2, L2 -> L3, L3 -> L4 (``planner.levels``);
6. top-run     similar-sized top-level files compacted together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from compactor.catalog import Snapshot
from compactor.catalog.config import add_ms
from compactor.planner.config import HOUR_MS, MINUTE_MS, PlannerConfig
from compactor.planner.full import daily_due_ms, daily_jobs, full_jobs
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.levels import level_jobs, top_run_jobs
from compactor.planner.maxlag import dirty_files, max_lag_jobs
from compactor.planner.retention import due, retention_jobs, retention_state
from compactor.planner.sequence import droppable_ids, too_large_ids, unavailable_ids
from compactor.planner.tombstones import passed_horizons, tombstone_jobs


@dataclass(frozen=True)
class Plan:
    jobs: tuple[Job, ...]


def plan(
    snap: Snapshot,
    now_ms: int,
    config: PlannerConfig | None = None,
    busy: frozenset[str] = frozenset(),
) -> Plan:
    config = config or PlannerConfig()
    taken = unavailable_ids(snap, config, busy)
    jobs: list[Job] = []

    def add(rule: Rule) -> None:
        for job in rule(snap, now_ms, config, taken):
            jobs.append(job)
            taken.update(i.id for i in job.inputs)

    add(functools.partial(retention_jobs, droppable=droppable_ids(snap, config, busy)))
    daily = daily_jobs(snap, now_ms, config, taken, _dropped(jobs))
    if daily:
        return Plan(tuple(jobs + daily))
    for rule in (tombstone_jobs, max_lag_jobs, _levels, _top_runs):
        add(rule)
    return Plan(tuple(jobs))


Rule = Callable[[Snapshot, int, PlannerConfig, set[str]], Iterable[Job]]


def _levels(snap: Snapshot, now_ms: int, config: PlannerConfig, taken: set[str]) -> list[Job]:
    return level_jobs(snap, config, taken)


def _top_runs(snap: Snapshot, now_ms: int, config: PlannerConfig, taken: set[str]) -> list[Job]:
    return top_run_jobs(snap, config, taken)


def plan_notes(snap: Snapshot, now_ms: int, config: PlannerConfig | None = None) -> list[str]:
    """Why the rules did or did not fire: the state each rule looks at (for
    ``compactor plan``; kept out of ``plan``, which the compact loop and the simulator
    call at every step)."""
    config = config or PlannerConfig()
    frozen = too_large_ids(snap.files, config)
    notes = []
    for level in range(MAX_LEVEL + 1):
        files = [f for f in snap.files if f.level == level]
        if files:
            notes.append(f"L{level}: {len(files)} files, {sum(f.size for f in files):,} bytes")
    notes.append(
        f"level trigger {config.level_trigger_files} files; top runs of "
        f">= {config.top_run_min_files} files within size ratio {config.top_run_size_ratio}"
    )
    due = daily_due_ms(snap, config)
    if due is not None:
        when = "now" if due <= now_ms else f"in {(due - now_ms) / HOUR_MS:.1f} h"
        notes.append(f"daily compaction due {when}")
    notes += _time_rule_notes(snap, now_ms, config)
    dirty = dirty_files(snap, now_ms)
    if dirty:
        oldest = (now_ms - min(dirty.values())) / MINUTE_MS
        notes.append(f"max-lag: {len(dirty)} dirty files, the oldest dirty for {oldest:.0f} min")
    if frozen:
        cap = config.max_partition_uncompressed_bytes
        notes.append(f"{len(frozen)} files hold a partition over {cap:,} bytes: never compacted")
    if snap.quarantined:
        n = len(snap.quarantined)
        notes.append(
            f"{n} quarantined file{'s' if n > 1 else ''} set aside, taken by no job "
            "but retention's unread drop (compactor catalog quarantined)"
        )
    return notes


def full_plan(
    snap: Snapshot,
    now_ms: int,
    config: PlannerConfig | None = None,
    busy: frozenset[str] = frozenset(),
) -> Plan:
    """``compact --full``: files past retention dropped unread, then the daily compaction,
    now, over the rest (which applies every other time rule). ``busy`` files (leased by
    running jobs) are left out."""
    config = config or PlannerConfig()
    taken = unavailable_ids(snap, config, busy)
    droppable = droppable_ids(snap, config, busy)
    drops = retention_jobs(snap, now_ms, config, taken, rewrites=False, droppable=droppable)
    for job in drops:
        taken.update(i.id for i in job.inputs)
    return Plan(tuple(drops + full_jobs(snap, now_ms, taken, gone=_dropped(drops))))


def _dropped(jobs: Iterable[Job]) -> set[str]:
    """The files ``jobs`` drop unread."""
    return {i.id for job in jobs if job.drop for i in job.inputs}


def _time_rule_notes(snap: Snapshot, now_ms: int, config: PlannerConfig) -> list[str]:
    notes = []
    state = retention_state(snap, now_ms)
    expired = sum(len(run) for run in state.drops)
    if expired or state.rewrites:
        waiting = [r for r in state.rewrites if r.removes and not due(r, now_ms, config)]
        line = (
            f"retention: {expired} files wholly past retention.ms (dropped unread), "
            f"{len(state.rewrites)} holding some expired records"
        )
        if waiting:
            soonest = add_ms(
                min(r.expired_since_ms for r in waiting), config.retention_max_delay_ms
            )
            line += (
                f"; {len(waiting)} wait (under retention.min.expired.ratio "
                f"{config.retention_min_expired_ratio}, or dropped unread soon), "
                f"at the latest until {soonest} (in {(soonest - now_ms) / MINUTE_MS:.0f} min)"
            )
        notes.append(line)
    horizons = [
        s.min_delete_horizon
        for f in snap.files
        for s in passed_horizons(f, snap, now_ms)
        if s.min_delete_horizon is not None
    ]
    if horizons:
        since = (now_ms - min(horizons)) / MINUTE_MS
        notes.append(
            f"tombstones: {len(horizons)} file topics hold tombstones past their delete "
            f"horizon, the earliest for {since:.0f} min (due after tombstone.buffer.ms "
            f"{config.tombstone_buffer_ms / MINUTE_MS:.0f} min)"
        )
    return notes
