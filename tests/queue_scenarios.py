"""Shared by the queue tests: a store of L0 files on the test S3 endpoint, its views, and
``compactor`` subprocesses (scheduler and workers) pointed at it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import urllib.request
from typing import Any

from clirunner import run_cli
from conftest import JobQueues, S3Url
from prometheus_client.parser import text_string_to_metric_families

from compactor.catalog import Catalog
from compactor.ingest.agent import L0Ingest
from compactor.ingest.workload import Workload
from compactor.objectstore.s3 import S3Store

NOW = 1_700_000_100_000
TOPICS = (("c", 8), ("d", 2))
SMALL_LEVELS = ("--set", "level.trigger.files=4")
"""A level-0 trigger of 4 files: a few dozen L0 files make several jobs."""


def populate(s3: S3Url, store: S3Store, records: int, agents: int, file_bytes: int) -> None:
    """Topic ``c`` (8 partitions, compacted) and ``d`` (2, delete), and ``agents`` ingest
    rounds of L0 files of about ``file_bytes``."""
    args = s3.cli_args
    create_c = ("topic", "create", "c", "--partitions", "8", "--config", "cleanup.policy=compact")
    assert run_cli(*args, *create_c).code == 0
    assert run_cli(*args, "topic", "create", "d", "--partitions", "2").code == 0
    catalog = Catalog(store)
    for agent in range(agents):
        ingest = L0Ingest(store, catalog, now_ms=NOW, max_file_bytes=file_bytes)
        workload = Workload(
            topics=TOPICS,
            records=records // agents,
            keys_per_partition=200,
            seed=agent,
            start_ms=NOW - 10**6,
        )
        for r in workload.generate():
            ingest.add(r)
        ingest.commit()


def views(s3: S3Url) -> dict[str, dict[str, str]]:
    """The latest value per key of every partition, tombstoned keys absent (dump)."""
    out: dict[str, dict[str, str]] = {}
    for topic, partitions in TOPICS:
        for p in range(partitions):
            r = run_cli(*s3.cli_args, "dump", "--topic", topic, "--partition", str(p))
            assert r.code == 0, r.err
            view: dict[str, str | None] = {}
            for line in r.out.splitlines():
                rec = json.loads(line)
                view[rec["key"]] = rec["value"]
            out[f"{topic}/{p}"] = {k: v for k, v in view.items() if v is not None}
    return out


def cli(s3: S3Url, *args: str) -> list[str]:
    return [sys.executable, "-m", "compactor", *s3.cli_args, "--now-ms", str(NOW), *args]


def env(s3: S3Url) -> dict[str, str]:
    return {**os.environ, **s3.env}


def schedule(s3: S3Url, queues: JobQueues, *extra: str) -> list[dict[str, Any]]:
    """``schedule --once --json``; the jobs it published."""
    done = subprocess.run(
        cli(s3, "schedule", "--queue-url", queues.url, "--once", "--json", *SMALL_LEVELS, *extra),
        capture_output=True,
        env=env(s3),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    jobs: list[dict[str, Any]] = json.loads(done.stdout)["jobs"]
    return jobs


def start_worker(s3: S3Url, queues: JobQueues, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cli(
            s3,
            "worker",
            "--queue-url",
            queues.url,
            "--key-buffer-bytes",
            "1048576",
            "--log-format",
            "json",
            *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(s3),
    )


def events(stderr: bytes) -> list[dict[str, Any]]:
    """The JSON log lines a worker wrote."""
    return [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]


def read_until(worker: subprocess.Popen[bytes], event: str, timeout_s: float) -> bytes:
    """The worker's standard error as read until a whole line logs ``event``: that line
    and whatever came with it (the rest is left for ``communicate``); AssertionError if
    it exits or ``timeout_s`` passes first. Read from the descriptor itself: a line in
    the pipe object's buffer is not seen by select."""
    assert worker.stderr is not None
    fd = worker.stderr.fileno()
    read = b""
    deadline = time.monotonic() + timeout_s
    while not any(
        line.startswith(b"{") and json.loads(line)["event"] == event
        for line in read.splitlines(keepends=True)
        if line.endswith(b"\n")
    ):
        left = deadline - time.monotonic()
        assert left > 0, f"no {event} within {timeout_s} s:\n{read.decode()}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 1 << 16)
            assert chunk, f"the worker exited before {event}:\n{read.decode()}"
            read += chunk
    return read


def shown(log: list[dict[str, Any]]) -> str:
    """Workers' events for an assertion's message: one JSON line each, errors in full
    (pytest shortens a message that is not a string)."""
    return "\n".join(json.dumps(e, sort_keys=True) for e in log)


def compaction_commits(s3: S3Url) -> list[str]:
    """The job id of every compaction commit in the catalog's history."""
    r = run_cli(*s3.cli_args, "history", "--json", "--limit", "100000")
    assert r.code == 0, r.err
    return [e["job"]["id"] for e in json.loads(r.out) if e["kind"] == "compaction"]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Scraped metrics: (name, sorted labels) -> value."""


def scraped_metrics(port: int) -> Samples:
    """GET /metrics from 127.0.0.1:``port``, parsed by prometheus_client's own parser."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }
