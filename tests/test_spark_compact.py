"""``compactor spark compact`` on a real SparkSession (``local[2]``): the same result as
``compact --until-idle``, one commit per job, two GETs per input, one key buffer per
executor process; retried and duplicated (speculative) attempts never leave two outputs
or two commits. Run as a user runs it: the virtualenv's ``compactor`` by its full path,
the virtualenv not activated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clirunner import one_line, run_cli, spark_cli, two_l0_files
from conftest import S3Url
from queue_scenarios import NOW, SMALL_LEVELS, TOPICS, populate, views

from compactor.catalog import Catalog
from compactor.ingest.agent import L0Ingest
from compactor.ingest.workload import Workload
from compactor.objectstore import LocalStore
from compactor.objectstore.s3 import S3Store
from compactor.planner.codecs import DEFAULT_CODECS

COMPACTOR = Path(sys.executable).parent / "compactor"
BUFFER = str(1 << 20)


def _spark_compact(
    store_args: list[str], master: str = "local[2]", env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """``spark compact --until-idle --json`` by the virtualenv's full path, not activated:
    its report and Spark's log (``--spark-log``). Its own stderr is empty: Spark's log
    goes only to that file."""
    base = {k: v for k, v in (env or os.environ).items() if k != "VIRTUAL_ENV"}
    venv_bin = str(COMPACTOR.parent)
    base["PATH"] = os.pathsep.join(
        p for p in base.get("PATH", "").split(os.pathsep) if p != venv_bin
    )
    with tempfile.TemporaryDirectory() as logs:
        log = Path(logs) / "spark.log"
        done = subprocess.run(
            [str(COMPACTOR), *store_args, "--now-ms", str(NOW), "spark", "compact"]
            + ["--master", master, "--until-idle", "--key-buffer-bytes", BUFFER, "--json"]
            + ["--spark-log", str(log), *SMALL_LEVELS],
            capture_output=True,
            env=base,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert done.stderr == b""
        result: dict[str, Any] = json.loads(done.stdout)
        return result, log.read_text()


def _compaction_commits(store_args: list[str]) -> list[dict[str, Any]]:
    r = run_cli(*store_args, "history", "--json", "--limit", "100000")
    assert r.code == 0, r.err
    return [e for e in json.loads(r.out) if e["kind"] == "compaction"]


def _compactions(store_args: list[str]) -> list[str]:
    return [e["job"]["id"] for e in _compaction_commits(store_args)]


def _codecs_by_level(store_args: list[str]) -> dict[int, set[str | None]]:
    """The codecs the compaction commits recorded, by their jobs' output level."""
    found: dict[int, set[str | None]] = {}
    for e in _compaction_commits(store_args):
        found.setdefault(e["job"]["output_level"], set()).add(e["run"]["compression"])
    return found


def _local_store(root: Path) -> list[str]:
    """Topics c and d and two ingest rounds of small L0 files in a local store."""
    args = ["--store", str(root)]
    create_c = ("topic", "create", "c", "--partitions", "8", "--config", "cleanup.policy=compact")
    assert run_cli(*args, *create_c).code == 0
    assert run_cli(*args, "topic", "create", "d", "--partitions", "2").code == 0
    store = LocalStore(root)
    catalog = Catalog(store)
    for agent in range(2):
        ingest = L0Ingest(store, catalog, now_ms=NOW, max_file_bytes=8 << 10)
        workload = Workload(
            topics=TOPICS, records=1500, keys_per_partition=200, seed=agent, start_ms=NOW - 10**6
        )
        for r in workload.generate():
            ingest.add(r)
        ingest.commit()
    return args


def _dumps(args: list[str]) -> dict[str, str]:
    out = {}
    for topic, partitions in TOPICS:
        for p in range(partitions):
            r = run_cli(*args, "dump", "--topic", topic, "--partition", str(p))
            assert r.code == 0, r.err
            out[f"{topic}/{p}"] = r.out
    return out


