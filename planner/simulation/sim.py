"""The simulation loop: agents write L0 files, a policy plans, simulated workers run.

Each step of ``step_s`` seconds: jobs whose time is up commit (their outputs computed
by the cost model), agents add the files they wrote, and while workers are free the
policy plans over the catalog snapshot, with running jobs' files marked busy. The
catalog is a real ``Snapshot`` changed by the real ``catalog.changes``; only the
worker is a model:

- a job takes ``job_overhead_s`` + input bytes / ``worker_bytes_per_s``; a drop job
  (every input past retention.ms) reads nothing and takes ``job_overhead_s``;
- like the real worker, a job runs on one clock, its start: the retention cutoff, the
  delete horizons it stamps and drops, and its output's ``created_ms``;
- a copy (L0 -> L1, or any job of a topic that is not compacted) keeps every record; a
  deduplicating job keeps one record per distinct key among all the ingested records
  its inputs cover (``KeyModel``), less the keys whose tombstones were dropped;
- a job whose inputs hold the partition's oldest data removes the records past
  retention.ms, and (deduplicating) the tombstones past their delete horizon
  (``planner.simulation.files`` has the model of time and tombstones).

The topic has one partition; every file holds it, so a job holds its oldest data when
its first input is the first live file.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from compactor.catalog import LiveFile, Snapshot, TopicConfig
from compactor.catalog.changes import append_files, create_topic, replace_files
from compactor.catalog.config import CLEANUP_POLICIES, add_ms
from compactor.planner.config import PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.maxlag import dirty_files, dirty_since_ms
from compactor.planner.plan import Plan
from compactor.planner.simulation.files import FileModel, combine, deduplicate, expire
from compactor.planner.simulation.keys import KeyModel

TOPIC = "sim"
Policy = Callable[[Snapshot, int, frozenset[str]], Plan]


@dataclass(frozen=True)
class Workload:
    agents: int = 1
    files_per_second: float = 4.0
    """Per agent."""
    hours: float = 1.0
    records_per_file: int = 1000
    record_bytes: int = 100
    """Bytes a record takes in a file, on average."""
    keys: int = 1_000_000
    key_skew: float = 1.0
    """Zipf exponent of key updates; 0 is uniform."""
    max_compaction_lag_ms: int | None = None
    cleanup_policy: str = "compact"
    retention_ms: int = -1
    """-1 keeps records forever (and so does a topic whose policy has no ``delete``)."""
    tombstone_ratio: float = 0.0
    """The share of ingested records that are tombstones."""
    delete_retention_ms: int = 86_400_000

    def __post_init__(self) -> None:
        if self.agents < 1 or self.files_per_second <= 0 or self.hours <= 0:
            raise ValueError("agents, files per second and hours must be positive")
        if not self.key_skew >= 0:
            raise ValueError(f"--key-skew must be >= 0, got {self.key_skew}")
        if self.records_per_file < 1 or self.record_bytes < 1:
            raise ValueError("records per file and record bytes must be positive")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(f"--cleanup-policy must be one of {', '.join(CLEANUP_POLICIES)}")
        if self.retention_ms < -1:
            raise ValueError("--retention-ms must be >= 0, or -1 to keep records forever")
        if not 0.0 <= self.tombstone_ratio <= 1.0:
            raise ValueError("--tombstone-ratio must be between 0 and 1")
        if self.delete_retention_ms < 0:
            raise ValueError("--delete-retention-ms must be >= 0")

    def topic_config(self) -> TopicConfig:
        config = {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "delete.retention.ms": str(self.delete_retention_ms),
        }
        if self.max_compaction_lag_ms is not None:
            config["max.compaction.lag.ms"] = str(self.max_compaction_lag_ms)
        return TopicConfig.parse(config)


@dataclass(frozen=True)
class WorkerModel:
    workers: int = 4
    worker_bytes_per_s: float = 100 * (1 << 20)
    job_overhead_s: float = 1.0
    step_s: float = 1.0
    sample_every_s: float = 300.0


@dataclass
class Sample:
    t_s: float
    files_per_level: list[int]
    live_records: int
    live_bytes: int
    duplicates_live: int
    tombstones_live: int
    oldest_record_age_s: float | None
    write_amplification: float
    dirty_files: int


@dataclass
class RetentionReport:
    """Live size over time and how late retention.ms was applied."""

    retention_ms: int
    """-1: the topic keeps records forever."""
    max_delay_ms: int
    """retention.max.delay.ms, which ``max_lateness_ms`` is to be read against."""
    ingest_per_retention_bytes: int | None = None
    """Ingest rate x retention.ms: what a store of a topic that is not compacted holds
    when it applies retention exactly (deduplication makes a compacted one smaller)."""
    peak_live_bytes: int = 0
    peak_live_records: int = 0
    final_live_bytes: int = 0
    final_live_records: int = 0
    steady_live_bytes: int = 0
    """The mean live bytes over the run's last retention.ms (the whole run if shorter)."""
    max_lateness_ms: int | None = None
    """Max over every step of (age of the oldest live record - retention.ms); None
    without retention, negative while no record has expired."""
    max_lateness_at_s: float | None = None
    drop_jobs: int = 0
    files_dropped: int = 0
    bytes_dropped_unread: int = 0
    rewrite_jobs: int = 0
    """Jobs of rule ``retention`` that rewrite a file (not drops)."""
    records_removed: int = 0
    """Records past retention removed by any job, drops included."""

    def to_json(self) -> dict[str, Any]:
        return {
            "retention_ms": self.retention_ms,
            "ingest_per_retention_bytes": self.ingest_per_retention_bytes,
            "peak_live_bytes": self.peak_live_bytes,
            "peak_live_records": self.peak_live_records,
            "final_live_bytes": self.final_live_bytes,
            "final_live_records": self.final_live_records,
            "steady_live_bytes": self.steady_live_bytes,
            "max_retention_lateness_ms": self.max_lateness_ms,
            "max_retention_lateness_at_s": self.max_lateness_at_s,
            "retention_max_delay_ms": self.max_delay_ms,
            "drop_jobs": self.drop_jobs,
            "files_dropped": self.files_dropped,
            "bytes_dropped_unread": self.bytes_dropped_unread,
            "rewrite_jobs": self.rewrite_jobs,
            "records_removed": self.records_removed,
        }


