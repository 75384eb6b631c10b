"""max.compaction.lag.ms: a record may stay undeduplicated at most this long.

A file is *dirty* once it holds a record of a topic with max.compaction.lag.ms that is
older than now - lag and has not been through a deduplicating compaction. Files at L2
and above were all written by one (``planner.levels``); of theirs, only records that
compaction left alone as too young (min.compaction.lag.ms) can be dirty. A record is
never dirty before it is older than min.compaction.lag.ms too: compacting it earlier
would leave it as it is.

Dirty files are batched: once the oldest has been dirty for max.lag.buffer.ms, one job
per run deduplicates the span from the oldest dirty file to the youngest, well before
max.lag.deadline.ms. Duplicates of its keys in older top-level files are then left to
top-level runs and the daily compaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from compactor.catalog import LiveFile, Snapshot, Topic, TopicSummary
from compactor.catalog.config import add_ms
from compactor.planner.config import MINUTE_MS, PlannerConfig
from compactor.planner.job import CLEAN_LEVEL, Job
from compactor.planner.sequence import Run, make_job, runs


def clean_level(files: Run) -> int:
    """Where a deduplicating job of ``files`` writes: at CLEAN_LEVEL or above, so that its
    output is clean, and never below an input's level."""
    return max(CLEAN_LEVEL, *(f.level for f in files))


def left_young_since(f: LiveFile, summary: TopicSummary, min_lag_ms: int) -> int | None:
    """The oldest timestamp a record of ``summary`` may have that the compaction writing
    ``f`` (at ``f.created_ms``) found too young to compact; None if there is none."""
    if min_lag_ms <= 0 or summary.max_timestamp <= f.created_ms - min_lag_ms:
        return None
    return max(summary.min_timestamp, f.created_ms - min_lag_ms + 1)


def dirty_since_ms(f: LiveFile, topics: Mapping[str, Topic]) -> int | None:
    """When ``f`` becomes dirty (its oldest undeduplicated record passes max lag and min
    lag), or None if never."""
    since: int | None = None
    for summary in f.topics:
        topic = topics.get(summary.topic)
        if topic is None or not topic.config.compacted:
            continue
        lag = topic.config.effective_max_compaction_lag_ms
        if lag is None:
            continue
        min_lag = topic.config.min_compaction_lag_ms
        if f.level >= CLEAN_LEVEL:
            oldest = left_young_since(f, summary, min_lag)
            if oldest is None:
                continue
        else:
            oldest = summary.min_timestamp
        due = add_ms(oldest, max(lag, min_lag))  # MAX_MS: never
        since = due if since is None else min(since, due)
    return since


def dirty_files(snap: Snapshot, now_ms: int) -> dict[str, int]:
    """Dirty file id -> when it became dirty."""
    out: dict[str, int] = {}
    for f in snap.files:
        since = dirty_since_ms(f, snap.topics)
        if since is not None and since <= now_ms:
            out[f.id] = since
    return out


def max_lag_jobs(
    snap: Snapshot, now_ms: int, config: PlannerConfig, unavailable: Collection[str]
) -> list[Job]:
    dirty = dirty_files(snap, now_ms)
    waiting = {i: s for i, s in dirty.items() if i not in unavailable}
    if not waiting or now_ms - min(waiting.values()) < config.max_lag_buffer_ms:
        return []
    jobs = []
    for run in runs(snap.files, unavailable):
        marks = [i for i, f in enumerate(run) if f.id in waiting]
        if not marks:
            continue
        span = run[marks[0] : marks[-1] + 1]
        oldest = min(waiting[f.id] for f in span if f.id in waiting)
        jobs.append(
            make_job(
                span,
                clean_level(span),
                dedup=True,
                rule="max-lag",
                reason=(
                    f"{len(marks)} files past max.compaction.lag.ms, the oldest dirty for "
                    f"{(now_ms - oldest) / MINUTE_MS:.0f} min "
                    f">= {config.max_lag_buffer_ms / MINUTE_MS:.0f} min"
                ),
                numbers=(
                    ("dirty_files", len(marks)),
                    ("files", len(span)),
                    ("oldest_dirty_since_ms", oldest),
                    ("dirty_for_ms", now_ms - oldest),
                    ("buffer_ms", config.max_lag_buffer_ms),
                    ("deadline_ms", config.max_lag_deadline_ms),
                ),
            )
        )
    return jobs
