"""retention.ms: records past retention leave the store, whatever their file's level.

Retention deletes a partition from its start, as Kafka deletes a log's oldest segments
while their newest record is past retention: a record goes once it and every record
before it in its partition are older than now - retention.ms (docs/ARCHITECTURE.md §4,
invariant 1(c)). The planner sees a file's sections only through per-topic summaries,
so it acts on what they prove; both rules run before every size-driven rule.

- **drop**: a file is *expired* when every one of its sections holds only records past
  retention (each summary's newest record is) and no older live file outside its job
  holds one of its partitions. Expired files leave the catalog by a metadata-only
  commit: no GET, no rewrite; their objects are deleted after the grace period. A drop
  job takes a contiguous run of expired files; the files of earlier runs count as older
  holders for later runs, so that every drop job is safe to commit alone, in any order.
- **rewrite**: a file that holds records past retention at the start of partitions no
  older file holds, without being expired, is rewritten without them: a copy job (at L2
  and above, where every file is deduplicated, the job deduplicates too, so that its
  output is as clean as its input). It is due once the expired share of its bytes
  (estimated from the summaries) reaches retention.min.expired.ratio (unless the whole
  file expires within retention.max.delay.ms, to be dropped unread), and in any case
  retention.max.delay.ms after its oldest record expired.

A rewrite certainly removes a section whose newest record is past retention. Records
past retention inside a younger section may sit behind a younger record (timestamps
out of order), where they stay; so a file is rewritten for them only if it was written
before its oldest record expired, never twice for the same record.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from compactor.catalog import LiveFile, Snapshot, TopicSummary
from compactor.catalog.config import add_ms
from compactor.catalog.summary import PartitionRanges, ranges_cover, ranges_overlap, union_ranges
from compactor.planner.config import MINUTE_MS, PlannerConfig
from compactor.planner.job import CLEAN_LEVEL, Job
from compactor.planner.sequence import make_job


def cutoffs(snap: Snapshot, now_ms: int) -> dict[str, int]:
    """Topic -> retention cutoff, for the topics that delete by retention."""
    out = {}
    for name, topic in snap.topics.items():
        cutoff = topic.config.retention_cutoff_ms(now_ms)
        if cutoff is not None:
            out[name] = cutoff
    return out


def removable_if_oldest(f: LiveFile, s: TopicSummary, cutoff: int, now_ms: int) -> bool:
    """Whether a job holding the oldest data of ``s``'s partitions would remove records of
    ``s`` past retention (``cutoff``): certainly if a whole section expired; perhaps if
    ``f`` was written before its oldest record expired (else the job that wrote it has
    tried, and the record sits behind a younger one)."""
    if s.min_timestamp >= cutoff:
        return False
    return s.min_section_max_timestamp < cutoff or f.created_ms <= add_ms(
        s.min_timestamp, now_ms - cutoff
    )


def _fully_expired(s: TopicSummary, cutoffs: Mapping[str, int]) -> bool:
    cutoff = cutoffs.get(s.topic)
    return cutoff is not None and s.max_timestamp < cutoff


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A file that holds records past retention, and what a rewrite would gain."""

    file: LiveFile
    removes: bool
    """A rewrite now would remove records (see the module's doc)."""
    expired_share: float
    """Of the file's uncompressed bytes, an estimate: records assumed spread evenly
    between a summary's oldest and newest timestamps."""
    expired_since_ms: int
    """When the file's oldest record passed retention."""
    wholly_expires_ms: int
    """When its newest record will have (never, for a topic kept forever)."""


@dataclass(frozen=True, slots=True)
class RetentionState:
    """What retention can do to the live files now."""

    cutoffs: Mapping[str, int]
    """Topic -> retention cutoff (``cutoffs``)."""
    drops: tuple[tuple[LiveFile, ...], ...]
    """Runs of expired files, each one drop job."""
    rewrites: tuple[Rewrite, ...]


class _Blocked:
    """Per topic, the partitions an older live file holds (its data stays for now)."""

    def __init__(self) -> None:
        self._by_topic: dict[str, PartitionRanges] = {}

    def add(self, f: LiveFile) -> None:
        for s in f.topics:
            self._by_topic[s.topic] = union_ranges(self._by_topic.get(s.topic, ()), s.partitions)

    def overlaps(self, s: TopicSummary) -> bool:
        return ranges_overlap(self._by_topic.get(s.topic, ()), s.partitions)

    def covers(self, s: TopicSummary) -> bool:
        return ranges_cover(self._by_topic.get(s.topic, ()), s.partitions)


def retention_state(
    snap: Snapshot,
    now_ms: int,
    unavailable: Collection[str] = frozenset(),
    droppable: Collection[str] = frozenset(),
) -> RetentionState:
    """Walks the live sequence oldest first (files in ``unavailable`` stay, and block,
    except that those also in ``droppable`` may still be dropped unread:
    ``sequence.droppable_ids``)."""
    cuts = cutoffs(snap, now_ms)
    if not cuts:
        return RetentionState(cuts, (), ())
    blocked = _Blocked()
    drops: list[tuple[LiveFile, ...]] = []
    run: list[LiveFile] = []
    rewrites: list[Rewrite] = []
    for f in snap.files:
        available = f.id not in unavailable
        if (
            (available or f.id in droppable)
            and f.topics
            and all(_fully_expired(s, cuts) and not blocked.overlaps(s) for s in f.topics)
        ):
            run.append(f)
            continue
        if run:
            drops.append(tuple(run))
            for g in run:
                blocked.add(g)
            run = []
        if available and (rewrite := _rewrite(f, cuts, blocked, now_ms)) is not None:
            rewrites.append(rewrite)
        blocked.add(f)
    if run:
        drops.append(tuple(run))
    return RetentionState(cuts, tuple(drops), tuple(rewrites))


