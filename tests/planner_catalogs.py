"""Hand-built catalogs for planner tests: builders, hypothesis strategies, and a fake
worker that applies a plan's jobs to a snapshot (``apply_job``).

Files are built directly as ``LiveFile``/``SectionMeta`` (no I/O): the planner only
reads catalog metadata, the files' per-topic summaries. The catalog keeps a file's
sections in its manifest, in the store; here they are kept in ``SECTIONS`` (see
``sections_of``), for the fake worker to merge.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from compactor.catalog import LiveFile, Snapshot, Topic, TopicConfig
from compactor.catalog.changes import replace_files
from compactor.catalog.snapshot import Quarantine
from compactor.fileformat import SectionMeta
from compactor.planner.config import HOUR_MS, MINUTE_MS, GiB, PlannerConfig
from compactor.planner.job import OUTPUT_GROUPS, Job

KB = 1 << 10
GB = 1 << 30
DAY_MS = 24 * HOUR_MS
NOW_MS = 1_700_000_000_000
"""A fixed, realistic clock for the explicit tests."""


# --- builders ---------------------------------------------------------------------------


def topic(name: str, settings: Mapping[str, str], partitions: int = 1) -> Topic:
    """A topic from Kafka-named settings, e.g. ``topic("t", {"cleanup.policy": ...})``."""
    return Topic(name, partitions, TopicConfig.parse(settings))


def compacted(name: str = "c", partitions: int = 1, max_lag_ms: int | None = None) -> Topic:
    settings = {"cleanup.policy": "compact"}
    if max_lag_ms is not None:
        settings["max.compaction.lag.ms"] = str(max_lag_ms)
    return topic(name, settings, partitions)


def plain(name: str = "p", partitions: int = 1) -> Topic:
    return topic(name, {"cleanup.policy": "delete"}, partitions)


def section(
    topic_name: str,
    partition: int = 0,
    *,
    first: int = 0,
    count: int = 10,
    uncompressed: int = 1000,
    min_ts: int = NOW_MS,
    max_ts: int | None = None,
    tombstones: int = 0,
    min_delete_horizon: int | None = None,
) -> SectionMeta:
    return SectionMeta(
        topic=topic_name,
        partition=partition,
        first_offset=first,
        last_offset=first + count - 1,
        record_count=count,
        uncompressed_bytes=uncompressed,
        min_timestamp=min_ts,
        max_timestamp=min_ts if max_ts is None else max_ts,
        tombstones=tombstones,
        position=8,
        length=max(1, uncompressed // 4),
        min_delete_horizon=min_delete_horizon,
    )


SECTIONS: dict[LiveFile, tuple[SectionMeta, ...]] = {}
"""The sections of every file built here (the manifests of a store): a file's summary is
derived from them, so equal files were built from sections with equal summaries. Cleared
by ``cases`` at each example."""


def with_sections(
    file_id: str,
    key: str,
    level: int,
    size: int,
    created_ms: int,
    sections: Sequence[SectionMeta],
) -> LiveFile:
    """A file summing up ``sections``, which ``sections_of`` then returns."""
    f = LiveFile.of_sections(file_id, key, level, size, created_ms, sections)
    SECTIONS[f] = tuple(sections)
    return f


def sections_of(f: LiveFile) -> tuple[SectionMeta, ...]:
    """The sections ``f`` was built from (KeyError for a file not built here)."""
    return SECTIONS[f]


def live_file(
    file_id: str,
    level: int,
    *sections: SectionMeta,
    size: int = 1000,
    created_ms: int = NOW_MS,
) -> LiveFile:
    return with_sections(file_id, f"data/L{level}/{file_id}.cf", level, size, created_ms, sections)


def snapshot(
    topics: Iterable[Topic],
    files: Sequence[LiveFile],
    last_full_compaction_ms: int | None = NOW_MS,
) -> Snapshot:
    return Snapshot(
        version=1,
        topics={t.name: t for t in topics},
        files=tuple(files),
        last_full_compaction_ms=last_full_compaction_ms,
    )


class FileMaker:
    """Files of one topic-partition with consecutive offsets, ids ``<prefix><n>``."""

    def __init__(self, topic_name: str = "c", prefix: str = "f") -> None:
        self.topic_name = topic_name
        self.prefix = prefix
        self.n = 0
        self.next_offset = 0

    def __call__(
        self,
        level: int = 0,
        *,
        size: int = 1000,
        uncompressed: int = 1000,
        min_ts: int = NOW_MS,
        topic_name: str | None = None,
    ) -> LiveFile:
        sec = section(
            topic_name or self.topic_name,
            first=self.next_offset,
            uncompressed=uncompressed,
            min_ts=min_ts,
        )
        self.next_offset += sec.record_count
        f = live_file(f"{self.prefix}{self.n:04d}", level, sec, size=size)
        self.n += 1
        return f

    def many(self, count: int, level: int = 0, **kwargs: int) -> list[LiveFile]:
        return [self(level, **kwargs) for _ in range(count)]  # type: ignore[arg-type]


# --- the fake worker ----------------------------------------------------------------------


def group_of(topics: Mapping[str, Topic], topic_name: str) -> str:
    return "compacted" if topics[topic_name].config.compacted else "plain"


def _merge(sections: Sequence[SectionMeta]) -> SectionMeta:
    first = sections[0]
    return SectionMeta(
        topic=first.topic,
        partition=first.partition,
        first_offset=min(s.first_offset for s in sections),
        last_offset=max(s.last_offset for s in sections),
        record_count=sum(s.record_count for s in sections),
        uncompressed_bytes=sum(s.uncompressed_bytes for s in sections),
        min_timestamp=min(s.min_timestamp for s in sections),
        max_timestamp=max(s.max_timestamp for s in sections),
        tombstones=sum(s.tombstones for s in sections),
        position=8,
        length=sum(s.length for s in sections),
    )


def job_outputs(snap: Snapshot, job: Job, now_ms: int) -> list[LiveFile]:
    """What a worker would commit for ``job``: one file per output group (compacted,
    then plain, as ``worker.runner`` writes them) at the job's output level, its
    sections merged per partition, its size the group's share of the inputs' sizes
    (a file's size split over its sections by uncompressed bytes), created now. A drop
    job has none."""
    if job.drop:
        return []
    by_id = {f.id: f for f in snap.files}
    inputs = [by_id[i.id] for i in job.inputs]
    parts: dict[str, dict[tuple[str, int], list[SectionMeta]]] = {g: {} for g in OUTPUT_GROUPS}
    sizes: dict[str, float] = dict.fromkeys(OUTPUT_GROUPS, 0.0)
    for f in inputs:
        sections = sections_of(f)
        total = sum(max(s.uncompressed_bytes, 1) for s in sections)
        for s in sections:
            g = group_of(snap.topics, s.topic)
            parts[g].setdefault((s.topic, s.partition), []).append(s)
            sizes[g] += f.size * max(s.uncompressed_bytes, 1) / total
    out = []
    for g in OUTPUT_GROUPS:
        if not parts[g]:
            continue
        merged = tuple(_merge(parts[g][tp]) for tp in sorted(parts[g]))
        out.append(
            with_sections(
                file_id=job.output_file_id(g),
                key=job.output_key(g),
                level=job.output_level,
                size=max(1, round(sizes[g])),
                created_ms=now_ms,
                sections=merged,
            )
        )
    return out


def apply_job(snap: Snapshot, job: Job, now_ms: int) -> Snapshot:
    return replace_files(
        snap,
        [i.id for i in job.inputs],
        job_outputs(snap, job, now_ms),
        now_ms,
        full=job.is_full,
        unread=job.drop,
    )


# --- hypothesis strategies ----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    snap: Snapshot
    now_ms: int
    config: PlannerConfig
    busy: frozenset[str]

    @property
    def set_aside(self) -> frozenset[str]:
        """The files no job may take whatever the rules say: busy or quarantined."""
        return self.busy | frozenset(self.snap.quarantined)

    def __repr__(self) -> str:  # short enough to read in a falsifying example
        files = " ".join(
            f"{f.id}:L{f.level}:{f.size}:{'+'.join(t.topic for t in f.topics)}"
            for f in self.snap.files
        )
        return (
            f"Case(now={self.now_ms}, last_full={self.snap.last_full_compaction_ms}, "
            f"config={self.config.to_json()}, busy={sorted(self.busy)}, "
            f"quarantined={sorted(self.snap.quarantined)}, "
            f"topics={ {n: t.config.to_json() for n, t in self.snap.topics.items()} }, "
            f"files=[{files}])"
        )


@st.composite
def planner_configs(draw: st.DrawFn) -> PlannerConfig:
    """Small triggers so that random catalogs of tens of files make every rule fire;
    sometimes the defaults for everything else."""
    settings: dict[str, str] = {}
    settings["level.trigger.files"] = str(draw(st.integers(2, 8)))
    lo = draw(st.integers(2, 5))
    settings["top.run.min.files"] = str(lo)
    settings["top.run.max.files"] = str(draw(st.integers(lo, 12)))
    settings["top.run.size.ratio"] = str(draw(st.sampled_from([1.0, 1.5, 2.0, 3.0, 10.0])))
    if draw(st.booleans()):
        settings["full.compaction.interval.ms"] = str(draw(st.integers(1, 2 * DAY_MS)))
    if draw(st.booleans()):
        settings["max.partition.uncompressed.bytes"] = str(
            draw(st.sampled_from([1 * GiB, 10 * GiB, 128 * GiB]))
        )
    buffer = draw(st.integers(0, 30 * MINUTE_MS))
    settings["max.lag.buffer.ms"] = str(buffer)
    settings["max.lag.deadline.ms"] = str(buffer + draw(st.integers(1, 30 * MINUTE_MS)))
    return PlannerConfig.parse(settings)


@st.composite
def topic_sets(draw: st.DrawFn) -> list[Topic]:
    n = draw(st.integers(1, 4))
    topics = []
    for i in range(n):
        settings = {
            "cleanup.policy": draw(st.sampled_from(["compact", "compact,delete", "delete"]))
        }
        if draw(st.integers(0, 2)) > 0:
            # below, at and above the 2 h floor
            lag = draw(st.sampled_from([0, 60_000, HOUR_MS, 2 * HOUR_MS, 6 * HOUR_MS, DAY_MS]))
            settings["max.compaction.lag.ms"] = str(lag)
        topics.append(topic(f"t{i}", settings, draw(st.integers(1, 3))))
    return topics


def _level_sequence(rng: random.Random, shape: str, n: int) -> list[int]:
    if shape == "random":
        return [rng.randint(0, 4) for _ in range(n)]
    # an LSM-like sequence: older data at higher levels, with a few files out of place
    levels = sorted((rng.randint(0, 4) for _ in range(n)), reverse=True)
    if shape == "lsm-shuffled":
        for _ in range(rng.randint(1, 3)):
            if n:
                levels[rng.randrange(n)] = rng.randint(0, 4)
    return levels


@st.composite
def cases(draw: st.DrawFn, max_files: int = 80) -> Case:
    """A random catalog, clock, config and busy set.

    Hypothesis draws the shape (topics, file count, level shape, clocks, config); a
    seeded ``random.Random`` fills in each file's sections, so catalogs of many files
    stay cheap to generate, and shrinking the file count keeps the files it keeps."""
    SECTIONS.clear()  # an example's files and its outputs are all it needs
    topics = draw(topic_sets())
    by_group: dict[bool, list[tuple[str, int]]] = {True: [], False: []}
    for t in topics:
        by_group[t.config.compacted].extend((t.name, p) for p in range(t.partitions))
    all_tps = by_group[True] + by_group[False]
    groups = [g for g in (True, False) if by_group[g]]
    now = NOW_MS + draw(st.integers(0, 3 * DAY_MS))
    n = draw(st.integers(0, max_files))
    shape = draw(st.sampled_from(["lsm", "lsm-shuffled", "random"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    too_large_odds = draw(st.sampled_from([0.0, 0.02, 0.1]))
    # the data's timestamps grow along the sequence, over a span ending a while ago
    span = draw(st.integers(0, 3 * DAY_MS))
    end = now - draw(st.integers(0, 6 * HOUR_MS))
    levels = _level_sequence(rng, shape, n)
    # file sizes in 1 KiB .. ~100 GB, in a narrow band (similar sizes) or spread wide
    spread = draw(st.sampled_from([0.5, 1.0, 3.0, 26.6]))
    size_lo = draw(st.floats(10, 36.6 - spread))
    size_hi = size_lo + spread
    next_offset = dict.fromkeys(all_tps, 0)
    cap = 128 * GiB
    files = []
    for i, level in enumerate(levels):
        ts = end - span + span * i // max(1, n)
        # L0 files of an ingest may mix both groups; above L0 a file holds one group
        pool = all_tps if level == 0 else by_group[rng.choice(groups)]
        chosen = sorted(rng.sample(pool, rng.randint(1, len(pool))))
        size = int(2 ** rng.uniform(size_lo, size_hi))
        sections = []
        for tp in chosen:
            count = rng.randint(1, 1000)
            uncompressed = size * rng.randint(1, 4) // len(chosen)
            if rng.random() < too_large_odds:
                uncompressed = cap + rng.randint(1, 10 * GiB)  # too large, always
            sections.append(
                section(
                    tp[0],
                    tp[1],
                    first=next_offset[tp],
                    count=count,
                    uncompressed=uncompressed,
                    min_ts=ts - rng.randint(0, HOUR_MS),
                    max_ts=ts,
                )
            )
            next_offset[tp] += count
        files.append(live_file(f"f{i:03d}", level, *sections, size=size, created_ms=ts))
    config = draw(planner_configs())
    last_full: int | None = None
    daily = draw(st.sampled_from(["never", "not due", "not due", "due"]))
    interval = config.full_compaction_interval_ms
    if daily == "not due":
        last_full = now - interval + 1 + draw(st.integers(0, interval - 1))
    elif daily == "due":
        last_full = now - interval - draw(st.integers(0, DAY_MS))
    busy: frozenset[str] = frozenset()
    if draw(st.booleans()) and files:
        odds = draw(st.sampled_from([0.02, 0.1, 0.3]))
        busy = frozenset(f.id for f in files if rng.random() < odds)
    quarantined: dict[str, Quarantine] = {}
    if draw(st.booleans()) and files:  # files an operator set aside (damaged)
        odds = draw(st.sampled_from([0.02, 0.1]))
        quarantined = {f.id: Quarantine(f.id, "damaged", now) for f in files if rng.random() < odds}
    snap = Snapshot(
        version=1,
        topics={t.name: t for t in topics},
        next_offsets=next_offset,
        files=tuple(files),
        quarantined=quarantined,
        last_full_compaction_ms=last_full,
    )
    return Case(snap, now, config, busy)