@dataclass
class TombstoneReport:
    """How long tombstones stayed past their delete horizon."""

    delete_retention_ms: int
    buffer_ms: int
    """tombstone.buffer.ms."""
    ingested: int = 0
    stamped: int = 0
    """Tombstones a deduplicating job kept and gave a horizon (now + delete.retention.ms)."""
    dropped_past_horizon: int = 0
    removed_other: int = 0
    """Tombstones gone otherwise: superseded by a newer record of their key, or past
    retention.ms."""
    live_end: int = 0
    max_past_horizon_ms: int | None = None
    """Max over every step of (now - the earliest delete horizon of a live file); None
    if no horizon was ever set, negative if none ever passed."""
    max_past_horizon_at_s: float | None = None
    max_unstamped_age_ms: int | None = None
    """Max over every step of the age of the oldest tombstone no deduplicating job had
    seen yet (its horizon is set only then)."""

    def to_json(self) -> dict[str, Any]:
        past = self.max_past_horizon_ms
        return {
            "ingested": self.ingested,
            "stamped": self.stamped,
            "dropped_past_horizon": self.dropped_past_horizon,
            "removed_other": self.removed_other,
            "live_end": self.live_end,
            "max_past_horizon_ms": past,
            "max_past_horizon_at_s": self.max_past_horizon_at_s,
            "max_since_horizon_set_ms": None if past is None else past + self.delete_retention_ms,
            "bound_ms": add_ms(self.delete_retention_ms, self.buffer_ms),  # MAX_MS: never
            "delete_retention_ms": self.delete_retention_ms,
            "tombstone_buffer_ms": self.buffer_ms,
            "max_unstamped_age_ms": self.max_unstamped_age_ms,
        }


