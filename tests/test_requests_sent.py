"""The requests a command sends, counted by operation (``objectstore.request_tally``):
``compact --json``'s ``requests`` and the ``requests_total`` metric of ``worker`` and
``schedule``. Each is checked against a recording proxy on loopback in front of the real
endpoint (moto's server; LocalStack in CI), which classifies every request line it
forwards by itself: an independent count of what the server was sent, retries and
resumed streams included, and a failed job's reads included."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from clirunner import run_cli
from conftest import JobQueues, S3Endpoint, S3Url, make_job_queues
from cutting_proxy import CuttingProxy
from queue_scenarios import (
    NOW,
    SMALL_LEVELS,
    env,
    events,
    populate,
    read_until,
    schedule,
    scraped_metrics,
)

from compactor.objectstore.request_tally import RequestTally, as_json
from compactor.objectstore.s3 import S3Store
from compactor.worker.helper_pool import usable_cpus

NEVER = "NONE /"
"""A request line no client sends: the proxy only records."""


def classified(line: str, headers: dict[str, str], bucket: str) -> tuple[str, str]:
    """(service, operation) of a request the proxy forwarded, from the HTTP request alone:
    an SQS JSON request names its operation in X-Amz-Target; an S3 one (path-style) is
    known by its method, whether it names a key, and its query."""
    target = headers.get("x-amz-target")
    if target is not None:
        return "sqs", target.rpartition(".")[2]
    method, url, _ = line.split(" ")
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    key = parts.path.removeprefix(f"/{bucket}").lstrip("/")
    if method == "GET":
        if "list-type" in query:
            return "s3", "ListObjectsV2"
        if "uploads" in query:
            return "s3", "ListMultipartUploads"
        if "uploadId" in query:
            return "s3", "ListParts"
        return "s3", "GetObject" if key else "ListObjects"
    if method == "HEAD":
        return "s3", "HeadObject" if key else "HeadBucket"
    if method == "PUT":
        return "s3", "UploadPart" if "partNumber" in query else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "s3", "CreateMultipartUpload"
        if "uploadId" in query:
            return "s3", "CompleteMultipartUpload"
        if "delete" in query:
            return "s3", "DeleteObjects"
    if method == "DELETE":
        return "s3", "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    raise AssertionError(f"an S3 request this test cannot name: {line}")


def forwarded(proxy: CuttingProxy, bucket: str) -> Counter[tuple[str, str]]:
    return Counter(classified(line, headers, bucket) for line, headers in proxy.recorded())


def from_json(requests: dict[str, dict[str, int]]) -> Counter[tuple[str, str]]:
    return Counter({(service, op): n for service, ops in requests.items() for op, n in ops.items()})


def through(s3: S3Url, endpoint: str, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "compactor", "--store", s3.url, "--endpoint-url", endpoint,
        "--now-ms", str(NOW), *args,
    ]  # fmt: skip


def proxied_env(s3: S3Url, s3_proxy: str, sqs_proxy: str | None = None) -> dict[str, str]:
    out = {**env(s3), "AWS_ENDPOINT_URL": s3_proxy}
    if sqs_proxy is not None:
        out["AWS_ENDPOINT_URL_SQS"] = sqs_proxy
    return out


def test_compact_reports_every_request_it_sent_resumes_and_retries_included(
    s3_url: S3Url, s3_store: S3Store, s3_endpoint: S3Endpoint
) -> None:
    """``compact --until-idle --json`` through a proxy that cuts one input's first GET
    mid-body (the stream resumes: one more GET) and drops the answer to the catalog's
    first read whole (botocore retries it): its ``requests`` equal what the proxy
    forwarded, operation by operation, the phase-1 helper's reads included."""
    populate(s3_url, s3_store, records=2_000, agents=4, file_bytes=64 << 10)
    victim = max(
        (o for o in s3_store.list("data/L0/") if o.key.endswith(".cf")), key=lambda o: o.size
    )
    path = f"/{s3_url.bucket}/{victim.key}"
    catalog = f"/{s3_url.bucket}/_catalog/"
    with (
        CuttingProxy(s3_endpoint.url, catalog, None) as dropping,
        CuttingProxy(dropping.url, path, victim.size // 2) as proxy,
    ):
        done = subprocess.run(
            through(s3_url, proxy.url, "compact", "--until-idle", "--json", *SMALL_LEVELS),
            capture_output=True,
            env=proxied_env(s3_url, proxy.url),
            timeout=300,
        )
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    # One stream resumed; one catalog read answered, the answer lost, and sent again.
    assert (proxy.cuts, len(dropping.dropped)) == (1, 1)
    jobs = out["jobs"]
    assert jobs and all(j["committed"] and j["phase1"] == "process" for j in jobs)
    sent = from_json(out["requests"])
    assert sent == forwarded(proxy, s3_url.bucket)
    streams = sum(i["gets"] for j in jobs for i in j["inputs"])
    assert streams == 2 * sum(len(j["inputs"]) for j in jobs) + 1  # the resume
    assert sent["s3", "GetObject"] > streams  # and the catalog's reads
    assert {op for service, op in sent if service == "s3"} >= {"GetObject", "PutObject"}


def test_a_tally_counts_each_attempt_once_however_often_a_client_is_watched() -> None:
    """A client watched twice by one tally, sending to a port nothing listens on with two
    attempts allowed: two requests counted (each attempt, not two a watch); ``on_send``
    takes botocore's event name apart; ``since`` and ``as_json`` give what came after a
    snapshot."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import EndpointConnectionError

    tally = RequestTally()
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=1),
    )
    tally.watch(client)
    tally.watch(client)
    before = tally.snapshot()
    with pytest.raises(EndpointConnectionError):
        client.list_queues()
    assert tally.since(before) == {("sqs", "ListQueues"): 2}
    mark = tally.snapshot()
    tally.on_send(event_name="before-send.s3.GetObject", request=None)
    tally.on_send(event_name="before-send.s3.GetObject", request=None)
    tally.on_send(event_name="before-send.sqs.SendMessage", request=None)
    assert tally.since(mark) == {("s3", "GetObject"): 2, ("sqs", "SendMessage"): 1}
    assert as_json(tally.since(mark)) == {"s3": {"GetObject": 2}, "sqs": {"SendMessage": 1}}


def test_a_local_store_sends_no_request(tmp_path: Any) -> None:
    store = str(tmp_path / "store")
    assert run_cli("--store", store, "topic", "create", "t", "--partitions", "1").code == 0
    r = run_cli("--store", store, "compact", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["requests"] == {}


def _scrape_requests(port: int, prefix: str) -> Counter[tuple[str, str]]:
    samples = scraped_metrics(port)
    return Counter(
        {
            (labels["service"], labels["operation"]): int(value)
            for (name, label_items), value in samples.items()
            if name == prefix + "requests_total"
            for labels in [dict(label_items)]
        }
    )


def test_a_worker_counts_every_request_of_its_jobs_and_its_helper_a_failed_job_too(
    s3_url: S3Url, s3_store: S3Store, s3_endpoint: S3Endpoint
) -> None:
    """A worker whose S3 and SQS requests go through recording proxies runs the jobs of
    one schedule; one job fails on an input with a flipped byte (a FormatError: phase 1's
    helper meets it). Scraped while the worker idles, ``compactor_worker_requests_total``
    equals what the proxies forwarded for every S3 operation (the helper's GETs, the
    failed job's, the catalog's) and every SQS one but the idle long polls, which the
    scrape and the proxy may see on either side of one in flight."""
    if usable_cpus() < 2:
        pytest.skip("a worker runs phase 1 in its helper process only on two CPUs or more")
    queues: JobQueues = make_job_queues(s3_endpoint, visibility_timeout_s=60)
    populate(s3_url, s3_store, records=2_000, agents=8, file_bytes=64 << 10)
    jobs = schedule(s3_url, queues)
    assert len(jobs) >= 2
    damaged = jobs[0]["inputs"][0]
    raw = bytearray(s3_store.get(damaged["key"])[0])
    raw[len(raw) // 2] ^= 0xFF
    s3_store.put(damaged["key"], bytes(raw))
    with (
        CuttingProxy(s3_endpoint.url, NEVER, 0) as s3_proxy,
        CuttingProxy(queues.endpoint_url, NEVER, 0, timeout_s=60) as sqs_proxy,
    ):
        command = through(
            s3_url, s3_proxy.url, "worker", "--queue-url", queues.url,
            "--key-buffer-bytes", "1048576", "--log-format", "json", "--metrics-port", "0",
            "--exit-when-idle", "30",
        )  # fmt: skip
        worker = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=proxied_env(s3_url, s3_proxy.url, sqs_proxy.url),
        )
        try:
            err = read_until(worker, "metrics_serving", 60)
            (serving,) = [e for e in events(err) if e["event"] == "metrics_serving"]
            err += _read_outcomes(worker, len(jobs), err)
            before = forwarded(sqs_proxy, s3_url.bucket)
            scraped = _scrape_requests(serving["port"], "compactor_worker_")
            after = forwarded(sqs_proxy, s3_url.bucket)
            s3_sent = forwarded(s3_proxy, s3_url.bucket)
        finally:
            worker.kill()
            worker.communicate()
    outcomes = Counter(e["event"] for e in events(err) if e["event"] in _OUTCOMES)
    assert outcomes == {"job_failed": 1, "job_committed": len(jobs) - 1}, err.decode()
    assert {k: n for k, n in scraped.items() if k[0] == "s3"} == s3_sent
    assert s3_sent["s3", "GetObject"] >= 2 * sum(len(j["inputs"]) for j in jobs)
    polls = ("sqs", "ReceiveMessage")
    assert before[polls] <= scraped[polls] <= after[polls] + 1
    sqs_scraped = {k: n for k, n in scraped.items() if k[0] == "sqs" and k != polls}
    assert sqs_scraped == {k: n for k, n in after.items() if k[0] == "sqs" and k != polls}
    assert sqs_scraped["sqs", "DeleteMessage"] == len(jobs) - 1


_OUTCOMES = ("job_committed", "job_failed", "job_stale", "job_aborted")


def _read_outcomes(worker: subprocess.Popen[bytes], n: int, so_far: bytes) -> bytes:
    """More of the worker's standard error (after ``so_far``), until ``n`` jobs have
    ended."""
    read = b""

    def ended() -> int:
        whole = (so_far + read).splitlines(keepends=True)
        lines = b"".join(line for line in whole if line.endswith(b"\n"))
        return sum(e["event"] in _OUTCOMES for e in events(lines))

    while ended() < n:
        read += _more(worker)
    return read


def _more(worker: subprocess.Popen[bytes]) -> bytes:
    """What the worker writes next to its standard error, within 120 s."""
    assert worker.stderr is not None
    fd = worker.stderr.fileno()
    assert select.select([fd], [], [], 120)[0], "the worker fell silent"
    chunk = os.read(fd, 1 << 16)
    assert chunk, "the worker exited"
    return chunk


# --- replay and Spark: the other two ways of running a job --------------------------------


def _json_through(command: list[str], environment: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, capture_output=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _s3_proxied(
    s3: S3Url, endpoint: S3Endpoint, *args: str
) -> tuple[dict[str, Any], Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """A command's ``--json`` document with every S3 request through a recording proxy:
    the document, its ``requests`` and what the proxy forwarded."""
    with CuttingProxy(endpoint.url, NEVER, 0) as proxy:
        out = _json_through(through(s3, proxy.url, *args), proxied_env(s3, proxy.url))
        return out, from_json(out["requests"]), forwarded(proxy, s3.bucket)


def test_replay_reports_every_request_of_a_drained_queue_and_of_a_verify(
    s3_url: S3Url, s3_store: S3Store, s3_endpoint: S3Endpoint
) -> None:
    """``replay --from-queue URL --execute --json`` (its S3 and SQS requests each
    through a recording proxy) runs a schedule's jobs; its ``requests`` equal what both
    proxies forwarded, the empty receive that ends the drain included. Then
    ``replay --from-history ID --verify --json`` re-runs one commit: its ``requests``
    equal what the S3 proxy forwarded for it, its scratch outputs' uploads and deletes
    included."""
    queues: JobQueues = make_job_queues(s3_endpoint, visibility_timeout_s=60)
    populate(s3_url, s3_store, records=2_000, agents=4, file_bytes=64 << 10)
    jobs = schedule(s3_url, queues)
    assert jobs
    with (
        CuttingProxy(s3_endpoint.url, NEVER, 0) as s3_proxy,
        CuttingProxy(queues.endpoint_url, NEVER, 0, timeout_s=60) as sqs_proxy,
    ):
        drained = _json_through(
            through(s3_url, s3_proxy.url, "replay", "--from-queue", queues.url, "--execute",
                    "--json"),
            proxied_env(s3_url, s3_proxy.url, sqs_proxy.url),
        )  # fmt: skip
        sent = from_json(drained["requests"])
        assert [m["outcome"] for m in drained["messages"]] == ["committed"] * len(jobs)
        assert sent == forwarded(s3_proxy, s3_url.bucket) + forwarded(sqs_proxy, s3_url.bucket)
        assert sent["sqs", "DeleteMessage"] == len(jobs)
        assert sent["s3", "GetObject"] > 2 * sum(len(j["inputs"]) for j in jobs)
    history = subprocess.run(
        [sys.executable, "-m", "compactor", *s3_url.cli_args, "history", "--json"],
        capture_output=True,
        env=env(s3_url),
        timeout=120,
    )
    assert history.returncode == 0, history.stderr.decode()
    commit = max(int(e["id"]) for e in json.loads(history.stdout) if e["kind"] == "compaction")
    verified, sent, seen = _s3_proxied(
        s3_url, s3_endpoint, "replay", "--from-history", str(commit), "--verify", "--json"
    )
    assert verified["ok"], verified["differences"]
    assert sent == seen
    assert sent["s3", "DeleteObjects"] + sent["s3", "DeleteObject"] >= 1  # its scratch


def test_spark_reports_its_tasks_requests_and_its_drivers(
    s3_url: S3Url, s3_store: S3Store, s3_endpoint: S3Endpoint
) -> None:
    """``spark compact --until-idle --json`` and then ``spark index --json``, on
    ``local[2]`` with every S3 request (the driver's and each executor's) through a
    recording proxy: each command's ``requests`` equal what the proxy forwarded for it,
    operation by operation. Each task's own ``requests`` hold its job's two streams per
    input (or its index's one read), its outputs and its commit; the driver's catalog
    reads and leases are the rest."""
    populate(s3_url, s3_store, records=3_000, agents=2, file_bytes=8 << 10)
    spark = ["--master", "local[2]", "--spark-log", os.devnull]
    compacted, sent, seen = _s3_proxied(
        s3_url, s3_endpoint, "spark", "compact", *spark, "--until-idle",
        "--key-buffer-bytes", "1048576", "--json", *SMALL_LEVELS,
    )  # fmt: skip
    assert sent == seen
    jobs = compacted["jobs"]
    assert jobs and all(j["committed"] for j in jobs)
    tasks: Counter[tuple[str, str]] = Counter()
    for j in jobs:
        own = from_json(j["requests"])
        assert own["s3", "GetObject"] >= sum(i["gets"] for i in j["inputs"]) == 2 * len(j["inputs"])
        # Each output is one PutObject (small) or a completed multipart upload; the
        # task's commit is a PutObject more.
        uploaded = own["s3", "PutObject"] + own["s3", "CompleteMultipartUpload"]
        assert uploaded >= len(j["outputs"]) + 1
        tasks += own
    driver = sent - tasks
    assert sum(driver.values()) + sum(tasks.values()) == sum(sent.values())  # none negative
    assert driver["s3", "GetObject"] >= 1 and not driver["s3", "UploadPart"]
    indexed, sent, seen = _s3_proxied(s3_url, s3_endpoint, "spark", "index", *spark, "--json")
    assert sent == seen
    files = indexed["indexed"]
    assert files and all(f["written"] for f in files)
    for f in files:
        assert from_json(f["requests"])["s3", "GetObject"] == f["gets"] == 1
    assert sent["s3", "PutObject"] == len(files)
