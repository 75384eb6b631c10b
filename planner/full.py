"""Full compaction: every available live file into the top level, deduplicated.

``compact --full`` runs it by hand; the planner schedules it as the daily compaction
across sizes, which bounds the duplicates the level rules leave between files that
never meet (a top-level file and a much smaller one).
"""

from __future__ import annotations

from collections.abc import Collection

from compactor.catalog import Snapshot
from compactor.planner.config import HOUR_MS, PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job, Numbers
from compactor.planner.sequence import Run, make_job, output_group, runs


def _already_full(run: Run, snap: Snapshot) -> bool:
    groups = [output_group(f, snap.topics) for f in run]
    return all(f.level == MAX_LEVEL for f in run) and len(set(groups)) == len(groups)


def full_jobs(
    snap: Snapshot,
    unavailable: Collection[str],
    rule: str = "full",
    why: str = "",
    numbers: Numbers = (),
) -> list[Job]:
    """One job per run of available files (files too large to compact split runs)."""
    prefix = f"{why}: " if why else ""
    return [
        make_job(
            run,
            MAX_LEVEL,
            dedup=True,
            rule=rule,
            reason=f"{prefix}all {len(run)} files of the run into L{MAX_LEVEL}",
            numbers=(("files", len(run)), ("bytes", sum(f.size for f in run)), *numbers),
        )
        for run in runs(snap.files, unavailable)
        if not _already_full(run, snap)
    ]


def daily_due_ms(snap: Snapshot, config: PlannerConfig) -> int | None:
    """When the next daily compaction is due; None for a store that never held data."""
    if snap.last_full_compaction_ms is None:
        return None
    return snap.last_full_compaction_ms + config.full_compaction_interval_ms


def daily_jobs(
    snap: Snapshot, now_ms: int, config: PlannerConfig, unavailable: Collection[str]
) -> list[Job]:
    due = daily_due_ms(snap, config)
    if due is None or now_ms < due:
        return []
    since = now_ms - (due - config.full_compaction_interval_ms)
    interval = config.full_compaction_interval_ms
    return full_jobs(
        snap,
        unavailable,
        rule="daily",
        why=f"last full compaction {since / HOUR_MS:.1f} h ago >= {interval / HOUR_MS:.1f} h",
        numbers=(("since_last_full_ms", since), ("interval_ms", interval)),
    )
