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
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from clirunner import assert_one_line_error, run_cli
from conftest import JobQueues, S3Url
from prometheus_client.parser import text_string_to_metric_families
from queue_scenarios import NOW, SMALL_LEVELS, env, events, populate, read_until, start_worker

from compactor.catalog import Catalog
from compactor.objectstore.s3 import S3Store
from compactor.planner.job import PLANNER_RULES

LATER_MS = 90_000
"""How far past the ingest the scheduler's clock (--now-ms) is."""
NO_QUEUE = "http://127.0.0.1:9/000000000000/q"
"""A queue URL nothing answers at."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


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


def _port(proc: subprocess.Popen[bytes]) -> int:
    """The port the process logged it serves metrics on (it was given 0)."""
    (serving,) = [e for e in events(read_until(proc, "metrics_serving", 60)) if "port" in e]
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


def _scraped(port: int) -> Samples:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


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
        port = _port(proc)
        done = _first_pass(proc)
        samples = _scraped(port)

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
        port = _port(proc)
        read_until(proc, "pass_failed", 300)
        assert _first_pass(proc)["jobs"] == []  # the pass's end, its garbage collected
        samples = _scraped(port)
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
        port = _port(worker)
        samples = _scraped(port)
    finally:
        worker.kill()
        worker.communicate()
    assert samples[("compactor_worker_jobs_total", (("outcome", "committed"),))] == 0


def test_a_metrics_port_in_use_stops_the_scheduler_before_any_work(
    s3_url: S3Url, s3_store: S3Store
) -> None:
    """As for a worker: a usage error in one line (exit 2), before the queue (which answers
    nothing here) or the catalog is asked."""
    populate(s3_url, s3_store, records=2000, agents=1, file_bytes=24 << 10)
    version = Catalog(s3_store).snapshot().version
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli(
            *s3_url.cli_args, "schedule", "--queue-url", NO_QUEUE, "--metrics-port", str(port)
        )
    assert r.code == 2, r.err
    assert_one_line_error(r, f"--metrics-port {port}", "in use")
    assert Catalog(s3_store).snapshot().version == version
