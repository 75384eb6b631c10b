"""``schedule --metrics-port P``: the scheduler's Prometheus metrics, scraped over HTTP from
a ``compactor schedule`` process and parsed, against real S3 and SQS endpoints (moto's
server; LocalStack in CI). Every figure is checked against what the pass printed and
what the catalog holds, not against itself."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli
from conftest import JobQueues, S3Endpoint, S3Url, make_job_queues
from queue_scenarios import (
    NOW,
    SMALL_LEVELS,
    Samples,
    env,
    events,
    populate,
    read_until,
    scraped_metrics,
    start_worker,
)

from compactor.catalog import Catalog, Lease, LiveFile, Snapshot
from compactor.catalog.snapshot import Quarantine
from compactor.jobqueue.errors import QueueError
from compactor.jobqueue.metrics import SchedulerMetrics
from compactor.jobqueue.scheduler import Pass, Published, Scheduler
from compactor.jobqueue.sqs import JobQueue
from compactor.objectstore.s3 import S3Store
from compactor.planner.config import PlannerConfig
from compactor.planner.job import PLANNER_RULES, Job, JobInput
from compactor.planner.plan import plan

LATER_MS = 90_000
"""How far past the ingest the scheduler's clock (--now-ms) is."""
NO_QUEUE = "http://127.0.0.1:9/000000000000/q"
"""A queue URL nothing answers at."""


