"""Cassandra's size-tiered compaction strategy (STCS), the baseline the simulator
compares the planner against.

As in Cassandra: files whose sizes are within bucket.low..bucket.high times a bucket's
average size share the bucket, files under min.sstable.size all share one bucket, and
a bucket of at least min.threshold files is compacted, at most max.threshold at a time.
Unlike Cassandra's SSTables, our inputs must be contiguous in the live sequence, so
buckets are formed along it. Every STCS job deduplicates; outputs go to L2 (levels do
not mean anything to STCS; L2 marks the file as deduplicated for max.compaction.lag.ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from compactor.catalog import Snapshot
from compactor.planner.config import PlannerConfig
from compactor.planner.maxlag import clean_level
from compactor.planner.plan import Plan
from compactor.planner.sequence import Run, make_job, runs, unavailable_ids


@dataclass(frozen=True, slots=True)
class StcsConfig:
    min_threshold: int = 4
    max_threshold: int = 32
    bucket_low: float = 0.5
    bucket_high: float = 1.5
    min_sstable_size: int = 50 << 20


def _buckets(run: Run, config: StcsConfig) -> list[Run]:
    buckets: list[Run] = []
    start = 0
    total = 0
    for i, f in enumerate(run):
        n = i - start
        if n:
            avg = total / n
            small = f.size < config.min_sstable_size and avg < config.min_sstable_size
            similar = config.bucket_low * avg <= f.size <= config.bucket_high * avg
            if not (small or similar):
                buckets.append(run[start:i])
                start, total = i, 0
        total += f.size
    buckets.append(run[start:])
    return buckets


def stcs_plan(
    snap: Snapshot,
    now_ms: int,
    config: StcsConfig | None = None,
    busy: frozenset[str] = frozenset(),
    limits: PlannerConfig | None = None,
) -> Plan:
    config = config or StcsConfig()
    limits = limits or PlannerConfig()
    unavailable = unavailable_ids(snap, limits, busy)
    jobs = []
    for run in runs(snap.files, unavailable):
        for bucket in _buckets(run, config):
            if len(bucket) < config.min_threshold:
                continue
            for start in range(0, len(bucket), config.max_threshold):
                chunk = bucket[start : start + config.max_threshold]
                if len(chunk) < config.min_threshold:
                    break
                jobs.append(
                    make_job(
                        chunk,
                        clean_level(chunk),
                        dedup=True,
                        rule="stcs",
                        reason=f"a bucket of {len(bucket)} similar-sized files",
                        numbers=(("bucket_files", len(bucket)), ("files", len(chunk))),
                    )
                )
    return Plan(tuple(jobs))
