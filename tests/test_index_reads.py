"""Offset indexes in use, on moto's S3 server: compaction outputs come indexed, ``spark
index`` backfills every other live file, ``dump --from-offset`` / ``--from-timestamp``
equal a full scan for random X and T and cost one GET of the index plus one ranged GET
of the data (counted at the server), ``verify`` checks each index, and garbage
collection deletes an index with its file."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clirunner import run_cli
from conftest import RequestLog, S3Url

from compactor.catalog import Catalog
from compactor.catalog.manifests import manifest_key
from compactor.objectstore.s3 import S3Store

pytestmark = pytest.mark.aws
NOW = 1_700_000_500_000


def _ingest(s3: S3Url, tmp_path: Path, rounds: int) -> None:
    create = ("topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact")
    assert run_cli(*s3.cli_args, *create).code == 0
    rng = random.Random(4)
    for n in range(rounds):
        lines = [
            json.dumps(
                {
                    "topic": "t",
                    "partition": i % 2,
                    "key": f"k{rng.randrange(150)}",
                    "value": None if rng.random() < 0.05 else f"v{n}-{i}",
                    "timestamp": NOW - 100_000 + rng.randrange(100_000),  # not in offset order
                }
            )
            for i in range(400)
        ]
        path = tmp_path / f"in{n}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        r = run_cli(
            *s3.cli_args, "--now-ms", str(NOW), "ingest", str(path), "--max-file-records", "200"
        )
        assert r.code == 0, r.err


def _dump(s3: S3Url, *extra: str) -> list[dict[str, Any]]:
    r = run_cli(*s3.cli_args, "dump", "--topic", "t", "--partition", "1", *extra)
    assert r.code == 0, r.err
    return [json.loads(line) for line in r.out.splitlines()]


def _from_timestamp(rows: list[dict[str, Any]], t: int) -> list[dict[str, Any]]:
    """offsetsForTimes: from the first record whose timestamp >= t, everything after."""
    first = next((i for i, r in enumerate(rows) if r["timestamp"] >= t), len(rows))
    return rows[first:]


def _check_seeks(s3: S3Url, rng: random.Random) -> None:
    rows = _dump(s3)
    assert rows
    last, stamps = rows[-1]["offset"], [r["timestamp"] for r in rows]
    for x in [0, last, last + 1, *(rng.randrange(-3, last + 3) for _ in range(6))]:
        assert _dump(s3, "--from-offset", str(x)) == [r for r in rows if r["offset"] >= x]
    for t in [min(stamps), max(stamps), max(stamps) + 1, *rng.sample(stamps, 6)]:
        assert _dump(s3, "--from-timestamp", str(t)) == _from_timestamp(rows, t)


def _gets(log: RequestLog, bucket: str, key: str) -> list[str]:
    """The Range header of each GET of ``key`` ("" for a whole-object GET)."""
    return [e.headers.get("range", "") for e in log.requests("GET", key, bucket=bucket)]


def test_compacted_files_come_indexed_and_seek_with_two_gets(
    s3_url: S3Url, s3_store: S3Store, request_log: RequestLog, tmp_path: Path
) -> None:
    _ingest(s3_url, tmp_path, rounds=3)
    full = run_cli(*s3_url.cli_args, "--now-ms", str(NOW), "compact", "--full", "--json")
    assert full.code == 0, full.err
    (live,) = Catalog(s3_store).snapshot().files
    s3_store.head(live.key + ".idx")  # written by the job, beside its output

    rows = _dump(s3_url)
    x = rows[len(rows) // 2]["offset"]
    request_log.reset()
    assert _dump(s3_url, "--from-offset", str(x)) == [r for r in rows if r["offset"] >= x]
    assert _gets(request_log, s3_url.bucket, live.key + ".idx") == [""]
    (data_range,) = _gets(request_log, s3_url.bucket, live.key)
    assert data_range.startswith("bytes=")  # one ranged GET of the data
    assert request_log.count("GET", manifest_key(live.id)) == 0  # nor its trailer

    t = sorted(r["timestamp"] for r in rows)[len(rows) // 3]
    request_log.reset()
    assert _dump(s3_url, "--from-timestamp", str(t)) == _from_timestamp(rows, t)
    assert _gets(request_log, s3_url.bucket, live.key + ".idx") == [""]
    assert len(_gets(request_log, s3_url.bucket, live.key)) == 1

    _check_seeks(s3_url, random.Random(1))
    assert run_cli(*s3_url.cli_args, "verify").code == 0


def test_spark_index_backfills_every_live_file(
    s3_url: S3Url, s3_store: S3Store, request_log: RequestLog, tmp_path: Path
) -> None:
    _ingest(s3_url, tmp_path, rounds=2)
    files = Catalog(s3_store).snapshot().files
    assert len(files) >= 4 and all(f.level == 0 for f in files)
    before = _dump(s3_url)
    _check_seeks(s3_url, random.Random(2))  # without indexes: through the trailers

    request_log.reset()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "compactor"), *s3_url.cli_args, "spark", "index"]
        + ["--master", "local[2]", "--json"],
        capture_output=True,
        env={**os.environ, **s3_url.env},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    indexed = json.loads(done.stdout)["indexed"]
    assert sorted(r["key"] for r in indexed) == sorted(f.key for f in files)
    assert all(r["written"] and r["gets"] == 1 for r in indexed)
    for f in files:  # each file read once, front to back
        assert _gets(request_log, s3_url.bucket, f.key) == [""]
        s3_store.head(f.key + ".idx")

    assert _dump(s3_url) == before
    _check_seeks(s3_url, random.Random(3))
    assert run_cli(*s3_url.cli_args, "verify").code == 0

    # An index that does not describe its file is a verify problem.
    victim = files[0].key + ".idx"
    body, _ = s3_store.get(victim)
    other, _ = s3_store.get(files[1].key + ".idx")
    s3_store.put(victim, other)
    bad = run_cli(*s3_url.cli_args, "verify")
    assert bad.code == 1 and victim in bad.err

    # Compaction replaces the files; past the grace period their indexes go with them.
    s3_store.put(victim, body)
    compact = run_cli(*s3_url.cli_args, "--now-ms", str(NOW), "compact", "--full")
    assert compact.code == 0, compact.err
    collected = run_cli(*s3_url.cli_args, "--now-ms", str(NOW), "compact", "--grace-ms", "0")
    assert collected.code == 0, collected.err
    keys = {info.key for info in s3_store.list("data/")}
    (live,) = Catalog(s3_store).snapshot().files
    assert keys == {live.key, live.key + ".idx"}
