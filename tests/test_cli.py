"""The command line end to end on a local store: topics, ingest, dump, verify, stats."""

from __future__ import annotations

import base64
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from clirunner import assert_one_line_error, run_cli

from compactor.catalog.log import PREFIX as CATALOG_PREFIX
from compactor.cli.exit_codes import ExitCode


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def _catalog_objects(store: str) -> dict[str, bytes]:
    """Every object of the catalog (log entries, checkpoints, manifests), by key."""
    root = Path(store)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in (root / CATALOG_PREFIX).rglob("*")
        if p.is_file()
    }


def _create(store: str, name: str = "t", partitions: int = 2, *config: str) -> None:
    args = ["--store", store, "topic", "create", name, "--partitions", str(partitions)]
    for c in config:
        args += ["--config", c]
    assert run_cli(*args).code == 0


def _ingest(store: str, tmp_path: Path, lines: list[str], *extra: str) -> dict[str, object]:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(line + "\n" for line in lines))
    r = run_cli("--store", store, "ingest", str(src), *extra)
    assert r.code == 0, r.err
    result: dict[str, object] = json.loads(r.out)
    return result


def _dump(store: str, topic: str, partition: int, *extra: str) -> list[dict[str, object]]:
    r = run_cli("--store", store, "dump", "--topic", topic, "--partition", str(partition), *extra)
    assert r.code == 0, r.err
    return [json.loads(line) for line in r.out.splitlines()]


