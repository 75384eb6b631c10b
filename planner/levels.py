"""A simple level rule, pure: snapshot -> the next job, or None.

The lowest level with a contiguous run of at least ``trigger`` files is compacted one
level up, oldest files first; L0 -> L1 copies, every level above deduplicates.
``full_job`` is the daily compaction: every live file into the top level, deduplicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from catalog import LiveFile, Snapshot
from planner.job import MAX_LEVEL, Job, JobInput

LEVEL_TRIGGER = 32


def _job(files: Sequence[LiveFile], level: int, dedup: bool, rule: str, reason: str) -> Job:
    return Job(
        inputs=tuple(JobInput(f.id, f.key, f.size) for f in files),
        output_level=level,
        deduplicate=dedup,
        rule=rule,
        reason=reason,
    )


def _runs(files: Sequence[LiveFile]) -> list[tuple[int, int, int]]:
    """(level, start, length) of each run of same-level files along the sequence."""
    runs: list[tuple[int, int, int]] = []
    for i, f in enumerate(files):
        if runs and runs[-1][0] == f.level and runs[-1][1] + runs[-1][2] == i:
            level, start, length = runs[-1]
            runs[-1] = (level, start, length + 1)
        else:
            runs.append((f.level, i, 1))
    return runs


def next_level_job(snap: Snapshot, trigger: int = LEVEL_TRIGGER) -> Job | None:
    for level in range(MAX_LEVEL):
        for run_level, start, length in _runs(snap.files):
            if run_level == level and length >= trigger:
                files = snap.files[start : start + trigger]
                return _job(
                    files,
                    level + 1,
                    dedup=level >= 1,
                    rule=f"L{level}->L{level + 1}",
                    reason=f"{length} contiguous L{level} files >= {trigger}",
                )
    return None


def full_job(snap: Snapshot) -> Job | None:
    if not snap.files:
        return None
    groups = [frozenset(snap.topics[t].config.compacted for t in f.topics) for f in snap.files]
    already_full = all(f.level == MAX_LEVEL for f in snap.files) and len(set(groups)) == len(groups)
    if already_full:
        return None
    return _job(
        snap.files,
        MAX_LEVEL,
        dedup=True,
        rule="full",
        reason=f"all {len(snap.files)} live files into L{MAX_LEVEL}",
    )
