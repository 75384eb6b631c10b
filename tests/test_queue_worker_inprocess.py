"""The queue worker's pieces in one process, against real SQS and S3 endpoints (moto's
server; LocalStack in CI): the read throttle's rate, a lost heartbeat, a redelivered
message under a longer lease, and the Prometheus metrics, scraped and parsed."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from clirunner import assert_one_line_error, run_cli
from conftest import JobQueues, S3Endpoint, S3Url
from queue_scenarios import scraped_metrics
from worker_scenarios import add_file, make_topics, read_live

from compactor.catalog import Catalog, CommitConflict
from compactor.catalog.changes import quarantine_file
from compactor.catalog.garbage import collect_abandoned_uploads
from compactor.catalog.leases import JobLeases
from compactor.catalog.log import log_key
from compactor.catalog.verify import verify_store
from compactor.fileformat import FormatError, Record
from compactor.jobqueue.consumer import QueueWorker, WorkerSettings
from compactor.jobqueue.errors import LostJob
from compactor.jobqueue.events import EventLog
from compactor.jobqueue.heartbeat import Heartbeat
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.jobqueue.scheduler import Scheduler
from compactor.jobqueue.sqs import JobQueue, Message
from compactor.objectstore import StoreError
from compactor.objectstore.s3 import S3Store
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job, JobInput
from compactor.planner.plan import full_plan
from compactor.worker.compactor import Compactor
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000
CONFIG = PlannerConfig.parse({"level.trigger.files": "4"})


def _four_files(store: S3Store, records_per_partition: int = 50) -> Catalog:
    catalog = Catalog(store)
    make_topics(catalog, {"t": (16, {"cleanup.policy": "compact"})})
    n = records_per_partition
    for i in range(4):
        sections = {
            ("t", p): [Record(i * n + j, NOW, b"k%d" % (j % 40), b"v" * 200) for j in range(n)]
            for p in range(16)
        }
        add_file(store, catalog, f"f{i}", sections)
    return catalog


def _job(catalog: Catalog) -> Job:
    files = catalog.snapshot().files
    return Job(tuple(JobInput(f.id, f.key, f.size) for f in files), 1, True)


def _worker(
    store: S3Store,
    queue: JobQueue,
    *,
    visibility_s: int = 30,
    rate: float | None = None,
    quarantine_after: int | None = None,
) -> tuple[QueueWorker, io.StringIO]:
    log = io.StringIO()
    settings = WorkerSettings(
        visibility_timeout_s=visibility_s,
        max_bytes_per_second=rate,
        quarantine_after=quarantine_after,
    )
    worker = QueueWorker(
        Compactor(store, key_buffer_bytes=1 << 20),
        queue,
        settings,
        metrics=WorkerMetrics(),
        log=EventLog("json", log, source="worker"),
        now_ms=lambda: NOW,
    )
    return worker, log


def test_the_throttle_bounds_bytes_in_every_window_on_a_fake_clock() -> None:
    clock = [0.0]
    throttle = ReadThrottle(
        1000, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)
    )
    reads: list[tuple[float, int]] = []
    for n in [10, 500, 3, 2000, 70] * 40:
        throttle.consume(n)
        reads.append((clock[0], n))
    total = sum(n for _, n in reads)
    assert clock[0] == pytest.approx((total - throttle.burst) / 1000, rel=0.01)
    for start in range(int(clock[0])):
        window = sum(n for t, n in reads if start <= t < start + 2)
        assert window <= 1000 * 2 + throttle.burst + 2000


def test_a_throttled_job_reads_at_the_configured_rate(s3_store: S3Store) -> None:
    """Bytes per window of a real job's GET streams, counted as they are read: never above
    the rate by more than the bucket and one read, and the job is not starved."""
    catalog = _four_files(s3_store)
    rate = 400_000
    reads: list[tuple[float, int]] = []
    lock = threading.Lock()

    def on_read(n: int) -> None:
        with lock:
            reads.append((time.monotonic(), n))

    throttle = ReadThrottle(rate, on_read=on_read)
    job = _job(catalog)
    report = run_job(s3_store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW, read_throttle=throttle)
    assert report.committed
    total = sum(n for _, n in reads)
    assert total == throttle.bytes_total >= 2 * job.input_bytes  # both pointers read it all
    biggest = max(n for _, n in reads)
    start, end = reads[0][0], reads[-1][0]
    assert end - start >= (total - throttle.burst - biggest) / rate * 0.99
    t = start
    while t < end:
        in_window = sum(n for at, n in reads if t <= at < t + 1.0)
        assert in_window <= rate * 1.0 + throttle.burst + 2 * biggest, (t - start, in_window)
        t += 0.25


def test_a_lost_heartbeat_stops_the_job_without_committing(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """Another job takes the inputs once this job's lease is gone (as after a long stall):
    the next renewal fails, and the job aborts its upload and commits nothing."""
    catalog = _four_files(s3_store, records_per_partition=400)
    queue = JobQueue(job_queues.url)
    job = _job(catalog)
    queue.send(job)
    worker, log = _worker(s3_store, queue, visibility_s=3, rate=150_000)
    message = queue.receive(5, 3)
    assert message is not None
    outcome: list[str] = []
    runner = threading.Thread(target=lambda: outcome.append(worker.handle(message)))
    runner.start()
    time.sleep(0.5)
    thief = JobLeases(catalog, "thief")
    thief.release(job.id)
    thief.take("another-job", [i.id for i in job.inputs], 60_000)
    runner.join(timeout=120)
    assert outcome == ["aborted"]
    failures = worker.metrics.registry.get_sample_value("compactor_worker_heartbeat_failures_total")
    assert failures == 1
    assert [f.id for f in catalog.snapshot().files] == [i.id for i in job.inputs]
    assert not list(s3_store.pending_uploads())
    assert '"event": "heartbeat_failed"' in log.getvalue()
    queue.close()


def test_a_redelivered_message_runs_at_once_under_the_jobs_own_lease(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """The scheduler's lease lasts 10 minutes; the first receiver dies without a word; the
    message, visible again, is run by the next worker at once."""
    catalog = _four_files(s3_store)
    before = read_live(s3_store, catalog)
    queue = JobQueue(job_queues.url)
    (published,) = Scheduler(catalog, queue, CONFIG, lease_ms=600_000).publish_due(NOW).published
    first = queue.receive(5, 30)
    assert first is not None
    JobLeases(catalog, "worker@dead-host:1").take(
        published.job.id, [i.id for i in published.job.inputs], 30_000
    )
    queue.release(first)  # as if its visibility timed out
    worker, _ = _worker(s3_store, queue)
    second = queue.receive(5, 30)
    assert second is not None and second.receive_count == 2
    assert worker.handle(second) == "committed"
    assert (
        read_live(s3_store, catalog)
        == {tp: [r for r in recs if r.key is not None] for tp, recs in before.items()}
        or verify_store(catalog, catalog.snapshot()).ok
    )
    assert verify_store(catalog, catalog.snapshot()).ok
    assert queue.receive(1, 30) is None
    queue.close()


def _latest(live: dict[tuple[str, int], list[Record]]) -> dict[tuple[str, int], dict[bytes, bytes]]:
    """The materialized view: the latest value per key."""
    out: dict[tuple[str, int], dict[bytes, bytes]] = {}
    for tp, records in live.items():
        view: dict[bytes, bytes | None] = {}
        for r in sorted(records, key=lambda r: r.offset):
            view[r.key] = r.value  # type: ignore[index]
        out[tp] = {k: v for k, v in view.items() if v is not None}
    return out


def test_metrics_are_served_and_parse(s3_store: S3Store, job_queues: JobQueues) -> None:
    catalog = _four_files(s3_store)
    queue = JobQueue(job_queues.url)
    job = _job(catalog)
    queue.send(job)
    queue.send(job)  # a stale copy
    worker, _ = _worker(s3_store, queue)
    port = worker.metrics.serve(0, addr="127.0.0.1")
    for _ in range(2):
        message = queue.receive(5, 30)
        assert message is not None
        worker.metrics.messages_received.inc()
        worker.handle(message)
    samples = scraped_metrics(port)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("compactor_worker_jobs_total", outcome="committed") == 1
    assert value("compactor_worker_jobs_total", outcome="stale") == 1
    assert value("compactor_worker_jobs_total", outcome="failed") == 0
    assert value("compactor_worker_messages_received_total") == 2
    assert value("compactor_worker_records_in_total") == 4 * 16 * 50
    assert value("compactor_worker_records_out_total") == 16 * 40
    assert value("compactor_worker_get_streams_total") == 2 * len(job.inputs)
    assert value("compactor_worker_get_resumes_total") == 0
    assert value("compactor_worker_frames_reused_total") == 0  # frames too small to keep
    assert value("compactor_worker_bytes_in_total") == job.input_bytes
    assert value("compactor_worker_read_bytes_total") >= 2 * job.input_bytes
    assert 0 < value("compactor_worker_max_buffer_utilization_percent") <= 100
    assert 0 < value("compactor_worker_recopy_percent") < 100
    assert value("compactor_worker_max_job_seconds") > 0
    assert value("compactor_worker_compaction_delay_seconds") > 0
    assert value("compactor_worker_heartbeat_failures_total") == 0
    queue.close()


def test_a_queued_job_reads_the_catalog_three_times(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    catalog = _four_files(s3_store)
    queue = JobQueue(job_queues.url)
    job = _job(catalog)
    queue.send(job)
    worker, _ = _worker(s3_store, queue)
    version = worker.compactor.catalog.snapshot().version  # as `compactor worker` starts
    message = queue.receive(5, 30)
    assert message is not None
    s3_store.gets.reset()
    assert worker.handle(message) == "committed"
    gets = s3_store.gets.snapshot()
    # The misses of the next version: the check before the lease (the lease is committed
    # on the state it read, and the job runs on the state the lease committed), then the
    # job's commit, before its manifests and after them.
    assert {k: n for k, n in gets.items() if "_catalog/" in k} == {
        log_key(version + 1): 1,
        log_key(version + 2): 2,
    }
    queue.close()


def test_the_event_log_never_prints_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-Value/xyz")
    out = io.StringIO()
    log = EventLog("json", out, source="worker")
    log("job_failed", error="signature for key s3cr3t-Value/xyz did not match")
    EventLog("text", out, source="worker")("job_failed", error="s3cr3t-Value/xyz")
    assert "s3cr3t" not in out.getvalue()
    assert out.getvalue().count("***") == 2
    assert json.loads(out.getvalue().splitlines()[0])["event"] == "job_failed"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://127.0.0.1:9/123456789012/jobs", "unreachable"),
        ("not-a-url", "not a queue URL"),
    ],
)
def test_worker_and_schedule_fail_in_one_line_on_a_bad_queue(
    s3_url: S3Url, url: str, fragment: str
) -> None:
    for command in (
        ("worker", "--queue-url", url, "--exit-when-idle", "0"),
        ("schedule", "--queue-url", url, "--once"),
    ):
        result = run_cli(*s3_url.cli_args, *command)
        assert_one_line_error(result, fragment)
        assert result.code == 8


@pytest.mark.parametrize("store", ["missing-bucket", "unreachable"])
def test_a_worker_whose_store_is_not_there_fails_at_start_and_leaves_its_queue(
    s3_url: S3Url, job_queues: JobQueues, store: str
) -> None:
    """Before, it idled and failed every job it received; now it exits before it asks the
    queue, and the message waiting there is not received."""
    job_queues.client().send_message(QueueUrl=job_queues.url, MessageBody="{}")
    if store == "missing-bucket":
        args = ["--store", f"s3://{s3_url.bucket}-missing", "--endpoint-url", s3_url.endpoint_url]
    else:
        args = ["--store", "s3://b", "--endpoint-url", "http://127.0.0.1:9"]
    result = run_cli(*args, "worker", "--queue-url", job_queues.url, "--exit-when-idle", "0")
    assert result.code == 5
    assert_one_line_error(result)
    attrs = job_queues.client().get_queue_attributes(
        QueueUrl=job_queues.url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "1"


def test_a_queue_that_does_not_exist_is_named(s3_url: S3Url, job_queues: JobQueues) -> None:
    missing = job_queues.url + "-missing"
    result = run_cli(*s3_url.cli_args, "worker", "--queue-url", missing, "--exit-when-idle", "0")
    assert_one_line_error(result, missing, "does not exist")
    assert result.code == 8


def test_a_development_placeholder_credential_is_not_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LocalStack's ``test``: masking it would cut it out of every name that holds it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    result = run_cli("--store", str(tmp_path), "topic", "describe", "latest-tests")
    assert_one_line_error(result, "unknown topic 'latest-tests'")


def test_a_failed_commands_last_line_never_prints_a_credential(
    s3_url: S3Url, job_queues: JobQueues, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's promise holds for the command's own last line and for --debug's
    traceback, not just the event log: a queue URL pasted with a secret in it."""
    secret = "s3cr3t-Value-xyz"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    missing = f"{job_queues.url}-{secret}"
    worker = ("worker", "--queue-url", missing, "--exit-when-idle", "0")
    result = run_cli(*s3_url.cli_args, *worker)
    assert_one_line_error(result, f"{job_queues.url}-***", "does not exist")
    assert result.code == 8
    debugged = run_cli("--debug", *s3_url.cli_args, *worker)
    assert debugged.code == 8
    assert "Traceback" in debugged.err  # the traceback was printed, masked
    assert secret not in debugged.err
    assert debugged.err.count("***") >= 2