def test_topic_create_and_describe(store_dir: str) -> None:
    _create(store_dir, "orders", 3, "cleanup.policy=compact", "min.compaction.lag.ms=5000")
    r = run_cli("topic", "describe", "orders", "--store", store_dir)
    assert r.code == 0
    d = json.loads(r.out)
    assert d["partitions"] == 3
    assert d["config"]["cleanup.policy"] == "compact"
    assert d["config"]["min.compaction.lag.ms"] == "5000"
    assert [p["next_offset"] for p in d["partition_state"]] == [0, 0, 0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["topic", "create", "x", "--partitions", "1", "--config", "nope=1"],
            "unknown topic config",
        ),
        (["topic", "create", "x", "--partitions", "0"], "must be at least 1"),
        (["topic", "create", "x", "--partitions", "1", "--config", "cleanup.policy"], "KEY=VALUE"),
        (["topic", "describe", "missing"], "unknown topic 'missing'"),
        (["dump", "--topic", "missing", "--partition", "0"], "unknown topic"),
        (["--now-ms", "yesterday", "stats"], "--now-ms must be an integer"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_user_mistakes_are_one_line(store_dir: str, args: list[str], fragment: str) -> None:
    assert_one_line_error(run_cli("--store", store_dir, *args), fragment)


@pytest.mark.parametrize(
    "command", [["topic", "describe"], ["dump", "--partition", "0", "--topic"]]
)
def test_an_unknown_topic_names_the_nearest_one_and_what_the_store_has(
    store_dir: str, command: list[str]
) -> None:
    for name in ["accounts", "clicks", "orders", "prices", "users", "views", "zones"]:
        _create(store_dir, name, 1, "cleanup.policy=compact")
    r = run_cli("--store", store_dir, *command, "acounts")
    assert r.code == ExitCode.USAGE, r
    assert r.err == (
        "compactor: unknown topic 'acounts' (did you mean 'accounts'? the store has "
        "accounts, clicks, orders, prices, users, and 2 more)\n"
    )
    r = run_cli("--store", store_dir, *command, "q" * 5000)
    assert_one_line_error(r, "unknown topic 'qqqqqqqqqqqqqqqqqqqq... (5000 characters)' (the store")
    assert "did you mean" not in r.err


def test_ingest_dump_round_trip_all_shapes(store_dir: str, tmp_path: Path) -> None:
    _create(store_dir, "t", 2, "cleanup.policy=compact")
    binary = bytes(range(256))
    lines = [
        {"topic": "t", "partition": 0, "key": "a", "value": "1", "timestamp": 10, "headers": []},
        {
            "topic": "t",
            "partition": 1,
            "key": None,
            "value": "nk",
            "timestamp": 11,
            "headers": [
                ["h", "v"],
                ["bin", {"b64": base64.b64encode(b"\xff\x00").decode()}],
                ["null", None],
            ],
        },
        {"topic": "t", "partition": 0, "key": "a", "value": None, "timestamp": 12, "headers": []},
        {
            "topic": "t",
            "partition": 0,
            "key_b64": base64.b64encode(binary).decode(),
            "value_b64": base64.b64encode(binary[::-1]).decode(),
            "timestamp": 13,
            "headers": [],
        },
        {"topic": "t", "partition": 1, "key": "", "value": "", "timestamp": 14, "headers": []},
        {
            "topic": "t",
            "partition": 0,
            "key": "ünï",
            "value": "çødé",
            "timestamp": 15,
            "headers": [],
        },
    ]
    result = _ingest(store_dir, tmp_path, [json.dumps(x) for x in lines], "--max-file-records", "2")
    assert result["records"] == 6
    assert len(result["files"]) == 3  # type: ignore[arg-type]
    p0 = _dump(store_dir, "t", 0)
    p1 = _dump(store_dir, "t", 1)
    assert [r["offset"] for r in p0] == [0, 1, 2, 3]
    assert [r["offset"] for r in p1] == [0, 1]
    expected0 = [dict(x, offset=i) for i, x in enumerate(lines[i] for i in (0, 2, 3, 5))]
    for got, want in zip(p0, expected0, strict=True):
        assert got == want
    assert p1[0]["headers"] == lines[1]["headers"]
    assert p1[0]["key"] is None
    assert p1[1]["key"] == "" and p1[1]["value"] == ""
    assert [r["offset"] for r in _dump(store_dir, "t", 0, "--from-offset", "2")] == [2, 3]
    assert _dump(store_dir, "t", 0, "--from-offset", "99") == []


def test_offsets_continue_across_ingests_and_default_timestamp(
    store_dir: str, tmp_path: Path
) -> None:
    _create(store_dir, "t", 1)
    line = json.dumps({"topic": "t", "partition": 0, "key": "k", "value": "v"})
    _ingest(store_dir, tmp_path, [line, line])
    r = run_cli(
        "--store", store_dir, "--now-ms", "1234", "ingest", "-", stdin=(line + "\n").encode()
    )
    assert r.code == 0, r.err
    dumped = _dump(store_dir, "t", 0)
    assert [d["offset"] for d in dumped] == [0, 1, 2]
    assert dumped[2]["timestamp"] == 1234


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("{not json", "line 2: not JSON"),
        (
            '{"topic": "nope", "partition": 0, "key": "k", "value": "v"}',
            "line 2: unknown topic 'nope' (the store has t)",
        ),
        (
            '{"topic": "tt", "partition": 0, "key": "k", "value": "v"}',
            "line 2: unknown topic 'tt' (did you mean 't'? the store has t)",
        ),
        (
            '{"topic": "t", "partition": 7, "key": "k", "value": "v"}',
            "line 2: topic 't' has partitions 0..1",
        ),
        ('{"topic": "t", "partition": 0, "key": 5, "value": "v"}', "line 2: key must be a string"),
        (
            '{"topic": "t", "partition": 0, "value_b64": "!!"}',
            "line 2: value_b64 is not valid base64",
        ),
        ('{"topic": "t", "partition": 0, "colour": "red"}', "line 2: unknown field 'colour'"),
    ],
)
def test_bad_line_rejects_whole_ingest(
    store_dir: str, tmp_path: Path, bad: str, fragment: str
) -> None:
    _create(store_dir, "t", 2)
    before = _catalog_objects(store_dir)
    assert before  # the topic's commit
    good = json.dumps({"topic": "t", "partition": 0, "key": "k", "value": "v"})
    src = tmp_path / "in.jsonl"
    # Enough good records before the bad line that files were already uploaded.
    src.write_text(good + "\n" + bad + "\n" + good + "\n")
    r = run_cli("--store", store_dir, "ingest", str(src), "--max-file-records", "1")
    assert_one_line_error(r, fragment, "nothing was ingested")
    assert _catalog_objects(store_dir) == before
    data_dir = Path(store_dir) / "data"
    assert not data_dir.exists() or not list(data_dir.rglob("*.cf"))