def _check_reports(reports: list[dict[str, Any]], commits: list[str]) -> None:
    committed = [r["job_id"] for r in reports if r["committed"]]
    assert committed and sorted(committed) == sorted(commits)
    assert len(set(commits)) == len(commits)  # each job committed exactly once
    for r in reports:
        if r["committed"]:
            assert [i["gets"] for i in r["inputs"]] == [2] * len(r["inputs"])
            assert r["executor"]["key_buffers_allocated"] == 1  # once per executor process
            assert r["executor"]["catalog_readers"] == 1  # the catalog read whole once
    pids = Counter(r["executor"]["pid"] for r in reports if r["committed"])
    assert max(pids.values()) > 1  # an executor process ran tasks after its first


def test_spark_compact_equals_compact_until_idle(tmp_path: Path) -> None:
    spark_args = _local_store(tmp_path / "spark")
    local_args = ["--store", str(tmp_path / "local")]
    shutil.copytree(tmp_path / "spark", tmp_path / "local")
    before = _dumps(spark_args)

    spark, _ = _spark_compact(spark_args)
    compact = run_cli(
        *local_args, "--now-ms", str(NOW), "compact", "--until-idle", "--json", *SMALL_LEVELS
    )
    assert compact.code == 0, compact.err
    local_jobs = json.loads(compact.out)["jobs"]

    assert len(spark["jobs"]) == len(local_jobs) > 3
    _check_reports(spark["jobs"], _compactions(spark_args))
    assert sorted(r["rule"] for r in spark["jobs"]) == sorted(r["rule"] for r in local_jobs)
    after = _dumps(spark_args)
    assert after == _dumps(local_args)  # record for record, offsets included
    assert after != before  # compaction did drop superseded records
    codecs = _codecs_by_level(spark_args)
    assert codecs == _codecs_by_level(local_args)
    assert codecs == {level: {DEFAULT_CODECS.for_level(level)} for level in codecs}
    assert run_cli(*spark_args, "verify").code == 0
    pids = {r["executor"]["pid"] for r in spark["jobs"]}
    assert 1 <= len(pids) <= 2  # local[2]: at most two executor Python workers


def test_spark_compact_on_s3_keeps_every_view(s3_url: S3Url, s3_store: S3Store) -> None:
    populate(s3_url, s3_store, records=3000, agents=2, file_bytes=8 << 10)
    view = views(s3_url)
    result, _ = _spark_compact(s3_url.cli_args, env={**os.environ, **s3_url.env})
    _check_reports(result["jobs"], _compactions(s3_url.cli_args))
    assert views(s3_url) == view
    assert run_cli(*s3_url.cli_args, "verify").code == 0
    assert not list(s3_store.pending_uploads())


@pytest.mark.parametrize("fault", ["before-commit", "after-commit"])
def test_a_failed_first_attempt_ends_in_one_output_and_one_commit(
    tmp_path: Path, fault: str
) -> None:
    args = _local_store(tmp_path / "store")
    shutil.copytree(tmp_path / "store", tmp_path / "baseline")
    baseline = ["--store", str(tmp_path / "baseline")]
    compact = run_cli(*baseline, "--now-ms", str(NOW), "compact", "--until-idle", *SMALL_LEVELS)
    assert compact.code == 0, compact.err
    env = {**os.environ, "COMPACTOR_SPARK_INJECT_FAULT": fault}
    # local[2,2]: two threads, and a task may fail twice (spark.task.maxFailures).
    result, spark_log = _spark_compact(args, "local[2,2]", env=env)
    assert spark_log.count("injected fault") >= 1  # first attempts did fail
    commits = _compactions(args)
    assert len(commits) == len(set(commits)) > 3
    reports = result["jobs"]
    if fault == "after-commit":  # every first attempt committed, then its task failed
        assert not any(r["committed"] for r in reports)
        assert {r["note"] for r in reports} == {"an earlier attempt of this job committed it"}
    else:
        _check_reports(reports, commits)
    live = Catalog(LocalStore(tmp_path / "store")).snapshot().files
    data = {
        p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").rglob("*.cf")
    }
    assert {f.key for f in live} <= data
    assert len({f.key for f in live}) == len(live)
    assert _dumps(args) == _dumps(baseline)
    assert run_cli(*args, "verify").code == 0
    assert not list(LocalStore(tmp_path / "store").pending_uploads())


