"""The simulation loop: agents write L0 files, a policy plans, simulated workers run.

Each step of ``step_s`` seconds: jobs whose time is up commit (their outputs computed
by the cost model), agents add the files they wrote, and while workers are free the
policy plans over the catalog snapshot, with running jobs' files marked busy. The
catalog is a real ``Snapshot`` changed by the real ``catalog.changes``; only the
worker is a model:

- a job takes ``job_overhead_s`` + input bytes / ``worker_bytes_per_s``;
- a copy (L0 -> L1) keeps every record; a deduplicating job keeps one record per
  distinct key among all the ingested records its inputs cover (``KeyModel``).
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
from compactor.fileformat import SectionMeta
from compactor.planner.config import PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.maxlag import dirty_files, dirty_since_ms
from compactor.planner.plan import Plan
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

    def __post_init__(self) -> None:
        if self.agents < 1 or self.files_per_second <= 0 or self.hours <= 0:
            raise ValueError("agents, files per second and hours must be positive")
        if self.records_per_file < 1 or self.record_bytes < 1:
            raise ValueError("records per file and record bytes must be positive")


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
    duplicates_live: int
    write_amplification: float
    dirty_files: int


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
            "max_lag": {
                "dirty_files": len(self.dirty_delays_s),
                "compacted_within_deadline": len(self.dirty_delays_s) - len(late),
                "late": len(late),
                "max_delay_s": max(self.dirty_delays_s, default=0.0),
                "deadline_s": self.deadline_s,
            },
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
        config = {"cleanup.policy": "compact"}
        if workload.max_compaction_lag_ms is not None:
            config["max.compaction.lag.ms"] = str(workload.max_compaction_lag_ms)
        self.snap = create_topic(Snapshot(), TOPIC, 1, TopicConfig.parse(config))
        self.raw: dict[str, int] = {}
        self.sections: dict[str, SectionMeta] = {}
        """Each live file's one section (the catalog keeps only summaries)."""
        """Ingested records each live file covers."""
        self.running: list[_Running] = []
        self.busy: set[str] = set()
        self.total_raw = 0
        self.next_file = 0
        self.deadline_s = (planner_config or PlannerConfig()).max_lag_deadline_ms / 1000
        self.result = Result(policy_name, deadline_s=self.deadline_s)

    def run(self, progress: Callable[[float], None] = lambda t: None) -> Result:
        w = self.workload
        end_s = w.hours * 3600
        rate = w.agents * w.files_per_second
        written = 0
        next_sample = 0.0
        t = 0.0
        while t < end_s:
            t = min(end_s, t + self.worker.step_s)
            while self.running and self.running[0].end_s <= t:
                done = heapq.heappop(self.running)
                self._commit(done.job, done.end_s)
            due = math.floor(t * rate) - written
            if due > 0:
                self._ingest(due, t, rate)
                written += due
            if len(self.running) < self.worker.workers:
                self._dispatch(t)
            if t >= next_sample or t >= end_s:
                self.result.samples.append(self._sample(t))
                next_sample += self.worker.sample_every_s
                progress(t)
        self._censor_dirty(end_s)
        return self.result

    # -- the model ---------------------------------------------------------------------
    def _ingest(self, count: int, t_s: float, rate: float) -> None:
        w = self.workload
        now_ms = int(t_s * 1000)
        span_ms = int(1000 * w.agents / rate)
        nxt = self.snap.next_offsets[(TOPIC, 0)]
        files = []
        for _ in range(count):
            files.append(
                self._file(
                    f"s{self.next_file}",
                    0,
                    w.records_per_file,
                    w.records_per_file * w.record_bytes,
                    nxt,
                    now_ms - span_ms,
                    now_ms,
                    now_ms,
                )
            )
            self.raw[files[-1].id] = w.records_per_file
            nxt += w.records_per_file
            self.next_file += 1
        self.snap = append_files(
            self.snap, files, {(TOPIC, 0): self.snap.next_offsets[(TOPIC, 0)]}, {(TOPIC, 0): nxt}
        )
        self.total_raw += count * w.records_per_file
        self.result.ingested_files += count
        self.result.ingested_bytes += sum(f.size for f in files)

    def _dispatch(self, t_s: float) -> None:
        now_ms = int(t_s * 1000)
        for job in self.policy(self.snap, now_ms, frozenset(self.busy)).jobs:
            if len(self.running) >= self.worker.workers:
                break
            duration = self.worker.job_overhead_s + job.input_bytes / self.worker.worker_bytes_per_s
            heapq.heappush(self.running, _Running(t_s + duration, job))
            self.busy.update(i.id for i in job.inputs)

    def _commit(self, job: Job, t_s: float) -> None:
        now_ms = int(t_s * 1000)
        inputs = [self.snap.file(i.id) for i in job.inputs]
        raw = sum(self.raw.pop(f.id) for f in inputs)
        if job.deduplicate:
            records = self.keys.distinct(raw)
            size = records * self.workload.record_bytes
        else:
            records = sum(f.record_count for f in inputs)
            size = sum(f.size for f in inputs)
        sections = [self.sections.pop(f.id) for f in inputs]
        output = self._file(
            job.output_file_id("compacted"),
            job.output_level,
            records,
            size,
            min(s.first_offset for s in sections),
            min(s.min_timestamp for s in sections),
            max(s.max_timestamp for s in sections),
            now_ms,
            last_offset=max(s.last_offset for s in sections),
        )
        for f in inputs:
            since = dirty_since_ms(f, self.snap.topics)
            if since is not None and since <= now_ms:
                self.result.dirty_delays_s.append((now_ms - since) / 1000)
        snap = replace_files(self.snap, [f.id for f in inputs], [output], now_ms, full=job.is_full)
        self.snap = dataclasses.replace(snap, garbage=())  # nothing to delete in a model
        self.raw[output.id] = raw
        self.busy.difference_update(f.id for f in inputs)
        self.result.jobs_by_rule[job.rule] += 1
        self.result.compaction_bytes_read += job.input_bytes
        self.result.compaction_bytes_written += size
        if job.deduplicate and self.result.first_dedup_seconds is None:
            self.result.first_dedup_seconds = round(t_s, 3)

    def _censor_dirty(self, end_s: float) -> None:
        now_ms = int(end_s * 1000)
        for since in dirty_files(self.snap, now_ms).values():
            self.result.dirty_delays_s.append((now_ms - since) / 1000)

    def _sample(self, t_s: float) -> Sample:
        now_ms = int(t_s * 1000)
        levels = [0] * (MAX_LEVEL + 1)
        for f in self.snap.files:
            levels[f.level] += 1
        live = sum(f.record_count for f in self.snap.files)
        return Sample(
            t_s=round(t_s, 3),
            files_per_level=levels,
            live_records=live,
            duplicates_live=max(0, live - self.keys.distinct(self.total_raw)),
            write_amplification=round(self.result.write_amplification, 3),
            dirty_files=len(dirty_files(self.snap, now_ms)),
        )

    def _file(
        self,
        file_id: str,
        level: int,
        records: int,
        size: int,
        first_offset: int,
        min_ts: int,
        max_ts: int,
        created_ms: int,
        last_offset: int | None = None,
    ) -> LiveFile:
        last = first_offset + records - 1 if last_offset is None else last_offset
        section = SectionMeta(
            topic=TOPIC,
            partition=0,
            first_offset=first_offset,
            last_offset=last,
            record_count=records,
            uncompressed_bytes=size,
            min_timestamp=min_ts,
            max_timestamp=max_ts,
            tombstones=0,
            position=0,
            length=size,
        )
        self.sections[file_id] = section
        return LiveFile.of_sections(
            file_id, f"sim/L{level}/{file_id}", level, size, created_ms, (section,)
        )
