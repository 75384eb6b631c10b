"""The planner's time rules through the command line, on quiet data, on a directory store
and on S3 (moto on loopback): retention.ms on delete and compact,delete topics (drop jobs
that read nothing, rewrites when due), tombstones past their delete horizon (after
tombstone.buffer.ms, or at once with ``compact --full``), what ``plan --json`` says of
these jobs, and a compact topic beside a delete topic in shared L0 files.

Every clock is ``--now-ms``; each test asserts what ``dump``, ``stats --json``, the
``compact --json`` report and ``verify`` show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from clirunner import run_cli

T = 1_700_000_000_000
MIN = 60_000
H = 60 * MIN
DAY = 24 * H
GRACE = 10 * MIN  # compact --grace-ms default
TOMBSTONE_BUFFER = 15 * MIN  # tombstone.buffer.ms default
MAX_DELAY = H  # retention.max.delay.ms default

Rec = dict[str, Any]


def rec(topic: str, partition: int, key: str, value: str | None, ts: int | None = None) -> Rec:
    out: Rec = {"topic": topic, "partition": partition, "key": key, "value": value}
    if ts is not None:
        out["timestamp"] = ts
    return out


class Cli:
    """``compactor`` in-process on one store, and a raw listing of the store's data
    objects (the directory, or the bucket) that does not go through the product."""

    def __init__(self, args: list[str], data_objects: Callable[[], set[str]]) -> None:
        self.args = args
        self.data_objects = data_objects

    def ok(self, *args: str, now: int | None = None, stdin: bytes | None = None) -> str:
        clock = [] if now is None else ["--now-ms", str(now)]
        r = run_cli(*self.args, *clock, *args, stdin=stdin)
        assert r.code == 0, f"compactor {' '.join(args)} exited {r.code}: {r.err}"
        assert "Traceback" not in r.err, r.err
        return r.out

    def create(self, name: str, partitions: int, *config: str) -> None:
        settings = [a for c in config for a in ("--config", c)]
        self.ok("topic", "create", name, "--partitions", str(partitions), *settings, now=T)

    def ingest(self, now: int, records: Iterable[Rec]) -> list[str]:
        """The keys of the L0 files the ingest wrote."""
        lines = "".join(json.dumps(r) + "\n" for r in records).encode()
        result = json.loads(self.ok("ingest", "-", now=now, stdin=lines))
        files: list[str] = result["files"]
        assert files, result
        return files

    def dump(self, topic: str, partition: int) -> list[Rec]:
        out = self.ok("dump", "--topic", topic, "--partition", str(partition))
        return [json.loads(line) for line in out.splitlines()]

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.ok("stats", "--json"))
        return result

    def live(self) -> list[tuple[str, int, int]]:
        """(key, level, bytes) of every live file, in sequence."""
        return [(f["key"], f["level"], f["bytes"]) for f in self.stats()["files"]]

    def plan(self, now: int, *settings: str) -> dict[str, Any]:
        """``plan --json``, its jobs checked against the live files (``stats``)."""
        sets = [a for s in settings for a in ("--set", s)]
        doc: dict[str, Any] = json.loads(self.ok("plan", "--json", *sets, now=now))
        assert doc["now_ms"] == now
        _check_jobs(doc["jobs"], self.live())
        return doc

    def plan_text(self, now: int, *settings: str) -> str:
        return self.ok("plan", *[a for s in settings for a in ("--set", s)], now=now)

    def compact(self, now: int, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.ok("compact", "--json", *args, now=now))
        for job in result["jobs"]:
            assert job["committed"] is True, job
        return result

    def verify(self) -> dict[str, Any]:
        r = run_cli(*self.args, "verify", "--json")
        result: dict[str, Any] = json.loads(r.out)
        assert r.code == 0 and result["ok"] is True, (r.code, result, r.err)
        return result


def _check_jobs(jobs: list[dict[str, Any]], live: list[tuple[str, int, int]]) -> None:
    """What ``plan --json`` shows of the time rules' jobs is checked here for every plan
    of every test, and each rule's numbers in the tests below (drop: 1 and 2; rewrite: 3;
    tombstones: 4). Every job must show a well-formed id, inputs that are a contiguous
    run of live files with their sizes and levels, a rule, a reason, numbers; a drop job
    has no output and does not deduplicate."""
    position = {key: i for i, (key, _, _) in enumerate(live)}
    by_key = {key: (level, size) for key, level, size in live}
    for job in jobs:
        assert re.fullmatch(r"[0-9a-f]{32}", job["id"]), job
        keys = [i["key"] for i in job["inputs"]]
        assert keys and all(k in by_key for k in keys), (keys, live)
        first = position[keys[0]]
        assert [position[k] for k in keys] == list(range(first, first + len(keys))), keys
        assert [i["size"] for i in job["inputs"]] == [by_key[k][1] for k in keys]
        assert job["input_levels"] == [by_key[k][0] for k in keys]
        assert isinstance(job["rule"], str) and job["rule"], job
        assert isinstance(job["reason"], str) and job["reason"], job
        assert isinstance(job["numbers"], dict), job
        assert all(isinstance(v, int | float) for v in job["numbers"].values()), job
        if job.get("drop"):
            assert job["drop"] is True
            assert job["output_level"] == 0 and job["deduplicate"] is False, job
        else:
            assert "drop" not in job, job
            assert 1 <= job["output_level"] <= 4, job


@pytest.fixture(params=["local", "s3"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    if request.param == "local":
        root = tmp_path / "store"

        def local_objects() -> set[str]:
            data = root / "data"
            if not data.exists():
                return set()
            return {p.relative_to(root).as_posix() for p in data.rglob("*") if p.is_file()}

        return Cli(["--store", str(root)], local_objects)
    s3 = request.getfixturevalue("s3_url")
    client = request.getfixturevalue("s3_endpoint").client()
    request.addfinalizer(client.close)

    def bucket_objects() -> set[str]:
        keys: set[str] = set()
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=s3.bucket, Prefix="data/"
        ):
            keys.update(o["Key"] for o in page.get("Contents", []))
        return keys

    return Cli(list(s3.cli_args), bucket_objects)


def view(records: list[Rec]) -> dict[str, str | None]:
    """The latest value per key (None: a tombstone), in offset order."""
    out: dict[str, str | None] = {}
    for r in sorted(records, key=lambda r: r["offset"]):
        out[r["key"]] = r["value"]
    return out


def _gets(report: dict[str, Any]) -> list[int]:
    return [i["gets"] for i in report["inputs"]]


# --- 1. a delete topic ends empty after its retention ------------------------------------


def test_delete_topic_ends_empty_after_retention_and_its_objects_are_collected(
    cli: Cli,
) -> None:
    cli.create("logs", 2, "cleanup.policy=delete", f"retention.ms={H}")
    stamps = [T, T + 10 * MIN, T + 20 * MIN]
    files: list[str] = []
    for n, at in enumerate(stamps):
        files += cli.ingest(
            at,
            [rec("logs", p, f"k{n}-{p}-{i}", f"v{n}-{i}") for p in (0, 1) for i in range(n + 2)],
        )
    assert len(files) == 3
    before = {p: cli.dump("logs", p) for p in (0, 1)}
    # Records without "timestamp" take the ingest's --now-ms.
    assert sorted({r["timestamp"] for p in (0, 1) for r in before[p]}) == stamps
    total = sum(len(records) for records in before.values())
    assert total == 2 * (2 + 3 + 4)
    assert cli.data_objects() == set(files)

    # Retention has not passed for any record (the oldest sit exactly at the cutoff).
    assert cli.plan(T + H)["jobs"] == []
    assert cli.plan_text(T + H).startswith("no jobs due")
    assert cli.compact(T + H, "--until-idle")["jobs"] == []
    assert {p: cli.dump("logs", p) for p in (0, 1)} == before
    assert [key for key, _, _ in cli.live()] == files

    # One millisecond after the newest record passed retention: every file goes, unread.
    now = T + 20 * MIN + H + 1
    doc = cli.plan(now)
    (planned,) = doc["jobs"]
    assert planned["rule"] == "retention" and planned["drop"] is True
    assert [i["key"] for i in planned["inputs"]] == files
    numbers = planned["numbers"]
    assert numbers["files"] == 3
    assert numbers["records"] == total
    assert numbers["bytes"] == sum(size for _, _, size in cli.live())
    assert numbers["newest_record_ms"] == T + 20 * MIN
    assert numbers["expired_for_ms"] == 1
    assert any(n.startswith("retention: 3 files wholly past retention.ms") for n in doc["notes"])
    text = cli.plan_text(now)
    assert "retention" in text and "dropped without reading them" in text

    report = cli.compact(now, "--until-idle")
    jobs = report["jobs"]
    assert jobs and all(j["rule"] == "retention" for j in jobs), jobs
    assert all(j["output_level"] == 0 and j["outputs"] == [] for j in jobs), jobs
    assert all(g == 0 for j in jobs for g in _gets(j)), [_gets(j) for j in jobs]
    assert sorted(i["key"] for j in jobs for i in j["inputs"]) == sorted(files)
    assert sum(j["dropped"]["retention"] for j in jobs) == total
    assert sum(j["records_out"] for j in jobs) == 0
    assert report["deleted"] == []  # within the grace period: still readable
    summary = cli.ok("compact", "--until-idle", now=now)
    assert summary.strip() == "nothing to compact"

    stats = cli.stats()
    assert stats["files"] == []
    assert all(level["files"] == 0 for level in stats["levels"].values())
    assert cli.dump("logs", 0) == [] and cli.dump("logs", 1) == []
    assert cli.verify()["records"] == 0
    assert cli.plan(now)["jobs"] == []

    # Garbage collection: the objects stay for the grace period, then go.
    assert cli.data_objects() == set(files)
    assert cli.compact(now + GRACE - 1)["deleted"] == []
    assert cli.data_objects() == set(files)
    collected = cli.compact(now + GRACE)
    assert collected["jobs"] == []
    assert set(files) <= set(collected["deleted"])
    assert cli.data_objects() == set()
    cli.verify()

    # The emptied topic keeps its offsets: new records continue after the old ones.
    cli.ingest(now + GRACE, [rec("logs", 0, "late", "x")])
    (late,) = cli.dump("logs", 0)
    assert late["offset"] == len(before[0]) and late["key"] == "late"


# --- 2. a delete topic where only part is expired ----------------------------------------


def test_retention_removes_older_files_and_keeps_everything_within_retention(
    cli: Cli,
) -> None:
    cli.create("logs", 2, "cleanup.policy=delete", f"retention.ms={H}")
    now = T + 5 * H
    cut = now - H  # records with a timestamp below this are past retention
    ingests = [  # (ingest clock, record timestamp, records per partition)
        (cut - 2 * H, cut - 2 * H, 3),  # long expired
        (cut - 1, cut - 1, 2),  # expired by one millisecond at `now`
        (cut, cut, 2),  # exactly at the cutoff: stays
        (now - MIN, now - MIN, 1),
    ]
    files: list[str] = []
    for n, (at, ts, count) in enumerate(ingests):
        files += cli.ingest(
            at,
            [
                rec("logs", p, f"k{n}-{i}", f"v{n}-{p}-{i}", ts)
                for p in (0, 1)
                for i in range(count)
            ],
        )
    assert len(files) == 4
    before = {p: cli.dump("logs", p) for p in (0, 1)}
    assert [r["timestamp"] for r in before[0]] == [ts for _, ts, c in ingests for _ in range(c)]

    # A millisecond earlier, only the first file is wholly past retention.
    (early,) = cli.plan(now - 1)["jobs"]
    assert early["drop"] is True and [i["key"] for i in early["inputs"]] == files[:1]
    assert early["numbers"]["newest_record_ms"] == cut - 2 * H
    assert early["numbers"]["expired_for_ms"] == (now - 1 - H) - (cut - 2 * H)

    (planned,) = cli.plan(now)["jobs"]
    assert planned["rule"] == "retention" and planned["drop"] is True
    assert [i["key"] for i in planned["inputs"]] == files[:2]
    assert planned["numbers"]["records"] == 2 * (3 + 2)
    assert planned["numbers"]["newest_record_ms"] == cut - 1
    assert planned["numbers"]["expired_for_ms"] == 1

    dropped_bytes = sum(size for _, _, size in cli.live()[:2])
    out = cli.ok("compact", "--until-idle", now=now)  # the text report, this time
    assert out.splitlines() == [
        f"retention: 2 files dropped unread (every record past retention.ms); "
        f"records 10 -> 0; bytes {dropped_bytes:,} -> 0; GETs per input [0,0]; committed"
    ]

    assert [key for key, _, _ in cli.live()] == files[2:]
    for p in (0, 1):
        after = cli.dump("logs", p)
        assert after == [r for r in before[p] if r["timestamp"] >= cut], p
        assert [r["timestamp"] for r in after] == [cut, cut, now - MIN]
        assert after[0]["offset"] == 5  # offsets are kept, not renumbered
    assert cli.verify()["records"] == 2 * 3
    assert cli.plan(now)["jobs"] == []


# --- 3. compact,delete: one clean L4 file loses its expired records -----------------------

KV_RETENTION = 6 * H


@pytest.mark.parametrize("route", ["max-delay", "set-delay-0", "full"])
def test_compact_delete_clean_file_loses_expired_records_and_keeps_the_latest_values(
    cli: Cli, route: str
) -> None:
    cli.create("kv", 2, "cleanup.policy=compact,delete", f"retention.ms={KV_RETENTION}")
    wait = T + KV_RETENTION + 30 * MIN  # the oldest records expired 30 min ago
    settings: tuple[str, ...] = ()
    if route == "max-delay":
        now = T + KV_RETENTION + MAX_DELAY  # ...and here an hour ago
    else:
        now = wait
        if route == "set-delay-0":
            settings = ("retention.max.delay.ms=0",)
    cut = now - KV_RETENTION  # the rewrite's retention cutoff
    cli.ingest(
        T,
        [
            rec("kv", 0, "a", "a1"),
            rec("kv", 0, "b", "b1"),
            rec("kv", 0, "c", "c1"),
            rec("kv", 1, "x", "x1"),
            rec("kv", 1, "y", "y1"),
        ],
    )
    cli.ingest(T + 20 * MIN, [rec("kv", 0, "c", "c2")])
    cli.ingest(  # one millisecond either side of the cutoff, in one file
        cut,
        [
            rec("kv", 0, "f", "f1", cut - 1),
            rec("kv", 0, "e", "e1", cut),
            rec("kv", 1, "u", "u1", cut - 1),
            rec("kv", 1, "v", "v1", cut),
        ],
    )
    cli.ingest(
        T + 4 * H,
        [rec("kv", 0, "d", "d1"), rec("kv", 0, "a", "a3"), rec("kv", 1, "y", "y2")]
        + [rec("kv", 1, "z", "z1")],
    )
    full = cli.compact(T + 4 * H, "--full")
    assert [j["rule"] for j in full["jobs"]] == ["full"]
    ((clean_key, level, _),) = cli.live()
    assert level == 4
    clean = {p: cli.dump("kv", p) for p in (0, 1)}
    assert [(r["key"], r["value"], r["timestamp"]) for r in clean[0]] == [
        ("b", "b1", T),
        ("c", "c2", T + 20 * MIN),
        ("f", "f1", cut - 1),
        ("e", "e1", cut),
        ("d", "d1", T + 4 * H),
        ("a", "a3", T + 4 * H),
    ]
    assert [(r["key"], r["value"], r["timestamp"]) for r in clean[1]] == [
        ("x", "x1", T),
        ("u", "u1", cut - 1),
        ("v", "v1", cut),
        ("y", "y2", T + 4 * H),
        ("z", "z1", T + 4 * H),
    ]

    # Some records are past retention, but a small share of the file (not worth a rewrite
    # yet), and the oldest expired only 30 min ago (< retention.max.delay.ms).
    doc = cli.plan(wait)
    assert doc["jobs"] == []
    (note,) = [n for n in doc["notes"] if n.startswith("retention:")]
    assert "1 holding some expired records" in note and "1 wait" in note
    assert cli.compact(wait, "--until-idle")["jobs"] == []
    assert {p: cli.dump("kv", p) for p in (0, 1)} == clean
    assert cli.plan(T + KV_RETENTION + MAX_DELAY - 1)["jobs"] == []

    if route == "full":
        # compact --full does not skip the clean file: it has due time work.
        (job,) = cli.compact(now, "--full")["jobs"]
        assert job["rule"] == "full" and job["output_level"] == 4
    else:
        (planned,) = cli.plan(now, *settings)["jobs"]
        assert planned["rule"] == "retention" and "drop" not in planned
        assert [i["key"] for i in planned["inputs"]] == [clean_key]
        assert planned["output_level"] == 4 and planned["deduplicate"] is True
        numbers = planned["numbers"]
        assert 0 < numbers["expired_share"] < 0.5
        assert numbers["expired_for_ms"] == now - (T + KV_RETENTION)
        assert numbers["min_expired_ratio"] == 0.5
        assert numbers["max_delay_ms"] == (MAX_DELAY if route == "max-delay" else 0)
        assert "retention.max.delay.ms" in planned["reason"]

        sets = [a for s in settings for a in ("--set", s)]
        (job,) = cli.compact(now, "--until-idle", *sets)["jobs"]
        assert job["rule"] == "retention" and job["output_level"] == 4
    assert job["records_in"] == 11 and job["records_out"] == 6
    assert job["dropped"]["retention"] == 5
    assert all(g > 0 for g in _gets(job))

    after = {p: cli.dump("kv", p) for p in (0, 1)}
    for p in (0, 1):
        assert after[p] == [r for r in clean[p] if r["timestamp"] >= cut], p
        expired = {r["key"] for r in clean[p] if r["timestamp"] < cut}
        assert view(after[p]) == {k: v for k, v in view(clean[p]).items() if k not in expired}
    assert view(after[0]) == {"e": "e1", "d": "d1", "a": "a3"}
    assert view(after[1]) == {"v": "v1", "y": "y2", "z": "z1"}
    ((_, level, _),) = cli.live()
    assert level == 4
    assert cli.verify()["records"] == 6
    assert cli.plan(now, *settings)["jobs"] == []  # nothing left to do: not rewritten twice
    if route == "full":
        assert cli.compact(now, "--full")["jobs"] == []  # now it is already full


# --- 4. tombstones past their delete horizon ----------------------------------------------

DELETE_RETENTION = H
TOMBSTONES_ROW = re.compile(r"^\s*\d+\s+tombstones\s", re.MULTILINE)


@pytest.mark.parametrize("route", ["until-idle", "full"])
def test_expired_tombstones_leave_and_other_values_stay(cli: Cli, route: str) -> None:
    cli.create("kv", 2, "cleanup.policy=compact", f"delete.retention.ms={DELETE_RETENTION}")
    cli.ingest(
        T,
        [rec("kv", 0, k, f"{k}1") for k in "abc"] + [rec("kv", 1, k, f"{k}1") for k in "xy"],
    )
    cli.ingest(
        T + 10 * MIN,
        [rec("kv", 0, "b", None), rec("kv", 0, "c", "c2"), rec("kv", 1, "y", None)],
    )
    t1 = T + 20 * MIN  # the first deduplication stamps horizons t1 + delete.retention.ms
    assert [j["rule"] for j in cli.compact(t1, "--full")["jobs"]] == ["full"]
    cli.ingest(T + 30 * MIN, [rec("kv", 0, "a", "a2"), rec("kv", 1, "w", "w1")])
    horizon = t1 + DELETE_RETENTION
    expected = [{"a": "a2", "c": "c2"}, {"x": "x1", "w": "w1"}]

    def check_views(tombstones: bool) -> None:
        for p, want in enumerate(expected):
            records = cli.dump("kv", p)
            got = view(records)
            dead = {r["key"] for r in records if r["value"] is None}
            assert dead == (({"b"} if p == 0 else {"y"}) if tombstones else set()), records
            if tombstones:
                assert got == {**want, **dict.fromkeys(dead)}, got
            else:
                assert got == want, got

    check_views(tombstones=True)

    if route == "until-idle":
        due = horizon + TOMBSTONE_BUFFER
        # Past the horizon, but within tombstone.buffer.ms: nothing yet.
        doc = cli.plan(due - 1)
        assert [j for j in doc["jobs"] if j["rule"] == "tombstones"] == []
        assert any(n.startswith("tombstones: 1 file topics") for n in doc["notes"]), doc
        assert not TOMBSTONES_ROW.search(cli.plan_text(due - 1))
        ran = cli.compact(due - 1, "--until-idle")["jobs"]
        assert all(j["rule"] != "tombstones" for j in ran), ran
        check_views(tombstones=True)

        doc = cli.plan(due)
        (planned,) = [j for j in doc["jobs"] if j["rule"] == "tombstones"]
        assert planned["deduplicate"] is True and "drop" not in planned
        assert planned["input_levels"][0] == 4
        numbers = planned["numbers"]
        assert numbers["earliest_horizon_ms"] == horizon
        assert numbers["tombstone_files"] == 1
        assert numbers["files"] == len(planned["inputs"])
        assert numbers["buffer_ms"] == TOMBSTONE_BUFFER
        assert "past their delete horizon" in planned["reason"]
        assert TOMBSTONES_ROW.search(cli.plan_text(due))
        end = due
        report = cli.compact(end, "--until-idle")
    else:
        # Just before the horizon, a full compaction keeps the tombstones...
        kept = cli.compact(horizon - 1, "--full")["jobs"]  # (it merges the L0 file too)
        assert [j["rule"] for j in kept] == ["full"]
        assert sum(j["tombstones_kept"] for j in kept) == 2, kept
        assert sum(j["dropped"]["tombstone_expired"] for j in kept) == 0, kept
        check_views(tombstones=True)
        # ...and at it, removes them (no tombstone.buffer.ms wait).
        end = horizon
        report = cli.compact(end, "--full")
        assert [j["rule"] for j in report["jobs"]] == ["full"]

    jobs = report["jobs"]
    assert sum(j["dropped"]["tombstone_expired"] for j in jobs) == 2, jobs
    assert sum(j["tombstones_kept"] for j in jobs) == 0, jobs
    check_views(tombstones=False)
    # a1 outlives the tombstones job in the L4 file (a2 sits in a newer L0 file); the full
    # compaction merges the two.
    assert cli.verify()["records"] == (5 if route == "until-idle" else 4)
    assert [j for j in cli.plan(end)["jobs"] if j["rule"] == "tombstones"] == []


# --- 6. a compact topic beside a delete topic in shared L0 files --------------------------


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compact_topic_without_retention_keeps_every_record_beside_an_emptied_delete_topic(
    cli: Cli, policy: str
) -> None:
    cli.create("logs", 2, "cleanup.policy=delete", f"retention.ms={H}")
    cli.create("keep", 2, f"cleanup.policy={policy}", "retention.ms=-1")
    ancient = T - 30 * DAY  # far past any retention, were there one
    files: list[str] = []
    for n, at in enumerate([T, T + 10 * MIN, T + 20 * MIN]):
        records = [
            rec("keep", p, f"key-{n}-{p}-{i}", f"keep-{n}-{i}", ancient + 10 * n + i)
            for p in (0, 1)
            for i in range(2)
        ]
        records += [
            rec("logs", p, f"log-{n}-{i}", "x" * 200 + str(i)) for p in (0, 1) for i in range(6)
        ]
        files += cli.ingest(at, records)
    assert len(files) == 3
    keep_before = {p: cli.dump("keep", p) for p in (0, 1)}
    assert sum(len(v) for v in keep_before.values()) == 12
    logs_total = sum(len(cli.dump("logs", p)) for p in (0, 1))
    assert logs_total == 36

    now = T + 20 * MIN + H + 1  # every logs record is past retention
    planned = cli.plan(now)["jobs"]
    assert planned and all(j["rule"] == "retention" and "drop" not in j for j in planned)
    assert all(j["output_level"] >= 1 for j in planned)

    report = cli.compact(now, "--until-idle")
    jobs = report["jobs"]
    assert jobs and all(j["rule"] == "retention" for j in jobs), jobs
    assert all(j["output_level"] >= 1 and j["outputs"] for j in jobs), jobs  # rewrites
    assert all(g > 0 for j in jobs for g in _gets(j))
    assert sorted(i["key"] for j in jobs for i in j["inputs"]) == sorted(files)
    assert sum(j["dropped"]["retention"] for j in jobs) == logs_total
    assert sum(j["records_out"] for j in jobs) == 12

    assert cli.dump("logs", 0) == [] and cli.dump("logs", 1) == []
    assert {p: cli.dump("keep", p) for p in (0, 1)} == keep_before
    live = cli.live()
    assert len(live) == 3 and all(level >= 1 for _, level, _ in live), live
    assert cli.verify()["records"] == 12
    assert cli.plan(now)["jobs"] == []

    # A full compaction: distinct keys, so still every record of the compact topic.
    cli.compact(now, "--full")
    assert {p: cli.dump("keep", p) for p in (0, 1)} == keep_before
    assert cli.dump("logs", 0) == [] and cli.dump("logs", 1) == []
    assert cli.verify()["records"] == 12

    # The rewritten L0 objects are deleted with --grace-ms 0.
    assert set(files) <= cli.data_objects()
    collected = cli.compact(now, "--grace-ms", "0")
    assert set(files) <= set(collected["deleted"])
    # Each compaction output has its offset index beside it (FORMAT.md section 12).
    live = {key for key, _, _ in cli.live()}
    assert cli.data_objects() == live | {f"{key}.idx" for key in live}
    assert {p: cli.dump("keep", p) for p in (0, 1)} == keep_before