def _rewrite(
    f: LiveFile, cuts: Mapping[str, int], blocked: _Blocked, now_ms: int
) -> Rewrite | None:
    expired_bytes = 0.0
    since: int | None = None
    removes = False
    wholly = -(1 << 62)
    for s in f.topics:
        cutoff = cuts.get(s.topic)
        wholly = max(
            wholly, 1 << 62 if cutoff is None else add_ms(s.max_timestamp, now_ms - cutoff)
        )
        if cutoff is None or s.min_timestamp >= cutoff:
            continue
        retention_ms = now_ms - cutoff
        expiry = add_ms(s.min_timestamp, retention_ms)
        since = expiry if since is None else min(since, expiry)
        if s.max_timestamp < cutoff:
            expired_bytes += s.uncompressed_bytes
            removes |= not blocked.covers(s)
        else:
            span = s.max_timestamp - s.min_timestamp + 1
            expired_bytes += s.uncompressed_bytes * (cutoff - s.min_timestamp) / span
            removes |= not blocked.overlaps(s) and removable_if_oldest(f, s, cutoff, now_ms)
    if since is None:
        return None
    share = expired_bytes / max(1, f.uncompressed_bytes)
    return Rewrite(f, removes, min(1.0, share), since, add_ms(wholly, 1))


def why_not_droppable(snap: Snapshot, now_ms: int, ids: Collection[str]) -> str | None:
    """Why the contiguous run ``ids`` may not be dropped now, None if it may: a drop
    job's premise, checked again by the worker against the snapshot it commits to."""
    cuts = cutoffs(snap, now_ms)
    in_run = frozenset(ids)
    blocked = _Blocked()
    for f in snap.files:
        if f.id not in in_run:
            blocked.add(f)
            continue
        for s in f.topics:
            if not _fully_expired(s, cuts):
                return f"file {f.id} holds records of {s.topic} within retention.ms"
            if blocked.overlaps(s):
                return f"an older file still holds a partition of {s.topic} that {f.id} holds"
    return None


def _drop_job(run: tuple[LiveFile, ...], cuts: Mapping[str, int]) -> Job:
    newest = max(s.max_timestamp for f in run for s in f.topics)
    return make_job(
        run,
        0,
        dedup=False,
        rule="retention",
        reason=(
            f"every record of {len(run)} files is past retention.ms; dropped without reading them"
        ),
        numbers=(
            ("files", len(run)),
            ("bytes", sum(f.size for f in run)),
            ("records", sum(f.record_count for f in run)),
            ("newest_record_ms", newest),
            ("expired_for_ms", min(cuts[s.topic] for f in run for s in f.topics) - newest),
        ),
        drop=True,
    )


def _rewrite_job(r: Rewrite, now_ms: int, config: PlannerConfig) -> Job:
    f = r.file
    waited = now_ms - r.expired_since_ms
    if r.expired_share >= config.retention_min_expired_ratio:
        why = (
            f"about {r.expired_share:.0%} of the file is past retention.ms "
            f"(>= retention.min.expired.ratio {config.retention_min_expired_ratio:.0%})"
        )
    else:
        why = (
            f"its oldest record has been past retention.ms for {waited / MINUTE_MS:.0f} min "
            f">= retention.max.delay.ms {config.retention_max_delay_ms / MINUTE_MS:.0f} min"
        )
    return make_job(
        (f,),
        max(1, f.level),
        dedup=f.level >= CLEAN_LEVEL,
        rule="retention",
        reason=f"rewritten without its expired records: {why}",
        numbers=(
            ("bytes", f.size),
            ("expired_share", round(r.expired_share, 3)),
            ("expired_for_ms", waited),
            ("min_expired_ratio", config.retention_min_expired_ratio),
            ("max_delay_ms", config.retention_max_delay_ms),
        ),
    )


def due(r: Rewrite, now_ms: int, config: PlannerConfig) -> bool:
    """Worth it (the ratio), unless the whole file expires within the delay anyway and
    will then be dropped unread; or late (the delay)."""
    if not r.removes:
        return False
    waited = now_ms - r.expired_since_ms
    soon_dropped = r.wholly_expires_ms - now_ms < config.retention_max_delay_ms
    worth_it = r.expired_share >= config.retention_min_expired_ratio and not soon_dropped
    return worth_it or waited >= config.retention_max_delay_ms


def retention_jobs(
    snap: Snapshot,
    now_ms: int,
    config: PlannerConfig,
    unavailable: Collection[str],
    *,
    rewrites: bool = True,
    droppable: Collection[str] = frozenset(),
) -> list[Job]:
    """Drop jobs, then (``rewrites``) the rewrites that are due. Files in ``unavailable``
    are offered to no job, except a drop when they are also in ``droppable``."""
    state = retention_state(snap, now_ms, unavailable, droppable)
    jobs = [_drop_job(run, state.cutoffs) for run in state.drops]
    if rewrites:
        jobs += [_rewrite_job(r, now_ms, config) for r in state.rewrites if due(r, now_ms, config)]
    return jobs
