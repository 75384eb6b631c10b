"""``compactor replay``: dry runs change nothing, ``--execute`` commits exactly once (as a
worker does), a dead-letter queue drains, and ``--verify`` re-runs a commit and finds an
altered output. Real parts: moto's S3 and SQS servers (LocalStack in CI), boto3 requests.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from clirunner import assert_one_line_error, run_cli
from conftest import JobQueues, S3Url
from queue_scenarios import NOW, SMALL_LEVELS, compaction_commits, populate, views

from compactor.catalog import Catalog
from compactor.catalog.leases import JobLeases
from compactor.fileformat import (
    StreamReader,
    batch_to_records,
    records_to_batch,
    write_file,
)
from compactor.objectstore import ObjectStore
from compactor.objectstore.s3 import S3Store

pytestmark = pytest.mark.aws


def _store_bytes(store: ObjectStore) -> dict[str, bytes]:
    """Every object in the store and its bytes."""
    return {info.key: store.get(info.key)[0] for info in store.list("")}


def _planned(s3: S3Url) -> list[dict[str, Any]]:
    r = run_cli(*s3.cli_args, "--now-ms", str(NOW), "plan", "--json", *SMALL_LEVELS)
    assert r.code == 0, r.err
    jobs: list[dict[str, Any]] = json.loads(r.out)["jobs"]
    assert len(jobs) >= 2, jobs
    return jobs


def _replay(s3: S3Url, *args: str) -> Any:
    return run_cli(*s3.cli_args, "--now-ms", str(NOW), "replay", *args)


@pytest.fixture
def planned(s3_url: S3Url, s3_store: S3Store) -> list[dict[str, Any]]:
    """A store of L0 files on the test endpoint, and the jobs ``plan --json`` prints."""
    populate(s3_url, s3_store, records=3000, agents=2, file_bytes=8 << 10)
    return _planned(s3_url)


def _save(tmp_path: Path, job: dict[str, Any], name: str = "job.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(job))
    return str(path)


# --- dry runs ------------------------------------------------------------------------------


def test_dry_run_previews_the_job_and_changes_nothing(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = planned[0]
    path = _save(tmp_path, job)
    before = _store_bytes(s3_store)
    r = _replay(s3_url, path, "--json")
    assert r.code == 0, r.err
    (preview,) = json.loads(r.out)["jobs"]
    assert preview["status"] == "ready" and preview["why"] == ""
    assert preview["job"]["id"] == job["id"]
    assert [i["key"] for i in preview["inputs"]] == [i["key"] for i in job["inputs"]]
    assert [i["level"] for i in preview["inputs"]] == job["input_levels"]
    assert all(i["records"] > 0 for i in preview["inputs"])
    assert preview["expected_gets"] == 2 * len(job["inputs"])
    assert preview["output_level"] == job["output_level"]
    assert preview["deduplicate"] == job["deduplicate"]
    assert set(preview["topics"]) <= {"c", "d"} and preview["topics"]
    text = _replay(s3_url, path)
    assert text.code == 0, text.err
    assert f"job {job['id']}: ready" in text.out
    assert f"expected GETs: {2 * len(job['inputs'])}" in text.out
    assert _store_bytes(s3_store) == before  # the catalog and every object byte-identical


def test_dry_run_of_a_leased_job_says_so_and_exits_4(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = planned[0]
    first = job["inputs"][0]["id"]
    JobLeases(Catalog(s3_store), "someone").take("another-job", [first], 600_000)
    before = _store_bytes(s3_store)
    r = _replay(s3_url, _save(tmp_path, job))
    assert r.code == 4
    assert f"job {job['id']}: leased" in r.out
    assert r.err.count("\n") == 1 and "leased by job another-job" in r.err
    executed = _replay(s3_url, _save(tmp_path, job), "--execute")
    assert_one_line_error(executed, "leased by job another-job")
    assert executed.code == 4
    assert _store_bytes(s3_store) == before


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "invalid JSON (Expecting property name enclosed in double quotes"),
        ('{"schema_version": 2}', "schema_version 2"),
        ('{"schema_version": 1, "inputs": []}', "malformed job document"),
        ("[1, 2]", "a JSON list"),
    ],
)
def test_a_bad_job_document_is_one_line_and_exit_2(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    r = run_cli("--store", str(tmp_path / "store"), "replay", str(path))
    assert_one_line_error(r, "bad.json", fragment)
    assert r.code == 2


def test_replay_needs_exactly_one_source(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "store")]
    assert_one_line_error(run_cli(*store, "replay"), "give one of")
    both = run_cli(*store, "replay", "x.json", "--from-history", "3")
    assert_one_line_error(both, "give one of")
    verify = run_cli(*store, "replay", "x.json", "--verify")
    assert_one_line_error(verify, "--verify goes with --from-history")
    assert_one_line_error(run_cli(*store, "replay", "--from-history", "x"), "commit id")


# --- --execute -----------------------------------------------------------------------------


def test_execute_commits_exactly_once_and_again_is_a_stale_no_op(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = planned[0]
    path = _save(tmp_path, job)
    view = views(s3_url)
    r = _replay(s3_url, path, "--execute", "--json")
    assert r.code == 0, r.err
    (done,) = json.loads(r.out)["jobs"]
    assert done["outcome"] == "committed"
    assert [i["gets"] for i in done["report"]["inputs"]] == [2] * len(job["inputs"])
    assert compaction_commits(s3_url) == [job["id"]]
    snap = Catalog(s3_store).snapshot()
    assert not snap.leases  # the commit ended the job's lease
    live = {f.id for f in snap.files}
    assert not live & {i["id"] for i in job["inputs"]}
    assert views(s3_url) == view  # the latest value per key is unchanged

    before = _store_bytes(s3_store)
    again = _replay(s3_url, path, "--execute")
    assert again.code == 0, again.err
    assert again.out.startswith(f"stale: job {job['id']} is a no-op")
    assert compaction_commits(s3_url) == [job["id"]]
    assert _store_bytes(s3_store) == before
    # and its dry run now says why it would not run
    dry = _replay(s3_url, path)
    assert dry.code == 4 and "stale" in dry.out and "no longer live" in dry.err


@pytest.mark.parametrize("forge", ["another file's key and size", "a size one byte longer"])
def test_a_job_naming_another_file_under_a_live_id_never_runs(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path, forge: str
) -> None:
    """The pointers would open the document's key while the commit retires the catalog's
    id: a document where they differ is refused, dry run (exit 4, "mismatch") and
    --execute (exit 7, one line) alike, before any lease; the store is unchanged."""
    job = json.loads(json.dumps(planned[0]))
    first, second = job["inputs"][0], job["inputs"][1]
    if forge.startswith("another"):
        second["key"], second["size"] = first["key"], first["size"]
    else:
        second["size"] += 1
    path = _save(tmp_path, job)
    before = _store_bytes(s3_store)
    dry = _replay(s3_url, path)
    assert dry.code == 4
    assert f"job {job['id']}: mismatch" in dry.out
    assert f"is {planned[0]['inputs'][1]['key']}" in dry.err
    executed = _replay(s3_url, path, "--execute")
    assert_one_line_error(executed, f"input {second['id']} is", f"not {second['key']}")
    assert executed.code == 7
    assert _store_bytes(s3_store) == before


# --- queues --------------------------------------------------------------------------------


def _send(queues: JobQueues, url: str, bodies: list[str]) -> None:
    client = queues.client()
    for body in bodies:
        client.send_message(QueueUrl=url, MessageBody=body)


def _visible(queues: JobQueues, url: str) -> list[str]:
    """Receives every visible message (releasing none): their bodies."""
    client = queues.client()
    bodies = []
    while True:
        got = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60
        ).get("Messages", [])
        if not got:
            return bodies
        bodies += [m["Body"] for m in got]


def test_peeking_at_a_queue_changes_nothing_and_leaves_its_messages_visible(
    s3_url: S3Url,
    s3_store: S3Store,
    planned: list[dict[str, Any]],
    job_queues: JobQueues,
) -> None:
    bodies = [json.dumps(j) for j in planned[:2]] + ["not a job"]
    _send(job_queues, job_queues.url, bodies)
    before = _store_bytes(s3_store)
    r = _replay(s3_url, "--from-queue", job_queues.url, "--json")
    assert r.code == 0, r.err
    docs = json.loads(r.out)["jobs"]
    assert sorted(d["status"] for d in docs) == ["poison", "ready", "ready"]
    assert {d["job"]["id"] for d in docs if d["status"] == "ready"} == {
        j["id"] for j in planned[:2]
    }
    assert all(d["message_id"] for d in docs)
    limited = _replay(s3_url, "--from-queue", job_queues.url, "--max", "1", "--json")
    assert limited.code == 0 and len(json.loads(limited.out)["jobs"]) == 1
    assert sorted(_visible(job_queues, job_queues.url)) == sorted(bodies)
    assert _store_bytes(s3_store) == before


def test_execute_drains_a_dead_letter_queue(
    s3_url: S3Url,
    s3_store: S3Store,
    planned: list[dict[str, Any]],
    job_queues: JobQueues,
) -> None:
    """Jobs that reached the DLQ run and leave it; a duplicate is deleted as stale; a
    message that is not a job document stays, visible."""
    first, second = planned[:2]
    bodies = [json.dumps(first), json.dumps(second), json.dumps(first), '{"schema_version": 9}']
    _send(job_queues, job_queues.dlq_url, bodies)
    view = views(s3_url)
    r = _replay(s3_url, "--from-queue", job_queues.dlq_url, "--execute", "--json")
    assert r.code == 0, r.err
    outcomes = sorted(m["outcome"] for m in json.loads(r.out)["messages"])
    assert outcomes == ["committed", "committed", "poison", "stale"]
    assert sorted(compaction_commits(s3_url)) == sorted([first["id"], second["id"]])
    assert _visible(job_queues, job_queues.dlq_url) == ['{"schema_version": 9}']
    assert views(s3_url) == view


# --- --from-history and --verify ------------------------------------------------------------


def _compaction_ids(s3: S3Url) -> list[int]:
    r = run_cli(*s3.cli_args, "history", "--json")
    assert r.code == 0, r.err
    return [int(e["id"]) for e in json.loads(r.out) if e["kind"] == "compaction"]


def test_verify_passes_on_an_honest_store_and_names_an_altered_record(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = (
        next(j for j in planned if j["deduplicate"])
        if any(j["deduplicate"] for j in planned)
        else planned[0]
    )
    assert _replay(s3_url, _save(tmp_path, job), "--execute").code == 0
    (commit,) = _compaction_ids(s3_url)

    shown = _replay(s3_url, "--from-history", str(commit), "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["jobs"][0]["status"] == "committed"

    before = _store_bytes(s3_store)
    ok = _replay(s3_url, "--from-history", str(commit), "--verify", "--json")
    assert ok.code == 0, ok.err
    report = json.loads(ok.out)
    assert report["ok"] and report["differences"] == [] and report["records"] > 0
    assert _store_bytes(s3_store) == before  # its scratch objects are gone, nothing else

    # Re-write one committed output with one record's value changed: a valid file.
    output = report["outputs"][0]
    altered, where = _with_one_value_changed(s3_store, output)
    s3_store.put(output, altered)
    bad = _replay(s3_url, "--from-history", str(commit), "--verify")
    assert bad.code == 1
    assert bad.err.count("\n") == 1 and "Traceback" not in bad.err
    assert f"commit {commit}" in bad.err and output in bad.err
    assert f"{where} differs from the re-run's in its value" in bad.err
    assert "FAILED" in bad.out


def _with_one_value_changed(store: S3Store, key: str) -> tuple[bytes, str]:
    """The file at ``key`` re-written with the value of its first record changed, and
    where that record is ("topic/partition offset N")."""
    sections = []
    with store.open_stream(key) as stream:
        for section in StreamReader(stream, object_name=key).sections():
            records = [r for b in section.batches() for r in batch_to_records(b)]
            sections.append((section.topic, section.partition, records))
    topic, partition, records = sections[0]
    first = records[0]
    records[0] = type(first)(
        first.offset, first.timestamp, first.key, b"altered", first.headers, first.delete_horizon
    )
    sink = io.BytesIO()
    write_file(sink, [(t, p, [records_to_batch(rs)]) for t, p, rs in sections], object_name=key)
    return sink.getvalue(), f"{topic}/{partition} offset {first.offset}"


def test_verify_refuses_what_it_cannot_re_run(
    s3_url: S3Url, s3_store: S3Store, planned: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = planned[0]
    assert _replay(s3_url, _save(tmp_path, job), "--execute").code == 0
    (commit,) = _compaction_ids(s3_url)
    not_compaction = _replay(s3_url, "--from-history", "1", "--verify")
    assert_one_line_error(not_compaction, "commit 1 is a topic commit, not a compaction")
    s3_store.delete(job["inputs"][0]["key"])
    gone = _replay(s3_url, "--from-history", str(commit), "--verify")
    assert_one_line_error(gone, job["inputs"][0]["key"], "grace period")
    missing = _replay(s3_url, "--from-history", "100000", "--verify")
    assert_one_line_error(missing, "commit 100000 is not in the history")


def test_a_missing_queue_is_one_line(s3_url: S3Url, s3_endpoint: Any) -> None:
    url = boto3.client("sqs", endpoint_url=s3_endpoint.url).meta.endpoint_url + "/000/nope"
    r = _replay(s3_url, "--from-queue", url)
    assert_one_line_error(r)
    assert r.code == 8