@dataclass
class Result:
    policy: str
    first_dedup_seconds: float | None = None
    samples: list[Sample] = field(default_factory=list)
    ingested_files: int = 0
    ingested_bytes: int = 0
    compaction_bytes_written: int = 0
    compaction_bytes_read: int = 0
    jobs_by_rule: Counter[str] = field(default_factory=Counter)
    dirty_delays_s: list[float] = field(default_factory=list)
    """For every file that became dirty: how long until a job replaced it (or, for
    files still dirty at the end, how long it has been so far)."""
    deadline_s: float = 0.0
    max_job_s: float = 0.0
    """The longest a job took (the slack the time bounds allow for one job)."""
    retention: RetentionReport = field(default_factory=lambda: RetentionReport(-1, 0))
    tombstones: TombstoneReport = field(default_factory=lambda: TombstoneReport(0, 0))

    @property
    def write_amplification(self) -> float:
        return (self.ingested_bytes + self.compaction_bytes_written) / max(1, self.ingested_bytes)

    def to_json(self) -> dict[str, Any]:
        late = [d for d in self.dirty_delays_s if d > self.deadline_s]
        return {
            "policy": self.policy,
            "first_dedup_seconds": self.first_dedup_seconds,
            "ingested_files": self.ingested_files,
            "ingested_bytes": self.ingested_bytes,
            "compaction_bytes_read": self.compaction_bytes_read,
            "compaction_bytes_written": self.compaction_bytes_written,
            "write_amplification": round(self.write_amplification, 3),
            "jobs_by_rule": dict(sorted(self.jobs_by_rule.items())),
            "max_job_seconds": round(self.max_job_s, 3),
            "max_lag": {
                "dirty_files": len(self.dirty_delays_s),
                "compacted_within_deadline": len(self.dirty_delays_s) - len(late),
                "late": len(late),
                "max_delay_s": max(self.dirty_delays_s, default=0.0),
                "deadline_s": self.deadline_s,
            },
            "retention": self.retention.to_json(),
            "tombstones": self.tombstones.to_json(),
            "duplicates_live_mean": round(
                sum(s.duplicates_live for s in self.samples) / max(1, len(self.samples))
            ),
            "final": asdict(self.samples[-1]) if self.samples else None,
            "samples": [asdict(s) for s in self.samples],
        }


@dataclass(order=True)
class _Running:
    end_s: float
    job: Job = field(compare=False)
    start_ms: int = field(compare=False)
    """The worker's clock for the whole job."""
    holds_oldest: bool = field(compare=False)