def test_duplicate_attempts_of_one_job_commit_once(tmp_path: Path) -> None:
    """What speculation does: two attempts of the same job at the same time."""
    from compactor.planner.config import PlannerConfig
    from compactor.planner.plan import plan
    from compactor.spark.driver import _fan_out, spark_session
    from compactor.spark.task import TaskSettings

    args = _local_store(tmp_path / "store")
    store = LocalStore(tmp_path / "store")
    catalog = Catalog(store)
    config = PlannerConfig.parse({"level.trigger.files": "4"})
    job = plan(catalog.snapshot(), NOW, config).jobs[0]
    settings = TaskSettings(store.url, None, 1 << 20, NOW, 600_000)
    spark = spark_session("local[2]")
    try:
        broadcast = spark.sparkContext.broadcast(settings.to_json())
        reports = _fan_out(spark.sparkContext, broadcast, [job.dumps(), job.dumps()])
    finally:
        spark.stop()
    assert sorted(r["committed"] for r in reports) == [False, True]
    assert _compactions(args) == [job.id]
    live = catalog.snapshot().files
    outputs = [f for f in live if f.id.startswith(job.id)]
    assert len(outputs) >= 1 and len({f.key for f in live}) == len(live)
    assert run_cli(*args, "verify").code == 0


def test_a_corrupt_input_fails_a_spark_task_as_it_fails_compact(tmp_path: Path) -> None:
    """A task's FormatError reached the command as a Py4J error: "internal error" and exit
    70, the JVM's stack in its message. It is the FormatError's own line and exit 6, as
    ``compact`` gives, for ``spark compact`` and ``spark index``; the live files, their
    bytes and the leases are as they were (the failed wave's leases are given back; ``spark
    index`` still indexes the sound file)."""
    store = two_l0_files(tmp_path / "store", str(NOW))
    victim = sorted((store / "data" / "L0").glob("*.cf"))[0]
    data = bytearray(victim.read_bytes())
    data[300] ^= 0xFF
    victim.write_bytes(bytes(data))
    live = Catalog(LocalStore(store)).snapshot()
    files = {p: p.read_bytes() for p in (store / "data").rglob("*.cf")}
    compact = run_cli("--store", str(store), "--now-ms", str(NOW), "compact", "--full")
    assert compact.code == 6, compact
    for command in (["compact", "--master", "local[2]", "--full"], ["index"]):
        done = spark_cli(store, str(NOW), *command)
        last = one_line(done, 6)  # Spark's own log is not on stderr
        assert last.startswith(f"compactor: data/L0/{victim.name}: byte "), last
        assert "Py4J" not in last and len(last) < 300
        after = Catalog(LocalStore(store)).snapshot()
        assert after.files == live.files
        assert not after.leases
        assert {p: p.read_bytes() for p in (store / "data").rglob("*.cf")} == files
    assert compact.err.startswith(last.split(" byte ")[0]), (compact.err, last)


def test_spark_compact_drops_a_quarantined_file_wholly_past_retention(tmp_path: Path) -> None:
    """The drop reads nothing, so a damaged file set aside still expires under Spark as it
    does under ``compact``: the driver leases the run over it, the task commits, and the
    quarantine ends with the file."""
    from worker_scenarios import add_file, make_topics

    from compactor.catalog.changes import quarantine_file
    from compactor.fileformat import Record

    store = LocalStore(tmp_path / "store")
    catalog = Catalog(store)
    hour = 3_600_000
    make_topics(catalog, {"logs": (2, {"cleanup.policy": "delete", "retention.ms": str(hour)})})
    for i in range(3):
        old = [Record(j, NOW - 2 * hour, b"k", b"v") for j in range(5)]
        add_file(store, catalog, f"f{i}", {("logs", p): old for p in range(2)})
    damaged = catalog.snapshot().files[1]
    raw = bytearray((tmp_path / "store" / damaged.key).read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a read of it would fail the task
    (tmp_path / "store" / damaged.key).write_bytes(bytes(raw))
    catalog.commit(lambda s: quarantine_file(s, damaged.id, "damaged", NOW))
    done = spark_cli(tmp_path / "store", str(NOW), "compact", "--master", "local[2]", "--json")
    assert done.code == 0, done.err[-3000:]
    snap = catalog.snapshot()
    assert snap.files == () and snap.quarantined == {} and snap.leases == {}
    assert damaged.key in {g.key for g in snap.garbage}