@contextmanager
def _scheduler(s3: S3Url, queue_url: str, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """``schedule --interval-s 60 --metrics-port 0 --json``: one pass, then it waits."""
    command = [
        sys.executable, "-m", "compactor", *s3.cli_args, "--now-ms", str(NOW + LATER_MS),
        "schedule", "--queue-url", queue_url, "--interval-s", "60", "--metrics-port", "0",
        "--log-format", "json", "--json", *SMALL_LEVELS, *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(s3))
    try:
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def _port(stderr: bytes) -> int:
    """The port a process logged it serves metrics on (it was given 0), from its standard
    error as read so far."""
    (serving,) = [e for e in events(stderr) if e["event"] == "metrics_serving"]
    port = serving["port"]
    assert isinstance(port, int) and port > 0, serving
    return port


def _first_pass(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The pass's ``--json`` line on standard output."""
    assert proc.stdout is not None
    fd, read = proc.stdout.fileno(), b""
    deadline = time.monotonic() + 120
    while not read.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"no pass printed: {read!r}"
        if select.select([fd], [], [], left)[0]:
            read += os.read(fd, 1 << 16)
    done: dict[str, Any] = json.loads(read)
    return done


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[("compactor_scheduler_" + name, tuple(sorted(labels.items())))]


def test_a_pass_is_counted_and_the_catalog_it_planned_on_described(
    s3_url: S3Url, s3_store: S3Store, job_queues: JobQueues
) -> None:
    populate(s3_url, s3_store, records=6000, agents=3, file_bytes=24 << 10)
    before = Catalog(s3_store).snapshot()
    aside = before.files[-1]  # the newest L0 file, set aside: no job may take it
    quarantine = ("catalog", "quarantine", aside.key, "--reason", "a test")
    assert run_cli(*s3_url.cli_args, *quarantine).code == 0
    planned_on = Catalog(s3_store).snapshot()
    l0 = [f for f in planned_on.files if f.level == 0]
    assert len(l0) > 8 and l0 == list(planned_on.files)  # two jobs' worth and more
    started = time.time()

    with _scheduler(s3_url, job_queues.url) as proc:
        port = _port(read_until(proc, "metrics_serving", 60))
        done = _first_pass(proc)
        samples = scraped_metrics(port)
    after = Catalog(s3_store).snapshot()

    jobs = done["jobs"]
    assert len(jobs) >= 2
    by_rule = Counter(j["rule"] for j in jobs)
    for rule in PLANNER_RULES:  # each rule's series exists from the start
        assert _value(samples, "jobs_published_total", rule=rule) == by_rule.get(rule, 0)
    assert _value(samples, "passes_total", outcome="ok") == 1
    assert _value(samples, "passes_total", outcome="failed") == 0
    assert _value(samples, "jobs_unsent_total") == 0
    assert _value(samples, "objects_deleted_total") == len(done["deleted"])
    assert _value(samples, "garbage_collection_failures_total") == 0
    assert _value(samples, "catalog_version") == planned_on.version
    assert _value(samples, "live_files", level="0") == len(l0)
    assert _value(samples, "live_bytes", level="0") == sum(f.size for f in l0)
    for level in "1234":
        assert _value(samples, "live_files", level=level) == 0
        assert _value(samples, "live_bytes", level=level) == 0
    leased = {i["id"] for j in jobs for i in j["inputs"]}
    assert aside.id not in leased
    assert {j["id"] for j in jobs} == set(after.leases)  # the catalog's word, not the pass's
    assert leased == set(after.leased_inputs(after_ms := int(time.time() * 1000)))
    assert after_ms < min(x.expires_ms for x in after.leases.values())
    assert _value(samples, "leased_files") == len(leased)
    assert _value(samples, "quarantined_files") == 1
    oldest_ms = min(f.created_ms for f in l0)
    assert _value(samples, "oldest_l0_file_age_seconds") == (NOW + LATER_MS - oldest_ms) / 1000
    assert 0 < _value(samples, "last_pass_seconds") < time.time() - started
    assert started <= _value(samples, "last_success_timestamp_seconds") <= time.time()


def test_a_failed_pass_is_counted_and_describes_nothing(s3_url: S3Url, s3_store: S3Store) -> None:
    """A queue that answers nothing: the pass cannot learn the lease's duration (the
    queue's visibility timeout) and fails; the scheduler lives on, and its metrics say
    so without describing a catalog it never planned on."""
    populate(s3_url, s3_store, records=2000, agents=1, file_bytes=24 << 10)
    with _scheduler(s3_url, NO_QUEUE) as proc:
        port = _port(read_until(proc, "pass_failed", 300))  # metrics_serving comes first
        assert _first_pass(proc)["jobs"] == []  # the pass's end, its garbage collected
        samples = scraped_metrics(port)
    assert _value(samples, "passes_total", outcome="failed") == 1
    assert _value(samples, "passes_total", outcome="ok") == 0
    assert _value(samples, "last_success_timestamp_seconds") == 0
    assert _value(samples, "live_files", level="0") == 0  # never planned: nothing described
    assert _value(samples, "last_pass_seconds") > 0


def test_a_worker_given_port_0_logs_the_port_it_serves_on(
    s3_url: S3Url, s3_store: S3Store, job_queues: JobQueues
) -> None:
    populate(s3_url, s3_store, records=2000, agents=1, file_bytes=24 << 10)
    worker = start_worker(s3_url, job_queues, "--metrics-port", "0", "--exit-when-idle", "30")
    try:
        port = _port(read_until(worker, "metrics_serving", 60))
        samples = scraped_metrics(port)
    finally:
        worker.kill()
        worker.communicate()
    assert samples[("compactor_worker_jobs_total", (("outcome", "committed"),))] == 0


def test_a_metrics_port_in_use_stops_the_scheduler_before_any_work(
    s3_url: S3Url, s3_store: S3Store, job_queues: JobQueues
) -> None:
    """As for a worker: a usage error in one line (exit 2), before a pass that had jobs to
    lease and publish."""
    populate(s3_url, s3_store, records=6000, agents=3, file_bytes=24 << 10)
    before = Catalog(s3_store).snapshot()
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli(
            *s3_url.cli_args, "--now-ms", str(NOW), "schedule", "--queue-url", job_queues.url,
            *SMALL_LEVELS, "--metrics-port", str(port),
        )  # fmt: skip
    assert r.code == 2, r.err
    assert_one_line_error(r, f"--metrics-port {port}", "in use")
    assert Catalog(s3_store).snapshot() == before
    assert job_queues.count(job_queues.url) == 0
    published = run_cli(
        *s3_url.cli_args, "--now-ms", str(NOW), "schedule", "--queue-url", job_queues.url,
        *SMALL_LEVELS, "--json",
    )  # fmt: skip
    assert json.loads(published.out)["jobs"]  # the same command, the port free: work done


def test_jobs_the_queue_refuses_are_counted_though_the_pass_fails(
    s3_store: S3Store, s3_url: S3Url, s3_endpoint: S3Endpoint
) -> None:
    """Every job bigger than the queue's MaximumMessageSize (1 KiB, SQS's least): each is
    refused and its lease released, the pass fails (QueueError), and each is counted,
    not lost with the pass."""
    populate(s3_url, s3_store, records=6000, agents=3, file_bytes=24 << 10)
    queues = make_job_queues(s3_endpoint)
    queues.client().set_queue_attributes(
        QueueUrl=queues.url, Attributes={"MaximumMessageSize": "1024"}
    )
    config = PlannerConfig.parse({"level.trigger.files": "16"})
    catalog = Catalog(s3_store)
    due = plan(catalog.snapshot(), NOW, config).jobs
    assert due and all(len(j.dumps()) > 1024 for j in due)
    metrics = SchedulerMetrics()
    queue = JobQueue(queues.url)
    try:
        scheduler = Scheduler(catalog, queue, config, lease_ms=60_000, metrics=metrics)
        with pytest.raises(QueueError, match=f"{len(due)} jobs could not be published"):
            scheduler.publish_due(NOW)
    finally:
        queue.close()
    assert metrics.registry.get_sample_value("compactor_scheduler_jobs_unsent_total") == len(due)
    for rule in PLANNER_RULES:
        sample = metrics.registry.get_sample_value(
            "compactor_scheduler_jobs_published_total", {"rule": rule}
        )
        assert sample == 0
    assert Catalog(s3_store).snapshot().leased_inputs(int(time.time() * 1000)) == {}


def _live(file_id: str, level: int, size: int, created_ms: int) -> LiveFile:
    return LiveFile(file_id, f"data/L{level}/{file_id}.cf", level, size, created_ms, ())


def test_a_pass_describes_its_own_snapshot_and_an_ok_pass_replaces_the_last() -> None:
    """In one process, on states built by hand: levels 0 to 4 and one past the top (a
    catalog ``verify`` faults), a lease expired and one not, a file set aside; then a
    failed pass, which keeps the last ok pass's figures, and an ok pass on an empty
    catalog, which sets every one again."""
    files = (
        _live("a", 4, 4000, 100),
        _live("b", 2, 200, 200),
        _live("c", 2, 300, 300),
        _live("d", 0, 10, 5_000),
        _live("e", 0, 20, 7_000),
        _live("f", 7, 1, 8_000),
    )
    leases = {
        "old": Lease("old", "w", ("a",), 0, 1_000),  # expired at the lease clock
        "live": Lease("live", "w", ("b", "c"), 0, 10**12),
    }
    snap = Snapshot(
        version=41, files=files, leases=leases, quarantined={"d": Quarantine("d", "x", 1)}
    )
    job = Job((JobInput("e", files[4].key, 20),), 1, True, rule="L0->L1")
    done = Pass([Published(job, "m", 10**12)], [], snap, lease_clock_ms=2_000)
    metrics = SchedulerMetrics()
    metrics.pass_ended(done, 65_000, 0.25)

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value("compactor_scheduler_" + name, labels)

    expected = {"0": (2, 30), "1": (0, 0), "2": (2, 500), "3": (0, 0), "4": (1, 4000)}
    for level, (n, size) in {**expected, "7": (1, 1)}.items():
        assert (value("live_files", level=level), value("live_bytes", level=level)) == (n, size)
    assert value("leased_files") == 3  # b and c under the live lease, e just published
    assert value("quarantined_files") == 1
    assert value("oldest_l0_file_age_seconds") == 60.0
    assert value("catalog_version") == 41
    assert value("passes_total", outcome="ok") == 1
    assert value("last_pass_seconds") == 0.25
    success = value("last_success_timestamp_seconds")
    assert success is not None and success > 0

    metrics.pass_ended(Pass([], []), 99_000, 0.5)
    assert value("passes_total", outcome="failed") == 1
    assert value("catalog_version") == 41 and value("live_files", level="2") == 2
    assert value("last_pass_seconds") == 0.5
    assert value("last_success_timestamp_seconds") == success

    metrics.pass_ended(Pass([], [], Snapshot(version=42), lease_clock_ms=2_000), 99_000, 0.1)
    assert value("passes_total", outcome="ok") == 2
    for level in expected:
        assert (value("live_files", level=level), value("live_bytes", level=level)) == (0, 0)
    assert value("leased_files") == 0 and value("quarantined_files") == 0
    assert value("oldest_l0_file_age_seconds") == 0 and value("catalog_version") == 42