class Simulation:
    def __init__(
        self,
        policy_name: str,
        policy: Policy,
        workload: Workload,
        worker: WorkerModel,
        planner_config: PlannerConfig | None = None,
        keys: KeyModel | None = None,
    ) -> None:
        self.policy = policy
        self.workload = workload
        self.worker = worker
        self.keys = keys or KeyModel(workload.keys, workload.key_skew)
        self.config = planner_config or PlannerConfig()
        self.topic = workload.topic_config()
        self.snap = create_topic(Snapshot(), TOPIC, 1, self.topic)
        self.models: dict[str, FileModel] = {}
        """What the worker model knows of each live file (the catalog keeps summaries)."""
        self.running: list[_Running] = []
        self.busy: set[str] = set()
        self.next_file = 0
        self.live_bytes = 0
        self.live_records = 0
        self.deadline_s = self.config.max_lag_deadline_ms / 1000
        config = self.config
        self.result = Result(
            policy_name,
            deadline_s=self.deadline_s,
            retention=RetentionReport(self._retention_ms(), config.retention_max_delay_ms),
            tombstones=TombstoneReport(workload.delete_retention_ms, config.tombstone_buffer_ms),
        )
        self._tail: list[int] = [0, 0]
        """Sum and count of per-step live bytes over the run's last retention.ms."""

    def _retention_ms(self) -> int:
        return self.topic.retention_ms if self.topic.retention_cutoff_ms(0) is not None else -1

    def run(self, progress: Callable[[float], None] = lambda t: None) -> Result:
        w = self.workload
        end_s = w.hours * 3600
        rate = w.agents * w.files_per_second
        retention = self.result.retention
        if retention.retention_ms >= 0:
            retention.ingest_per_retention_bytes = round(
                rate * w.records_per_file * w.record_bytes * retention.retention_ms / 1000
            )
        tail_from_s = end_s - retention.retention_ms / 1000 if retention.retention_ms >= 0 else 0.0
        written = 0
        next_sample = 0.0
        t = 0.0
        while t < end_s:
            t = min(end_s, t + self.worker.step_s)
            while self.running and self.running[0].end_s <= t:
                self._commit(heapq.heappop(self.running))
            due = math.floor(t * rate) - written
            if due > 0:
                self._ingest(due, t, rate)
                written += due
            self._observe(t, tail_from_s)
            if len(self.running) < self.worker.workers:
                self._dispatch(t)
            if t >= next_sample or t >= end_s:
                self.result.samples.append(self._sample(t))
                next_sample += self.worker.sample_every_s
                progress(t)
        self._censor_dirty(end_s)
        retention.final_live_bytes = self.live_bytes
        retention.final_live_records = self.live_records
        retention.steady_live_bytes = round(self._tail[0] / max(1, self._tail[1]))
        self.result.tombstones.live_end = sum(m.tombstones for m in self.models.values())
        return self.result

    # -- the model ---------------------------------------------------------------------
    def _ingest(self, count: int, t_s: float, rate: float) -> None:
        w = self.workload
        now_ms = int(t_s * 1000)
        span_ms = int(1000 * w.agents / rate)
        nxt = self.snap.next_offsets[(TOPIC, 0)]
        tombstones = round(w.records_per_file * w.tombstone_ratio)
        files = []
        for _ in range(count):
            model = FileModel(
                records=w.records_per_file,
                size=w.records_per_file * w.record_bytes,
                raw=w.records_per_file,
                first_offset=nxt,
                last_offset=nxt + w.records_per_file - 1,
                min_ts=now_ms - span_ms,
                max_ts=now_ms,
                fresh=tombstones,
            )
            files.append(self._file(f"s{self.next_file}", 0, now_ms, model))
            nxt += w.records_per_file
            self.next_file += 1
        self.snap = append_files(
            self.snap, files, {(TOPIC, 0): self.snap.next_offsets[(TOPIC, 0)]}, {(TOPIC, 0): nxt}
        )
        self.result.ingested_files += count
        self.result.ingested_bytes += sum(f.size for f in files)
        self.result.tombstones.ingested += count * tombstones

    def _dispatch(self, t_s: float) -> None:
        now_ms = int(t_s * 1000)
        for job in self.policy(self.snap, now_ms, frozenset(self.busy)).jobs:
            if len(self.running) >= self.worker.workers:
                break
            duration = self.worker.job_overhead_s
            if not job.drop:
                duration += job.input_bytes / self.worker.worker_bytes_per_s
            self.result.max_job_s = max(self.result.max_job_s, duration)
            oldest = self.snap.files[0].id == job.inputs[0].id
            heapq.heappush(self.running, _Running(t_s + duration, job, now_ms, oldest))
            self.busy.update(i.id for i in job.inputs)

    def _outcome(self, run: _Running) -> FileModel | None:
        """The job's output as the worker model computes it (None: no record is left)."""
        job, now_ms = run.job, run.start_ms
        models = [self.models[i.id] for i in job.inputs]
        retention, tombstones = self.result.retention, self.result.tombstones
        before = sum(m.tombstones for m in models)
        cutoff = self.topic.retention_cutoff_ms(now_ms) if run.holds_oldest else None
        if job.drop:
            retention.drop_jobs += 1
            retention.files_dropped += len(models)
            retention.bytes_dropped_unread += sum(m.size for m in models)
            retention.records_removed += sum(m.records for m in models)
            tombstones.removed_other += before
            return None
        if cutoff is not None:
            kept = []
            for m in models:
                rest, gone = expire(m, cutoff)
                retention.records_removed += gone
                if rest is not None:
                    kept.append(rest)
            models = kept
        if not models:
            tombstones.removed_other += before
            return None
        merged = combine(models)
        output: FileModel | None = merged
        dropped = 0
        if job.deduplicate and self.topic.compacted:
            dedup = deduplicate(
                merged,
                self.keys,
                self.workload.record_bytes,
                now_ms=now_ms,
                horizon_ms=self.topic.delete_horizon_ms(now_ms),
                droppable=run.holds_oldest,
            )
            output, dropped = dedup.output, dedup.tombstones_dropped
            tombstones.stamped += dedup.tombstones_stamped
            tombstones.dropped_past_horizon += dropped
            if self.result.first_dedup_seconds is None:
                self.result.first_dedup_seconds = round(run.end_s, 3)
        after = 0 if output is None else output.tombstones
        tombstones.removed_other += max(0, before - after - dropped)
        return output

    def _commit(self, run: _Running) -> None:
        job, t_s = run.job, run.end_s
        now_ms = int(t_s * 1000)
        inputs = [self.snap.file(i.id) for i in job.inputs]
        model = self._outcome(run)
        outputs = []
        if model is not None:
            group = "compacted" if self.topic.compacted else "plain"
            outputs.append(
                self._file(job.output_file_id(group), job.output_level, run.start_ms, model)
            )
        for f in inputs:
            since = dirty_since_ms(f, self.snap.topics)
            if since is not None and since <= now_ms:
                self.result.dirty_delays_s.append((now_ms - since) / 1000)
        snap = replace_files(
            self.snap, [f.id for f in inputs], outputs, now_ms, full=job.is_full, unread=job.drop
        )
        self.snap = dataclasses.replace(snap, garbage=())  # nothing to delete in a model
        for f in inputs:
            gone = self.models.pop(f.id)
            self.live_bytes -= gone.size
            self.live_records -= gone.records
        self.busy.difference_update(f.id for f in inputs)
        self.result.jobs_by_rule[job.rule] += 1
        if job.rule == "retention" and not job.drop:
            self.result.retention.rewrite_jobs += 1
        if not job.drop:
            self.result.compaction_bytes_read += job.input_bytes
            self.result.compaction_bytes_written += sum(f.size for f in outputs)

    def _observe(self, t_s: float, tail_from_s: float) -> None:
        """The per-step figures: peak live size, retention lateness, tombstones past their
        horizon, the oldest tombstone without one."""
        now_ms = int(t_s * 1000)
        retention, tombstones = self.result.retention, self.result.tombstones
        retention.peak_live_bytes = max(retention.peak_live_bytes, self.live_bytes)
        retention.peak_live_records = max(retention.peak_live_records, self.live_records)
        if retention.retention_ms >= 0 and t_s > tail_from_s:
            self._tail[0] += self.live_bytes
            self._tail[1] += 1
        oldest = horizon = unstamped = None
        for m in self.models.values():
            if oldest is None or m.min_ts < oldest:
                oldest = m.min_ts
            h = m.min_delete_horizon
            if h is not None and (horizon is None or h < horizon):
                horizon = h
            if m.fresh and (unstamped is None or m.min_ts < unstamped):
                unstamped = m.min_ts
        if oldest is not None and retention.retention_ms >= 0:
            late = now_ms - oldest - retention.retention_ms
            if retention.max_lateness_ms is None or late > retention.max_lateness_ms:
                retention.max_lateness_ms = late
                retention.max_lateness_at_s = round(t_s, 3)
        if horizon is not None:
            past = now_ms - horizon
            if tombstones.max_past_horizon_ms is None or past > tombstones.max_past_horizon_ms:
                tombstones.max_past_horizon_ms = past
                tombstones.max_past_horizon_at_s = round(t_s, 3)
        if unstamped is not None and self.topic.compacted:
            age = now_ms - unstamped
            tombstones.max_unstamped_age_ms = max(tombstones.max_unstamped_age_ms or 0, age)

    def _censor_dirty(self, end_s: float) -> None:
        now_ms = int(end_s * 1000)
        for since in dirty_files(self.snap, now_ms).values():
            self.result.dirty_delays_s.append((now_ms - since) / 1000)

    def _sample(self, t_s: float) -> Sample:
        now_ms = int(t_s * 1000)
        levels = [0] * (MAX_LEVEL + 1)
        for f in self.snap.files:
            levels[f.level] += 1
        models = self.models.values()
        raw = sum(m.raw for m in models)
        distinct = self.keys.distinct(raw) - sum(m.deleted for m in models)
        oldest = min((m.min_ts for m in models), default=None)
        return Sample(
            t_s=round(t_s, 3),
            files_per_level=levels,
            live_records=self.live_records,
            live_bytes=self.live_bytes,
            duplicates_live=max(0, self.live_records - distinct),
            tombstones_live=sum(m.tombstones for m in models),
            oldest_record_age_s=None if oldest is None else (now_ms - oldest) / 1000,
            write_amplification=round(self.result.write_amplification, 3),
            dirty_files=len(dirty_files(self.snap, now_ms)),
        )

    def _file(self, file_id: str, level: int, created_ms: int, model: FileModel) -> LiveFile:
        self.models[file_id] = model
        self.live_bytes += model.size
        self.live_records += model.records
        return LiveFile.of_sections(
            file_id,
            f"sim/L{level}/{file_id}",
            level,
            model.size,
            created_ms,
            (model.section(TOPIC),),
        )
