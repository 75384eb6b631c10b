"""The queue's Prometheus metrics: a worker's (``WorkerMetrics``) and a scheduler's
(``SchedulerMetrics``); README.md, "Metrics", says what each means. Names follow Kafka's
log cleaner where one exists: ``max-buffer-utilization-percent``,
``cleaner-recopy-percent``, ``max-clean-time-secs``, ``max-compaction-delay-secs``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from compactor.catalog.snapshot import MAX_LEVEL
from compactor.objectstore.request_tally import SENT, RequestTally
from compactor.planner.job import PLANNER_RULES, Job
from compactor.worker.stats import JobReport

if TYPE_CHECKING:
    from compactor.jobqueue.scheduler import Pass

OUTCOMES = ("committed", "stale", "failed", "aborted")
"""committed: the job's commit landed. stale: its inputs were gone or taken (already
compacted, or another job won), and the message was deleted as a no-op. failed: an error
ended it; the message reappears after its visibility timeout. aborted: it stopped
without committing because the worker lost the job (a heartbeat failed) or was told to
stop (SIGTERM)."""

PASS_OUTCOMES = ("ok", "failed")
"""ok: the scheduler planned on the catalog and published what was due (possibly
nothing). failed: the pass raised (the catalog or the queue unreachable, every due job
refused by the queue); the next pass tries again."""


class RequestsSent:
    """A collector of a process's ``RequestTally``, read at each scrape: the requests
    sent to S3 and SQS, every attempt, by service and operation, whatever became of the
    job or pass that sent them. What the operator's bill counts."""

    def __init__(self, name: str, tally: RequestTally = SENT) -> None:
        self.name, self.tally = name, tally

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            self.name,
            "AWS API requests sent (S3, SQS), every attempt, by service and operation",
            labels=("service", "operation"),
        )
        for (service, operation), n in sorted(self.tally.snapshot().items()):
            family.add_metric((service, operation), n)
        yield family


class ServedMetrics:
    """A registry of its own, served on request, with the process's requests sent
    (``<prefix>requests_total``) in it."""

    def __init__(self, registry: CollectorRegistry | None, prefix: str) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(RequestsSent(prefix + "requests"))

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve the Prometheus text format on ``addr:port`` from a daemon thread; the port
        bound (``port``, or the one the system chose for 0)."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)


