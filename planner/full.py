"""Full compaction: every available live file into the top level, deduplicated.

``compact --full`` runs it by hand; the planner schedules it as the daily compaction
across sizes, which bounds the duplicates the level rules leave between files that
never meet (a top-level file and a much smaller one). Its jobs hold each partition's
oldest and newest data, so they apply every time rule: retention, tombstones past their
horizon, and records aged past min.compaction.lag.ms. A run that is already one top-level
file per output group is skipped only if none of that is due in it and within its reach:
where a file outside the run (quarantined, leased, too large to compact) holds older data
of every partition a due rule touches, the run's job could not apply the rule
(``worker.policy``), and rewriting the file would only copy it, every time.
"""

from __future__ import annotations

from collections.abc import Collection

from compactor.catalog import LiveFile, Snapshot, TopicSummary
from compactor.catalog.config import add_ms
from compactor.catalog.summary import PartitionRanges, ranges_cover, union_ranges
from compactor.planner.config import HOUR_MS, PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job, Numbers
from compactor.planner.maxlag import left_young_since
from compactor.planner.retention import removable_if_oldest
from compactor.planner.sequence import Run, make_job, output_group, runs
from compactor.planner.tombstones import passed_horizons


class RunEnds:
    """Which partitions of a topic files before a run, and files after it, hold: a job of
    the run holds a partition's oldest data only where no file before it holds the
    partition, its newest only where no file after it does (``catalog.InputEnds``, as
    the worker asks it). Files in ``gone`` (dropped unread by jobs of the same plan,
    which run first) hold nothing by then."""

    def __init__(self, snap: Snapshot, run: Run, gone: Collection[str] = frozenset()) -> None:
        self._snap, self._ids, self._gone = snap, {f.id for f in run}, gone
        self._outside: dict[str, tuple[PartitionRanges, PartitionRanges]] = {}

    def _before_and_after(self, topic: str) -> tuple[PartitionRanges, PartitionRanges]:
        if topic not in self._outside:
            before: PartitionRanges = ()
            after: PartitionRanges = ()
            seen = False
            for g in self._snap.holders(topic):
                summary = g.topic(topic)
                if g.id in self._ids:
                    seen = True
                elif g.id in self._gone:
                    continue
                elif summary is not None and seen:
                    after = union_ranges(after, summary.partitions)
                elif summary is not None:
                    before = union_ranges(before, summary.partitions)
            self._outside[topic] = (before, after)
        return self._outside[topic]

    def oldest_of_some(self, s: TopicSummary) -> bool:
        """Whether the run holds the oldest data of some partition of ``s``."""
        before, _ = self._before_and_after(s.topic)
        return not ranges_cover(before, s.partitions)

    def both_ends_of_some(self, s: TopicSummary) -> bool:
        """Whether the run holds the oldest and the newest data of some partition of ``s``."""
        before, after = self._before_and_after(s.topic)
        return not ranges_cover(union_ranges(before, after), s.partitions)


def time_work_due(
    f: LiveFile, snap: Snapshot, now_ms: int, ends: RunEnds | None = None
) -> str | None:
    """What a time rule would still do to ``f``, None if nothing. With ``ends`` (of a run
    that holds ``f``), only what a job of that run could do: retention and tombstones
    need the partition's oldest data in the job, tombstones under a strategy other than
    offset its newest too (``worker.policy``)."""
    for s in passed_horizons(f, snap, now_ms):
        offset = snap.topics[s.topic].config.compaction_strategy == "offset"
        if ends is None or (ends.oldest_of_some(s) if offset else ends.both_ends_of_some(s)):
            return "tombstones past their delete horizon"
    for s in f.topics:
        topic = snap.topics.get(s.topic)
        if topic is None:
            continue
        config = topic.config
        cutoff = config.retention_cutoff_ms(now_ms)
        if (
            cutoff is not None
            and removable_if_oldest(f, s, cutoff, now_ms)
            and (ends is None or ends.oldest_of_some(s))
        ):
            return "records past retention.ms"
        young = left_young_since(f, s, config.min_compaction_lag_ms) if config.compacted else None
        if young is not None and young <= now_ms - config.min_compaction_lag_ms:
            return "records left too young to compact are past min.compaction.lag.ms"
    return None


def _already_full(run: Run, snap: Snapshot, now_ms: int, gone: Collection[str]) -> bool:
    groups = [output_group(f, snap.topics) for f in run]
    if not all(f.level == MAX_LEVEL for f in run) or len(set(groups)) != len(groups):
        return False
    ends = RunEnds(snap, run, gone)
    return not any(time_work_due(f, snap, now_ms, ends) for f in run)


def full_jobs(
    snap: Snapshot,
    now_ms: int,
    unavailable: Collection[str],
    rule: str = "full",
    why: str = "",
    numbers: Numbers = (),
    gone: Collection[str] = frozenset(),
) -> list[Job]:
    """One job per run of available files (files too large to compact split runs).
    ``gone``: files that drop jobs planned with these take first (``RunEnds``)."""
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
        if not _already_full(run, snap, now_ms, gone)
    ]


def daily_due_ms(snap: Snapshot, config: PlannerConfig) -> int | None:
    """When the next daily compaction is due; None for a store that never held data."""
    if snap.last_full_compaction_ms is None:
        return None
    return add_ms(snap.last_full_compaction_ms, config.full_compaction_interval_ms)


def daily_jobs(
    snap: Snapshot,
    now_ms: int,
    config: PlannerConfig,
    unavailable: Collection[str],
    gone: Collection[str] = frozenset(),
) -> list[Job]:
    due = daily_due_ms(snap, config)
    if due is None or now_ms < due:
        return []
    since = now_ms - (due - config.full_compaction_interval_ms)
    interval = config.full_compaction_interval_ms
    return full_jobs(
        snap,
        now_ms,
        unavailable,
        rule="daily",
        why=f"last full compaction {since / HOUR_MS:.1f} h ago >= {interval / HOUR_MS:.1f} h",
        numbers=(("since_last_full_ms", since), ("interval_ms", interval)),
        gone=gone,
    )
