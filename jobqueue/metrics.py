"""A queue worker's Prometheus metrics (README.md, "Running workers", says what each
means). Names follow Kafka's log cleaner where one exists: ``max-buffer-utilization-
percent``, ``cleaner-recopy-percent``, ``max-clean-time-secs``,
``max-compaction-delay-secs``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from compactor.worker.stats import JobReport

OUTCOMES = ("committed", "stale", "failed", "aborted")
"""committed: the job's commit landed. stale: its inputs were gone or taken (already
compacted, or another job won), and the message was deleted as a no-op. failed: an error
ended it; the message reappears after its visibility timeout. aborted: it stopped
without committing because the worker lost the job (a heartbeat failed) or was told to
stop (SIGTERM)."""


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self._longest_s = 0.0
        p = "compactor_worker_"
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

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve the Prometheus text format on ``addr:port`` from a daemon thread."""
        start_http_server(port, addr=addr, registry=self.registry)
