"""Each level's files in its codec: lz4 below the top level (ingest's L0 files and
compactions into L1..L3), zstd at the top, both configurable on the command line; replay
--verify writes in the codec a commit recorded. A file's codec is read from its bytes: the
magic number that starts each compressed Arrow buffer's frame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli

from compactor.planner.codecs import DEFAULT_CODECS, LevelCodecs, codec_named
from compactor.planner.job import MAX_LEVEL

LZ4_FRAME_MAGIC = bytes.fromhex("04224d18")
ZSTD_FRAME_MAGIC = bytes.fromhex("28b52ffd")
NOW = 1_700_000_000_000
FOUR_FILE_TRIGGER = ("--set", "level.trigger.files=4")


def test_the_default_is_lz4_below_the_top_level_and_zstd_at_it() -> None:
    assert [DEFAULT_CODECS.for_level(level) for level in range(MAX_LEVEL + 1)] == [
        "lz4",
        "lz4",
        "lz4",
        "lz4",
        "zstd",
    ]
    chosen = LevelCodecs(top=None, below_top="zstd")
    assert chosen.for_level(0) == "zstd" and chosen.for_level(MAX_LEVEL) is None
    with pytest.raises(ValueError, match="level must be in"):
        chosen.for_level(MAX_LEVEL + 1)
    with pytest.raises(ValueError, match="unknown codec 'gzip'"):
        LevelCodecs(top="gzip")
    with pytest.raises(ValueError, match="zstd, lz4, none"):
        codec_named("snappy")
    assert codec_named("none") is None


def codecs_in(data: bytes) -> set[str]:
    found = set()
    if LZ4_FRAME_MAGIC in data:
        found.add("lz4")
    if ZSTD_FRAME_MAGIC in data:
        found.add("zstd")
    return found


def _cli(store: str, *args: str) -> str:
    r = run_cli("--store", store, "--now-ms", str(NOW), *args)
    assert r.code == 0, r.err
    return r.out


def _live_files(store: str) -> dict[int, list[str]]:
    """The live files' keys, by level."""
    by_level: dict[int, list[str]] = {}
    for f in json.loads(_cli(store, "stats", "--json"))["files"]:
        by_level.setdefault(int(f["level"]), []).append(str(f["key"]))
    return by_level


def _compaction_commits(store: str) -> list[dict[str, Any]]:
    """The compaction commits, oldest first."""
    history = json.loads(_cli(store, "history", "--json"))
    return [e for e in history if e["kind"] == "compaction"][::-1]


def _compaction_codecs(store: str) -> list[str | None]:
    """The codec each compaction commit recorded, oldest first."""
    return [e["run"]["compression"] for e in _compaction_commits(store)]


def _latest_values(store: str) -> dict[tuple[int, str], str]:
    """The materialized view: each key's latest value, per partition of topic t."""
    view = {}
    for p in (0, 1):
        for line in _cli(store, "dump", "--topic", "t", "--partition", str(p)).splitlines():
            r = json.loads(line)
            view[(p, r["key"])] = r["value"]
    return view


@pytest.fixture
def ingested(tmp_path: Path) -> str:
    """Eight L0 files of 2 partitions, values big and repetitive enough to compress."""
    store = str(tmp_path / "store")
    _cli(store, "topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact")
    lines = [
        json.dumps(
            {"topic": "t", "partition": i % 2, "key": f"k{i % 300}", "value": f"{i}" + "v" * 400}
        )
        for i in range(4000)
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    _cli(store, "ingest", str(src), "--max-file-records", "500")
    return store


def test_each_level_is_written_in_its_codec_and_replay_verifies_it(ingested: str) -> None:
    store = Path(ingested)
    view = _latest_values(ingested)
    assert len(view) == 300 and len(set(view.values())) == 300
    l0 = _live_files(ingested)[0]
    assert len(l0) == 8
    assert all(codecs_in((store / key).read_bytes()) == {"lz4"} for key in l0)

    _cli(ingested, "compact", "--until-idle", *FOUR_FILE_TRIGGER)
    levels = _live_files(ingested)
    assert sorted(levels) == [1], levels
    assert all(codecs_in((store / key).read_bytes()) == {"lz4"} for key in levels[1])

    _cli(ingested, "compact", "--full")
    (top,) = _live_files(ingested)[MAX_LEVEL]
    assert codecs_in((store / top).read_bytes()) == {"zstd"}
    assert _compaction_codecs(ingested) == ["lz4", "lz4", "zstd"]
    assert _latest_values(ingested) == view

    for commit in (e["id"] for e in _compaction_commits(ingested)):
        verified = run_cli(
            "--store", ingested, "replay", "--from-history", str(commit), "--verify", "--json"
        )
        assert verified.code == 0, verified.err


def test_the_codecs_are_the_operators_choice(ingested: str, tmp_path: Path) -> None:
    store = Path(ingested)
    _cli(
        ingested,
        "compact",
        "--until-idle",
        "--compression-below-top",
        "zstd",
        *FOUR_FILE_TRIGGER,
    )
    assert all(codecs_in((store / k).read_bytes()) == {"zstd"} for k in _live_files(ingested)[1])
    _cli(ingested, "compact", "--full", "--compression-top", "none")
    (top,) = _live_files(ingested)[MAX_LEVEL]
    assert codecs_in((store / top).read_bytes()) == set()
    assert _compaction_codecs(ingested) == ["zstd", "zstd", None]

    src = tmp_path / "more.jsonl"  # over the writer's 8 KiB below which nothing is compressed
    more = [{"topic": "t", "partition": 0, "key": f"k{i}", "value": "w" * 400} for i in range(50)]
    src.write_text("\n".join(json.dumps(r) for r in more))
    _cli(ingested, "ingest", str(src), "--compression", "zstd")
    (newest,) = _live_files(ingested)[0]
    assert codecs_in((store / newest).read_bytes()) == {"zstd"}


@pytest.mark.parametrize(
    "args",
    [
        ["compact", "--compression-top", "gzip"],
        ["compact", "--compression-below-top", "snappy"],
        ["ingest", "-", "--compression", "brotli"],
        ["worker", "--queue-url", "http://localhost:1/q", "--compression-top", "gzip"],
    ],
)
def test_an_unknown_codec_is_one_line(tmp_path: Path, args: list[str]) -> None:
    r = run_cli("--store", str(tmp_path / "store"), *args)
    assert_one_line_error(r, "unknown codec", "zstd, lz4, none")
    assert not (tmp_path / "store").exists()
