"""delete.retention.ms: tombstones past their delete horizon leave (KIP-534).

A tombstone may go once its delete horizon has passed, in a deduplicating job whose
inputs hold its partition's oldest live data (and, under the timestamp and header
strategies, its newest too): only then can no value it outranks resurface
(docs/ARCHITECTURE.md §4, invariant 1(b)). The catalog keeps each file's earliest
horizon per topic.

Files whose earliest horizon has passed wait tombstone.buffer.ms, so that one job takes
the tombstones of many. Then each gets a span of the live sequence: from the oldest
holder of its partitions (of the topics whose horizon passed) to itself, or to their
newest holder under those strategies; the span grows until every file in it whose
horizon passed has its holders inside too, and overlapping spans merge. A span that
holds a file no job may take (running, or too large) waits.

A tombstone such a job keeps all the same (its key's older value sat in an earlier
window of the key buffer, or a record of its key too young to compact ranks below it)
gets a new horizon, so the rule comes back to it a delete.retention.ms later rather than
at once.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from compactor.catalog import LiveFile, Snapshot, TopicSummary
from compactor.catalog.summary import ranges_overlap
from compactor.planner.config import MINUTE_MS, PlannerConfig
from compactor.planner.job import Job
from compactor.planner.maxlag import clean_level
from compactor.planner.sequence import make_job


def passed_horizons(f: LiveFile, snap: Snapshot, now_ms: int) -> list[TopicSummary]:
    """The summaries of ``f`` holding a tombstone whose delete horizon has passed."""
    out = []
    for s in f.topics:
        topic = snap.topics.get(s.topic)
        if topic is None or not topic.config.compacted or s.min_delete_horizon is None:
            continue
        if s.min_delete_horizon <= now_ms:
            out.append(s)
    return out


def _span(
    files: Sequence[LiveFile], due: dict[int, list[TopicSummary]], snap: Snapshot, start: int
) -> tuple[int, int]:
    """The smallest span around ``start`` that holds the oldest (and, where the strategy
    needs it, newest) holder of every partition of every passed horizon inside it."""
    lo = hi = start
    pending, seen = [start], {start}
    while pending:
        for s in due[pending.pop()]:
            newest_too = snap.topics[s.topic].config.compaction_strategy != "offset"
            holders = [
                i
                for i, g in enumerate(files)
                if (gs := g.topic(s.topic)) is not None
                and ranges_overlap(gs.partitions, s.partitions)
            ]
            lo = min(lo, holders[0])
            if newest_too:
                hi = max(hi, holders[-1])
        for i in range(lo, hi + 1):
            if i in due and i not in seen:
                seen.add(i)
                pending.append(i)
    return lo, hi


def tombstone_jobs(
    snap: Snapshot, now_ms: int, config: PlannerConfig, unavailable: Collection[str]
) -> list[Job]:
    files = snap.files
    due = {i: d for i, f in enumerate(files) if (d := passed_horizons(f, snap, now_ms))}
    waiting = [i for i in due if files[i].id not in unavailable]
    if not waiting:
        return []
    earliest = min(s.min_delete_horizon or 0 for i in waiting for s in due[i])
    if now_ms - earliest < config.tombstone_buffer_ms:
        return []
    spans: list[tuple[int, int]] = []
    for lo, hi in sorted(_span(files, due, snap, i) for i in waiting):
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    jobs = []
    for lo, hi in spans:
        run = files[lo : hi + 1]
        if any(f.id in unavailable for f in run):
            continue
        holding = [i for i in range(lo, hi + 1) if i in due]
        oldest = min(s.min_delete_horizon or 0 for i in holding for s in due[i])
        jobs.append(
            make_job(
                run,
                clean_level(run),
                dedup=True,
                rule="tombstones",
                reason=(
                    f"{len(holding)} files hold tombstones past their delete horizon, the "
                    f"earliest passed {(now_ms - oldest) / MINUTE_MS:.0f} min ago "
                    f">= tombstone.buffer.ms {config.tombstone_buffer_ms / MINUTE_MS:.0f} min; "
                    f"with their partitions' oldest data"
                ),
                numbers=(
                    ("tombstone_files", len(holding)),
                    ("files", len(run)),
                    ("earliest_horizon_ms", oldest),
                    ("buffer_ms", config.tombstone_buffer_ms),
                ),
            )
        )
    return jobs