def test_a_worker_outlives_its_queue_going_away(s3_store: S3Store, job_queues: JobQueues) -> None:
    """Receives that fail are logged and retried after a pause, counted as idle time."""
    queue = JobQueue(job_queues.url)
    job_queues.client().delete_queue(QueueUrl=job_queues.url)
    log = io.StringIO()
    worker = QueueWorker(
        Compactor(s3_store, key_buffer_bytes=1 << 20),
        queue,
        WorkerSettings(visibility_timeout_s=30, exit_when_idle_s=2),
        metrics=WorkerMetrics(),
        log=EventLog("json", log, source="worker"),
        now_ms=lambda: NOW,
    )
    worker.serve()
    events = [json.loads(line)["event"] for line in log.getvalue().splitlines()]
    assert "receive_failed" in events
    assert events[-1] == "worker_idle"
    queue.close()


@pytest.mark.parametrize(
    "body",
    [
        "[" * 200_000,
        '{"schema_version": 1, "inputs": [{"id": "a", "key": "k", "size": 1e400}], '
        '"output_level": 1, "deduplicate": true}',
        '{"schema_version": 2}',
        "[]",
    ],
)
def test_any_body_that_is_not_a_job_document_is_poison(
    s3_store: S3Store, job_queues: JobQueues, body: str
) -> None:
    queue = JobQueue(job_queues.url)
    job_queues.client().send_message(QueueUrl=job_queues.url, MessageBody=body)
    worker, log = _worker(s3_store, queue)
    message = queue.receive(5, 30)
    assert message is not None
    assert worker.handle(message) == "poison"
    assert '"event": "poison_message"' in log.getvalue()
    assert worker.outcomes == {"poison": 1}  # what worker_stopped reports on exit
    queue.close()