def test_stats_json_lists_files_in_sequence(store_dir: str, tmp_path: Path) -> None:
    _create(store_dir, "t", 3)
    lines = [
        json.dumps({"topic": "t", "partition": i % 3, "key": str(i), "value": "x" * 50})
        for i in range(30)
    ]
    result = _ingest(store_dir, tmp_path, lines, "--max-file-records", "10")
    r = run_cli("--store", store_dir, "stats", "--json")
    stats = json.loads(r.out)
    assert [f["key"] for f in stats["files"]] == result["files"]
    assert stats["levels"]["0"]["files"] == 3
    sizes = [(Path(store_dir) / f["key"]).stat().st_size for f in stats["files"]]
    assert [f["bytes"] for f in stats["files"]] == sizes
    assert stats["levels"]["0"]["bytes"] == sum(sizes)
    assert set(stats["levels"]) == {"0", "1", "2", "3", "4"}
    table = run_cli("--store", store_dir, "stats")
    assert table.code == 0 and "L0" in table.out


def test_verify_passes_then_names_corruption(store_dir: str, tmp_path: Path) -> None:
    _create(store_dir, "t", 2)
    lines = [
        json.dumps({"topic": "t", "partition": i % 2, "key": str(i), "value": "v" * 20})
        for i in range(100)
    ]
    result = _ingest(store_dir, tmp_path, lines, "--max-file-records", "50")
    ok = run_cli("--store", store_dir, "verify")
    assert ok.code == 0, ok.err
    assert ok.out.startswith("OK: 2 files, 2 partitions, 100 records")
    victim = Path(store_dir) / result["files"][1]  # type: ignore[index]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    bad = run_cli("--store", store_dir, "verify", "--json")
    assert bad.code == 1
    report = json.loads(bad.out)
    assert not report["ok"]
    assert any(result["files"][1] in p and "byte" in p for p in report["problems"])  # type: ignore[index]


def test_verify_lists_objects_the_catalog_does_not_name(store_dir: str, tmp_path: Path) -> None:
    _create(store_dir, "t", 2, "cleanup.policy=compact")
    lines = [
        json.dumps({"topic": "t", "partition": i % 2, "key": str(i % 7), "value": "v"})
        for i in range(100)
    ]
    result = _ingest(store_dir, tmp_path, lines, "--max-file-records", "50")
    assert run_cli("--store", store_dir, "compact", "--full").code == 0
    clean = json.loads(run_cli("--store", store_dir, "verify", "--json").out)
    assert (clean["ok"], clean["strays"]) == (True, [])  # outputs, indexes, garbage: named
    data = Path(store_dir) / "data"
    assert any(p.name.endswith(".idx") for p in data.rglob("*"))
    # What an ingest killed after its upload leaves: an L0 file no commit made live.
    left = data / "L0" / "0123456789abcdef0123456789abcdef.cf"
    left.write_bytes((Path(store_dir) / result["files"][0]).read_bytes())  # type: ignore[index]
    os.utime(left, ns=(1_700_000_000_123_000_000, 1_700_000_000_123_000_000))
    r = run_cli("--store", store_dir, "verify")
    assert r.code == 0, r.err
    assert r.out.startswith("OK: ") and r.out.rstrip().endswith(", 1 stray objects"), r.out
    key = "data/L0/0123456789abcdef0123456789abcdef.cf"
    size = left.stat().st_size
    assert r.err.count("\n") == 1, r.err
    assert r.err.startswith(f"stray: {key} ({size} bytes, written 2023-11-14T22:13:20Z): "), r.err
    report = json.loads(run_cli("--store", store_dir, "verify", "--json").out)
    stray = {"key": key, "size": size, "written_ms": 1_700_000_000_123}
    assert report["ok"] and report["strays"] == [stray]


def _compact_with_stderr_on(store: str, stderr: int) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "compactor.cli.main", "--store", store, "compact", "--full"]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, timeout=300, check=True)


def test_compact_shows_progress_on_a_terminal_only(store_dir: str, tmp_path: Path) -> None:
    _create(store_dir, "t", 2, "cleanup.policy=compact")
    lines = [
        json.dumps({"topic": "t", "partition": i % 2, "key": "k", "value": "v"}) for i in range(4)
    ]
    for _ in range(2):
        _ingest(store_dir, tmp_path, lines)
    primary, secondary = pty.openpty()
    try:
        done = _compact_with_stderr_on(store_dir, secondary)
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    assert b"\r\x1b[Kfull " in shown and b" 2 files" in shown  # the job, as it starts
    assert shown.endswith(b"\r\x1b[K")  # and the line cleared before the summary
    assert b"full: 2 files -> L4" in done.stdout
    _ingest(store_dir, tmp_path, lines)
    _ingest(store_dir, tmp_path, lines)
    piped = _compact_with_stderr_on(store_dir, subprocess.PIPE)
    assert piped.stderr == b""
    assert b"full: " in piped.stdout
