"""Level rules: L0 -> L1 -> ... -> L4 at a file-count trigger, and similar-size runs at
the top level (the size-tiered part, as in Cassandra's STCS or RocksDB's universal
compaction, but over contiguous runs of the live sequence).

Invariants enforced here: a job's inputs are one contiguous run of available files;
its output level is never below an input's level; L0 -> L1 copies, every job above
deduplicates, so every file at L2 or above was written by a deduplicating compaction.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping

from compactor.catalog import LiveFile, Snapshot, Topic
from compactor.planner.config import PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.sequence import Run, make_job, output_group, runs


def _at_level(level: int, f: LiveFile) -> bool:
    return f.level == level


def level_jobs(snap: Snapshot, config: PlannerConfig, unavailable: Collection[str]) -> list[Job]:
    """Each contiguous run of >= trigger files of level l (below the top) gives jobs of
    exactly trigger files each, oldest first; the remainder waits for more."""
    n = config.level_trigger_files
    jobs: list[Job] = []
    for level in range(MAX_LEVEL):
        count = sum(1 for f in snap.files if f.level == level)
        for run in runs(snap.files, unavailable, functools.partial(_at_level, level)):
            for start in range(0, len(run) - n + 1, n):
                jobs.append(
                    make_job(
                        run[start : start + n],
                        level + 1,
                        dedup=level >= 1,
                        rule=f"L{level}->L{level + 1}",
                        reason=f"a run of {len(run)} contiguous L{level} files >= {n}",
                        numbers=(("level_files", count), ("run_files", len(run)), ("trigger", n)),
                    )
                )
    return jobs


def size_ratios(files: Run, topics: Mapping[str, Topic]) -> dict[str, float]:
    """Largest / smallest file size per output group."""
    sizes: dict[str, list[int]] = {}
    for f in files:
        sizes.setdefault(output_group(f, topics), []).append(max(f.size, 1))
    return {g: max(s) / min(s) for g, s in sizes.items()}


def top_run_jobs(snap: Snapshot, config: PlannerConfig, unavailable: Collection[str]) -> list[Job]:
    """Greedy, oldest first: the longest window of top-level files (at most
    top.run.max.files) in which each output group's sizes stay within
    top.run.size.ratio; it becomes a job when one group has top.run.min.files files.

    Similarity is judged per group because the worker writes one output per group: a
    big file of one group never makes another group's small files "dissimilar"."""
    jobs: list[Job] = []
    for run in runs(snap.files, unavailable, lambda f: f.level == MAX_LEVEL):
        i = 0
        while i < len(run):
            j = i + 1
            while (
                j < len(run)
                and j - i < config.top_run_max_files
                and max(size_ratios(run[i : j + 1], snap.topics).values())
                <= config.top_run_size_ratio
            ):
                j += 1
            window = run[i:j]
            groups = [output_group(f, snap.topics) for f in window]
            largest_group = max(groups.count(g) for g in set(groups))
            if largest_group >= config.top_run_min_files:
                ratio = max(size_ratios(window, snap.topics).values())
                jobs.append(
                    make_job(
                        window,
                        MAX_LEVEL,
                        dedup=True,
                        rule="top-run",
                        reason=(
                            f"{largest_group} L{MAX_LEVEL} files of similar size "
                            f"(ratio {ratio:.2f} <= {config.top_run_size_ratio})"
                        ),
                        numbers=(
                            ("files", len(window)),
                            ("smallest_bytes", min(f.size for f in window)),
                            ("largest_bytes", max(f.size for f in window)),
                            ("size_ratio", round(ratio, 3)),
                            ("min_files", config.top_run_min_files),
                        ),
                    )
                )
                i = j
            else:
                i += 1
    return jobs