def _store_bytes(store: S3Store) -> dict[str, bytes]:
    return {info.key: store.get(info.key)[0] for info in store.list("")}


def test_a_job_naming_another_file_under_a_live_id_fails_before_its_lease(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """A document whose second input carries the third's key and size (ids the catalog
    holds, keys it holds, but not together) would read one file and retire another: the
    worker refuses it before taking a lease or reading a byte, and leaves its message to
    the redrive policy. The store stays byte for byte as it was."""
    catalog = _four_files(s3_store)
    job = _job(catalog)
    doc = json.loads(job.dumps())
    doc["inputs"][1]["key"], doc["inputs"][1]["size"] = job.inputs[2].key, job.inputs[2].size
    queue = JobQueue(job_queues.url)
    job_queues.client().send_message(QueueUrl=job_queues.url, MessageBody=json.dumps(doc))
    before = _store_bytes(s3_store)
    worker, log = _worker(s3_store, queue)
    message = queue.receive(5, 30)
    assert message is not None
    assert worker.handle(message) == "failed"
    (failed,) = [json.loads(line) for line in log.getvalue().splitlines()][-1:]
    assert failed["event"] == "job_failed"
    assert f"input {job.inputs[1].id} is {job.inputs[1].key}" in failed["error"]
    assert f"not {job.inputs[2].key}" in failed["error"]
    assert _store_bytes(s3_store) == before  # no lease, no output, no commit
    attributes = job_queues.client().get_queue_attributes(
        QueueUrl=job_queues.url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"  # not deleted
    queue.close()


def test_a_queued_job_over_a_quarantined_file_is_stale_and_its_message_deleted(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """A job queued before one of its inputs was quarantined (``compactor catalog
    quarantine``) neither reads nor commits: it is stale, its message is deleted (the
    planner will not plan the file again while it is set aside), and the store is as it
    was after the quarantine's commit."""
    catalog = _four_files(s3_store)
    job = _job(catalog)
    queue = JobQueue(job_queues.url)
    queue.send(job)
    catalog.commit(lambda s: quarantine_file(s, job.inputs[1].id, "damaged", NOW))
    before = _store_bytes(s3_store)
    worker, log = _worker(s3_store, queue)
    message = queue.receive(5, 30)
    assert message is not None
    assert worker.handle(message) == "stale"
    (stale,) = [json.loads(line) for line in log.getvalue().splitlines()][-1:]
    assert f"input file {job.inputs[1].id} is quarantined: damaged" in json.dumps(stale)
    assert _store_bytes(s3_store) == before  # no lease, no output, no commit
    assert queue.receive(1, 30) is None  # deleted, not left to come back
    queue.close()


def test_a_queued_drop_takes_a_quarantined_file_wholly_past_retention(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """Retention's drop reads nothing, so a damaged file set aside still expires: the
    scheduler leases and publishes the drop over it, a worker takes the lease again,
    commits, and the quarantine ends with the file (a read of it would fail the job)."""
    catalog = Catalog(s3_store)
    hour = 3_600_000
    make_topics(catalog, {"logs": (4, {"cleanup.policy": "delete", "retention.ms": str(hour)})})
    for i in range(3):
        old = {
            ("logs", p): [Record(j, NOW - 2 * hour, b"k", b"v") for j in range(5)] for p in range(4)
        }
        add_file(s3_store, catalog, f"f{i}", old)
    damaged = catalog.snapshot().files[1]
    _flip_a_byte(s3_store, damaged.key)
    catalog.commit(lambda s: quarantine_file(s, damaged.id, "damaged", NOW))
    data = _data(s3_store)
    queue = JobQueue(job_queues.url)
    (published,) = Scheduler(catalog, queue, CONFIG, lease_ms=600_000).publish_due(NOW).published
    assert published.job.drop and damaged.id in [i.id for i in published.job.inputs]
    worker, log = _worker(s3_store, queue)
    message = queue.receive(5, 30)
    assert message is not None
    # the worker's heartbeat renews the drop's lease over the quarantined file; a job
    # that reads its inputs could not
    for unread in (False, True):
        with Heartbeat(
            queue, message, JobLeases(catalog, "w"), published.job.id, 1, unread=unread
        ) as beat:
            deadline = time.monotonic() + 30
            while beat.beats == 0 and beat.lost is None and time.monotonic() < deadline:
                time.sleep(0.05)
        assert (beat.beats > 0, beat.lost is None) == (unread, unread), beat.lost
        assert unread or "is quarantined: damaged" in str(beat.lost)
    assert worker.handle(message) == "committed", log.getvalue()
    snap = catalog.snapshot()
    assert snap.files == () and snap.quarantined == {} and snap.leases == {}
    assert damaged.key in {g.key for g in snap.garbage}
    assert _data(s3_store) == data  # nothing written, nothing rewritten
    assert queue.receive(1, 30) is None
    queue.close()


def _flip_a_byte(store: S3Store, key: str) -> None:
    damaged = bytearray(store.get(key)[0])
    damaged[len(damaged) // 2] ^= 0xFF
    store.put(key, bytes(damaged))


def _data(store: S3Store) -> dict[str, bytes]:
    return {k: v for k, v in _store_bytes(store).items() if k.startswith("data/")}


def _events(log: io.StringIO, name: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    return [e for e in lines if e["event"] == name]


def test_a_damaged_input_is_set_aside_at_the_nth_delivery_and_its_message_deleted(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """``--quarantine-after 2``: the first failure on a flipped byte changes nothing (the
    message stays for the next delivery); the second sets the file aside, once a read of
    the whole file has confirmed the damage, releases the job's lease and deletes the
    message. No data object is written or changed, and the planner plans the other
    files without it."""
    catalog = _four_files(s3_store)
    job = _job(catalog)
    damaged = job.inputs[1]
    _flip_a_byte(s3_store, damaged.key)
    data = _data(s3_store)
    queue = JobQueue(job_queues.url)
    queue.send(job)
    worker, log = _worker(s3_store, queue, quarantine_after=2)

    first = queue.receive(5, 30)
    assert first is not None and first.receive_count == 1
    assert worker.handle(first) == "failed"
    (failed,) = _events(log, "job_failed")
    assert str(failed["error"]).startswith(f"FormatError: {damaged.key}: byte ")
    assert catalog.snapshot().quarantined == {}
    assert _events(log, "file_quarantined") == []
    queue.release(first)

    second = queue.receive(5, 30)
    assert second is not None and second.receive_count == 2
    assert worker.handle(second) == "failed"
    (aside,) = _events(log, "file_quarantined")
    assert (aside["job"], aside["file"], aside["key"]) == (job.id, damaged.id, damaged.key)
    snap = catalog.snapshot()
    assert list(snap.quarantined) == [damaged.id]
    reason = snap.quarantined[damaged.id].reason
    assert reason == aside["reason"]
    assert reason.startswith(
        f"worker: job {job.id} failed on it at delivery 2: {damaged.key}: byte "
    )
    assert job.id not in snap.leases  # released: the files beside it are plannable at once
    assert worker.metrics.files_quarantined._value.get() == 1
    assert job_queues.count(job_queues.url) == 0  # deleted: the job can never commit
    assert _data(s3_store) == data  # nothing written, the damaged file untouched
    assert len(snap.files) == 4
    jobs = full_plan(snap, NOW, CONFIG).jobs
    assert jobs and all(damaged.id not in [i.id for i in j.inputs] for j in jobs)
    queue.close()


def test_damage_is_set_aside_only_when_a_read_confirms_it(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """A failure that names a healthy input (the object replaced while the job ran, a
    misread) sets nothing aside: the confirming read finds the file clean. Nor does a
    failure before the N-th delivery, one of another kind, or one naming no input."""
    catalog = _four_files(s3_store)
    job = _job(catalog)
    healthy = job.inputs[2]
    queue = JobQueue(job_queues.url)
    worker, log = _worker(s3_store, queue, quarantine_after=3)
    named = FormatError(healthy.key, 100, "'BTCH' frame checksum mismatch")
    often = Message(job.dumps(), "receipt", "id", 3)
    assert not worker._set_aside_damaged_input(job, often, named)
    (unconfirmed,) = _events(log, "damage_not_confirmed")
    assert unconfirmed["file"] == healthy.id and unconfirmed["error"] == "the file reads clean"
    early = Message(job.dumps(), "receipt", "id", 2)
    _flip_a_byte(s3_store, healthy.key)
    assert not worker._set_aside_damaged_input(job, early, named)
    assert not worker._set_aside_damaged_input(job, often, StoreError("s3://b/k: timed out"))
    assert not worker._set_aside_damaged_input(job, often, FormatError("data/L0/x.cf", 0, "x"))
    assert catalog.snapshot().quarantined == {}
    assert worker._set_aside_damaged_input(job, often, named)  # damaged now, and confirmed
    assert list(catalog.snapshot().quarantined) == [healthy.id]
    # Another worker's failure of the same job finds it set aside already: the job can
    # never commit either, so its message goes too; the first reason stays.
    other, other_log = _worker(s3_store, queue, quarantine_after=3)
    assert other._set_aside_damaged_input(job, often, named)
    (lost,) = _events(other_log, "quarantine_not_committed")
    assert "quarantined already" in str(lost["error"])
    assert other.metrics.files_quarantined._value.get() == 0
    queue.close()


def test_a_failure_while_confirming_damage_is_logged_and_the_worker_lives_on(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """The store or the catalog failing while the worker looks into a damaged input (here
    a log entry that cannot be read, then the object gone) sets nothing aside and raises
    nothing: the message stays, as for any failed job."""
    catalog = _four_files(s3_store)
    job = _job(catalog)
    damaged = job.inputs[0]
    _flip_a_byte(s3_store, damaged.key)
    queue = JobQueue(job_queues.url)
    worker, log = _worker(s3_store, queue, quarantine_after=1)
    named = FormatError(damaged.key, 100, "'BTCH' frame checksum mismatch")
    message = Message(job.dumps(), "receipt", "id", 1)
    next_entry = log_key(catalog.snapshot().version + 1)
    s3_store.put(next_entry, b"not a log entry")
    assert not worker._set_aside_damaged_input(job, message, named)
    s3_store.delete(next_entry)
    s3_store.delete(damaged.key)
    assert not worker._set_aside_damaged_input(job, message, named)
    first, second = _events(log, "damage_not_confirmed")
    assert str(first["error"]).startswith("CorruptCatalog: ")
    assert damaged.key in str(second["error"])
    assert catalog.snapshot().quarantined == {}
    queue.close()


def test_two_schedulers_never_lease_one_job_twice(s3_store: S3Store) -> None:
    catalog = _four_files(s3_store)
    job = _job(catalog)
    inputs = [i.id for i in job.inputs]
    JobLeases(catalog, "scheduler-a").take(job.id, inputs, 60_000, fresh=True)
    with pytest.raises(CommitConflict, match="already leased"):
        JobLeases(catalog, "scheduler-b").take(job.id, inputs, 60_000, fresh=True)
    # A worker holding the job's message takes the same job's lease again: allowed.
    JobLeases(catalog, "worker").take(job.id, inputs, 60_000)


def test_garbage_collection_aborts_only_job_outputs(
    s3_store: S3Store, s3_endpoint: S3Endpoint, s3_url: S3Url
) -> None:
    catalog = _four_files(s3_store)
    s3 = s3_endpoint.client()
    ours = f"data/L1/{'ab' * 16}-compacted.cf"
    for key in (ours, "other-app/upload.bin", "data/L1/not-a-job.cf"):
        s3.create_multipart_upload(Bucket=s3_url.bucket, Key=key)
    aborted = collect_abandoned_uploads(catalog, grace_ms=0)
    assert aborted == [ours]
    left = {u["Key"] for u in s3.list_multipart_uploads(Bucket=s3_url.bucket)["Uploads"]}
    assert left == {"other-app/upload.bin", "data/L1/not-a-job.cf"}
    for u in s3.list_multipart_uploads(Bucket=s3_url.bucket)["Uploads"]:
        s3.abort_multipart_upload(Bucket=s3_url.bucket, Key=u["Key"], UploadId=u["UploadId"])


def test_a_heartbeat_that_has_not_succeeded_for_two_thirds_of_the_timeout_is_lost(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    """A beat stuck in a slow call never fails, but the job must stop before the message
    can have become visible to another worker."""
    catalog = _four_files(s3_store)
    queue = JobQueue(job_queues.url)
    message = Message("", "receipt", "id", 1)
    lost: list[LostJob] = []
    beat = Heartbeat(queue, message, JobLeases(catalog, "w"), "job", 3, lost.append)
    beat.check()  # fresh
    beat._last_ok -= 2.1  # as if no beat had come back for 2.1 s of a 3 s timeout
    with pytest.raises(LostJob, match="no heartbeat succeeded"):
        beat.check()
    assert len(lost) == 1
    queue.close()