class WorkerMetrics(ServedMetrics):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        p = "compactor_worker_"
        super().__init__(registry, p)
        r = self.registry
        self._longest_s = 0.0
        self.jobs = Counter(p + "jobs", "Jobs finished, by outcome", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.jobs.labels(outcome)
        self.messages_received = Counter(
            p + "messages_received", "Messages received from the job queue", registry=r
        )
        self.poison_messages = Counter(
            p + "poison_messages",
            "Messages that were not valid job documents (left for the dead-letter queue)",
            registry=r,
        )
        self.files_quarantined = Counter(
            p + "files_quarantined",
            "Input files set aside after their damage failed a job (worker --quarantine-after)",
            registry=r,
        )
        self.heartbeat_failures = Counter(
            p + "heartbeat_failures",
            "Heartbeats that could not extend a message's visibility or renew its lease",
            registry=r,
        )
        self.records_in = Counter(p + "records_in", "Records read by jobs", registry=r)
        self.records_out = Counter(p + "records_out", "Records written by jobs", registry=r)
        self.bytes_in = Counter(p + "bytes_in", "Input file bytes of finished jobs", registry=r)
        self.bytes_out = Counter(p + "bytes_out", "Output file bytes of jobs", registry=r)
        self.read_bytes = Counter(
            p + "read_bytes", "Bytes read through GET streams, counted as they are read", registry=r
        )
        self.get_streams = Counter(
            p + "get_streams", "GET requests that opened an input stream", registry=r
        )
        self.get_resumes = Counter(
            p + "get_resumes", "GET streams re-opened after a broken connection", registry=r
        )
        self.frames_reused = Counter(
            p + "frames_reused",
            "Batch frames of the inputs written to an output as they were read, not encoded again",
            registry=r,
        )
        self.max_buffer_utilization_percent = Gauge(
            p + "max_buffer_utilization_percent",
            "The key buffer's highest fill, in percent, during the last job",
            registry=r,
        )
        self.recopy_percent = Gauge(
            p + "recopy_percent",
            "Output bytes as a percentage of input bytes, for the last job",
            registry=r,
        )
        self.max_job_seconds = Gauge(
            p + "max_job_seconds", "The longest job since the worker started", registry=r
        )
        self.compaction_delay_seconds = Gauge(
            p + "compaction_delay_seconds",
            "How long the oldest record of the last job's inputs had waited for it "
            "(its file's age when the job started)",
            registry=r,
        )

    def observe(self, report: JobReport) -> None:
        s = report.stats
        self.records_in.inc(s.records_in)
        self.records_out.inc(s.records_out)
        self.bytes_in.inc(report.bytes_in)
        self.bytes_out.inc(report.bytes_out)
        self.get_streams.inc(sum(f.gets - f.resumes for f in report.inputs))
        self.get_resumes.inc(sum(f.resumes for f in report.inputs))
        self.frames_reused.inc(s.frames_reused)
        self.max_buffer_utilization_percent.set(100.0 * s.max_buffer_utilization)
        if report.bytes_in:
            self.recopy_percent.set(100.0 * report.bytes_out / report.bytes_in)
        self._longest_s = max(self._longest_s, report.duration_s)
        self.max_job_seconds.set(self._longest_s)


class SchedulerMetrics(ServedMetrics):
    """What a scheduler's passes did, and the catalog as the last pass that planned saw
    it: the backlog workers have before them. The scheduler counts each job as it is
    published or refused (``published``, ``unsent``), so a pass that fails part-way still
    counts the jobs it sent; the command line reports each pass's end."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        p = "compactor_scheduler_"
        super().__init__(registry, p)
        r = self.registry
        self.passes = Counter(p + "passes", "Scheduler passes, by outcome", ["outcome"], registry=r)
        for outcome in PASS_OUTCOMES:
            self.passes.labels(outcome)
        self.jobs_published = Counter(
            p + "jobs_published", "Jobs leased and sent to the queue, by rule", ["rule"], registry=r
        )
        for rule in PLANNER_RULES:
            self.jobs_published.labels(rule)
        self.jobs_unsent = Counter(
            p + "jobs_unsent", "Due jobs the queue refused (their leases released)", registry=r
        )
        self.objects_deleted = Counter(
            p + "objects_deleted",
            "Keys the passes' garbage collection reported deleted (none from a failed one)",
            registry=r,
        )
        self.garbage_collection_failures = Counter(
            p + "garbage_collection_failures",
            "Passes whose garbage collection failed (the garbage waits for the next pass)",
            registry=r,
        )
        self.last_pass_seconds = Gauge(
            p + "last_pass_seconds",
            "How long the last pass took, garbage collection included",
            registry=r,
        )
        self.last_success_timestamp_seconds = Gauge(
            p + "last_success_timestamp_seconds",
            "When the last ok pass ended (Unix time; 0: none yet)",
            registry=r,
        )
        self.catalog_version = Gauge(
            p + "catalog_version", "The catalog version the last ok pass planned on", registry=r
        )
        self.live_files = Gauge(
            p + "live_files",
            "Live files per level, as the last ok pass saw them",
            ["level"],
            registry=r,
        )
        self.live_bytes = Gauge(
            p + "live_bytes",
            "Live file bytes per level, as the last ok pass saw them",
            ["level"],
            registry=r,
        )
        for level in range(MAX_LEVEL + 1):
            self.live_files.labels(str(level))
            self.live_bytes.labels(str(level))
        self.leased_files = Gauge(
            p + "leased_files",
            "Live files held by an unexpired job lease once the last ok pass had published",
            registry=r,
        )
        self.quarantined_files = Gauge(
            p + "quarantined_files",
            "Live files set aside (compactor catalog quarantine), as the last ok pass saw them",
            registry=r,
        )
        self.oldest_l0_file_age_seconds = Gauge(
            p + "oldest_l0_file_age_seconds",
            "How long the oldest live L0 file had waited at the last ok pass, on the time "
            "rules' clock (0: none)",
            registry=r,
        )

    def published(self, job: Job) -> None:
        self.jobs_published.labels(job.rule).inc()

    def unsent(self, job: Job) -> None:
        self.jobs_unsent.inc()

    def collected(self, deleted: int | None) -> None:
        """A pass's garbage collection: the keys it deleted, or None if it failed."""
        if deleted is None:
            self.garbage_collection_failures.inc()
        else:
            self.objects_deleted.inc(deleted)

    def pass_ended(self, done: Pass, now_ms: int, seconds: float) -> None:
        """A pass's end, its garbage collected: ``done`` planned on its snapshot and
        published (the time rules at ``now_ms``), or failed (no snapshot). The gauges
        describing the catalog keep the last ok pass's."""
        self.last_pass_seconds.set(seconds)
        if done.snapshot is None:
            self.passes.labels("failed").inc()
            return
        self.passes.labels("ok").inc()
        snap = done.snapshot
        self.catalog_version.set(snap.version)
        for level, (files, size) in snap.level_totals().items():
            self.live_files.labels(str(level)).set(files)
            self.live_bytes.labels(str(level)).set(size)
        leased = set(snap.leased_inputs(done.lease_clock_ms))
        leased.update(i.id for p in done.published for i in p.job.inputs)
        self.leased_files.set(len(leased))
        self.quarantined_files.set(len(snap.quarantined))
        l0 = [f.created_ms for f in snap.files if f.level == 0]
        self.oldest_l0_file_age_seconds.set(max(0, now_ms - min(l0)) / 1000 if l0 else 0)
        self.last_success_timestamp_seconds.set_to_current_time()
