"""kill -9 of a compaction at random points, then verify and re-run; SIGTERM mid-job; and
three compactors on one store at once. Every partition's materialized view stays
unchanged."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from clirunner import run_cli
from conftest import S3Endpoint, S3Url
from worker_scenarios import make_topics

from compactor.catalog import Catalog
from compactor.ingest.agent import L0Ingest
from compactor.ingest.workload import Workload
from compactor.objectstore import LocalStore
from compactor.objectstore.s3 import S3Store

NOW = 1_700_000_100_000


def _populate(root: Path, records: int, agents: int = 4) -> None:
    store = LocalStore(root)
    catalog = Catalog(store)
    args = ["--store", str(root)]
    assert (
        run_cli(
            *args, "topic", "create", "c", "--partitions", "8", "--config", "cleanup.policy=compact"
        ).code
        == 0
    )
    assert run_cli(*args, "topic", "create", "d", "--partitions", "2").code == 0
    for agent in range(agents):
        ingest = L0Ingest(store, catalog, now_ms=NOW, max_file_bytes=64 << 10)
        workload = Workload(
            topics=(("c", 8), ("d", 2)),
            records=records // agents,
            keys_per_partition=300,
            seed=agent,
            start_ms=NOW - 10**6,
        )
        for r in workload.generate():
            ingest.add(r)
        ingest.commit()


def _views(root: Path) -> dict[str, dict[str, str | None]]:
    """Latest value per key of every partition (offset strategy), read with dump."""
    out: dict[str, dict[str, str | None]] = {}
    for topic, partitions in (("c", 8), ("d", 2)):
        for p in range(partitions):
            r = run_cli("--store", str(root), "dump", "--topic", topic, "--partition", str(p))
            assert r.code == 0, r.err
            view: dict[str, str | None] = {}
            for line in r.out.splitlines():
                rec = json.loads(line)
                view[rec["key"]] = rec["value"]
            out[f"{topic}/{p}"] = {k: v for k, v in view.items() if v is not None}
    return out


def _compact_cmd(root: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "compactor.cli.main",
        "--store",
        str(root),
        "--now-ms",
        str(NOW),
        "compact",
        *extra,
    ]


def test_kill_9_at_random_points_then_verify_and_converge(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _populate(root, 120_000)
    before = _views(root)
    # Time uninterrupted runs on copies, then kill at random points within that span. The
    # shorter of two rehearsals: the first may pay one-off costs (bytecode compilation, a
    # cold page cache) that would put every kill after the real run has finished.
    cmd = ["--full", "--key-buffer-bytes", "65536"]
    spans = []
    for n in range(2):
        rehearsal = tmp_path / f"rehearsal-{n}"
        shutil.copytree(root, rehearsal)
        started = time.monotonic()
        subprocess.run(_compact_cmd(rehearsal, *cmd), check=True, capture_output=True, timeout=600)
        spans.append(time.monotonic() - started)
    span = min(spans)
    rng = random.Random(7)
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            _compact_cmd(root, *cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        time.sleep(rng.uniform(0.1, 0.9) * span)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        v = run_cli("--store", str(root), "verify")
        assert v.code == 0, v.out + v.err
    assert kills >= 3, "the compaction finished too fast to be interrupted"
    done = subprocess.run(_compact_cmd(root, "--full"), capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    assert run_cli("--store", str(root), "verify").code == 0
    assert _views(root) == before
    stats = json.loads(run_cli("--store", str(root), "stats", "--json").out)
    assert stats["levels"]["4"]["files"] == 2  # compacted and plain
    again = run_cli("--store", str(root), "--now-ms", str(NOW), "compact", "--full", "--json")
    assert json.loads(again.out)["jobs"] == []  # already one file per group at the top
    assert sum(e["files"] for e in stats["levels"].values()) == 2


def test_three_compactors_on_one_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _populate(root, 60_000, agents=8)
    files_before = len(Catalog(LocalStore(root)).snapshot().files)
    assert files_before >= 64
    before = _views(root)
    procs = [
        subprocess.Popen(
            _compact_cmd(root, "--until-idle", "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    committed = 0
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
        committed += sum(j["committed"] for j in json.loads(out)["jobs"])
    assert committed >= 1
    assert run_cli("--store", str(root), "verify").code == 0
    assert _views(root) == before
    snap = Catalog(LocalStore(root)).snapshot()
    assert sum(1 for f in snap.files if f.level == 0) < 32


def test_sigterm_aborts_the_job_and_its_upload(
    s3_endpoint: S3Endpoint, s3_store: S3Store, s3_url: S3Url
) -> None:
    """An orchestrator's SIGTERM mid-job: the multipart upload is aborted, the catalog and
    the inputs are as they were, one line on stderr, exit 143; the next run completes."""
    catalog = Catalog(s3_store)
    make_topics(catalog, {"c": (8, {"cleanup.policy": "compact"})})
    ingest = L0Ingest(s3_store, catalog, now_ms=NOW, max_file_bytes=256 << 10)
    workload = Workload(topics=(("c", 8),), records=150_000, keys_per_partition=100_000, seed=1)
    for r in workload.generate():
        ingest.add(r)
    ingest.commit()
    client = s3_endpoint.client()
    snap_before = catalog.snapshot()
    objects_before = {o.key: o.etag for o in s3_store.list("")}
    env = {**os.environ, **s3_url.env}
    cmd = [sys.executable, "-m", "compactor.cli.main", *s3_url.cli_args, "--now-ms", str(NOW)]
    proc = subprocess.Popen(
        [*cmd, "compact", "--full"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 120
    while not client.list_multipart_uploads(Bucket=s3_url.bucket).get("Uploads"):
        assert proc.poll() is None, "the job ended before its upload was seen"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)  # a supervisor repeating itself: the unwinding goes on
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err.decode()
    assert err == b"compactor: terminated\n"
    assert out == b""
    assert not client.list_multipart_uploads(Bucket=s3_url.bucket).get("Uploads")
    assert catalog.snapshot() == snap_before
    assert {o.key: o.etag for o in s3_store.list("")} == objects_before
    done = subprocess.run([*cmd, "compact", "--full"], capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    assert run_cli(*s3_url.cli_args, "verify").code == 0
