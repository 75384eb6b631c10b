"""``compactor inspect``: one data file's footer, sections and bitmaps, and ``--check``
naming the byte of a corrupt or truncated file (local store and moto's S3)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli
from pyroaring import BitMap

from compactor.fileformat import OffsetSet
from compactor.objectstore import open_store


def _store(args: list[str]) -> Any:
    endpoint = args[args.index("--endpoint-url") + 1] if "--endpoint-url" in args else None
    return open_store(args[args.index("--store") + 1], endpoint_url=endpoint)


@pytest.fixture
def compacted(any_store_url: list[str], tmp_path: Any) -> tuple[list[str], str, int]:
    """A store holding one compacted L1 file of 3 partitions; its key and record count."""
    args = any_store_url
    create = ("topic", "create", "t", "--partitions", "3", "--config", "cleanup.policy=compact")
    assert run_cli(*args, *create).code == 0
    for n in range(2):
        lines = [
            json.dumps(
                {"topic": "t", "partition": i % 3, "key": f"k{i % 40}", "value": f"v{n}-{i}"}
            )
            for i in range(300)
        ] + [json.dumps({"topic": "t", "partition": 0, "key": "gone", "value": None})]
        path = tmp_path / f"in{n}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        assert run_cli(*args, "ingest", str(path)).code == 0
    r = run_cli(*args, "compact", "--full", "--json")
    assert r.code == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    (key,) = job["outputs"]
    return args, key, job["records_out"]


def test_inspect_prints_the_footer_and_every_section(
    compacted: tuple[list[str], str, int],
) -> None:
    args, key, records = compacted
    r = run_cli(*args, "inspect", key, "--sections", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # A compaction writes version 3: its small sections share a block (FORMAT.md §13).
    assert doc["key"] == key and doc["format_version"] == 3
    assert doc["size"] == _store(args).head(key).size
    assert doc["records"] == records and doc["section_count"] == 3 and doc["partitions"] == 3
    assert doc["section_count"] == 3 and doc["topics"] == 1
    assert doc["tombstones"] >= 1  # the tombstone of "gone", kept by a first compaction
    assert doc["footer_crc"] == "ok" and doc["checked"] is False
    sections = doc["sections"]
    assert [(s["topic"], s["partition"]) for s in sections] == [("t", 0), ("t", 1), ("t", 2)]
    assert sum(s["record_count"] for s in sections) == records
    for s in sections:
        assert s["bitmap_cardinality"] == s["record_count"]
    assert sections[0]["position"] == 16
    # The ranges tile the file; the sections of a shared block each give the block's.
    ranges = sorted({(s["position"], s["length"]) for s in sections})
    for (a_at, a_length), (b_at, _) in zip(ranges, ranges[1:], strict=False):
        assert a_at + a_length == b_at
    text = run_cli(*args, "inspect", key, "--sections")
    assert text.code == 0 and f"{records:,} records" in text.out
    assert len([line for line in text.out.splitlines() if line.strip().startswith("t ")]) == 3
    assert "footer CRC ok" in text.out and "every frame's CRC" not in text.out
    checked = run_cli(*args, "inspect", key, "--check", "--json")
    assert checked.code == 0 and json.loads(checked.out)["checked"] is True
    checked_text = run_cli(*args, "inspect", key, "--check", "--sections")
    assert checked_text.code == 0 and "checked: every frame's CRC" in checked_text.out


def test_the_footer_range_is_where_the_bytes_say(compacted: tuple[list[str], str, int]) -> None:
    args, key, _ = compacted
    doc = json.loads(run_cli(*args, "inspect", key, "--json").out)
    data, _ = _store(args).get(key)
    at, length = doc["footer_position"], doc["footer_length"]
    assert data[at : at + 4] == b"FOOT"  # the frame's tag (FORMAT.md §5, §7)
    assert at + length + 20 == len(data)  # then the 20-byte tail (§8)
    assert struct.unpack_from("<I", data, len(data) - 20)[0] == length  # the tail says so
    assert f"footer at byte {at:,} (+{length:,})" in run_cli(*args, "inspect", key).out


def test_an_ingested_file_counts_what_was_ingested(
    any_store_url: list[str], tmp_path: Path
) -> None:
    args = any_store_url
    create = ("topic", "create", "u", "--partitions", "2", "--config", "cleanup.policy=compact")
    assert run_cli(*args, *create).code == 0
    lines = [
        {"topic": "u", "partition": i % 2, "key": f"k{i}", "value": None if i % 10 == 0 else "x"}
        for i in range(57)
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    r = run_cli(*args, "ingest", str(path))
    assert r.code == 0, r.err
    (key,) = json.loads(r.out)["files"]
    doc = json.loads(run_cli(*args, "inspect", key, "--sections", "--check", "--json").out)
    assert doc["records"] == 57 and doc["tombstones"] == 6 and doc["checked"] is True
    assert [(s["partition"], s["record_count"]) for s in doc["sections"]] == [(0, 29), (1, 28)]
    assert [s["bitmap_cardinality"] for s in doc["sections"]] == [29, 28]
    assert [s["min_delete_horizon"] for s in doc["sections"]] == [None, None]  # not compacted


def _rewrite(args: list[str], key: str, change: Any) -> bytes:
    store = _store(args)
    data, _ = store.get(key)
    store.put(key, change(bytearray(data)))
    return data


def test_check_names_the_byte_of_a_corrupt_batch(compacted: tuple[list[str], str, int]) -> None:
    args, key, _ = compacted
    meta = json.loads(run_cli(*args, "inspect", key, "--sections", "--json").out)
    second = meta["sections"][1]
    at = second["position"] + second["length"] // 2  # inside one of its batch frames

    def flip(data: bytearray) -> bytes:
        data[at] ^= 0xFF
        return bytes(data)

    _rewrite(args, key, flip)
    assert run_cli(*args, "inspect", key).code == 0  # the footer is intact
    r = run_cli(*args, "inspect", key, "--check")
    assert_one_line_error(r, key, "checksum mismatch")
    assert r.code == 6
    byte = int(r.err.split(": byte ")[1].split(":")[0])
    assert second["position"] <= byte <= at  # the frame holding the flipped byte


def test_check_names_the_first_bad_byte_even_with_sections(
    compacted: tuple[list[str], str, int],
) -> None:
    """A bad batch in the first section and a bad trailer in the last: the batch is named,
    though ``--sections`` reads the trailers (the whole-file check runs first)."""
    args, key, _ = compacted
    first, *_, last = json.loads(run_cli(*args, "inspect", key, "--sections", "--json").out)[
        "sections"
    ]
    batch_at = first["position"] + first["length"] // 2
    trailer_at = last["position"] + last["length"] - 8 - 5  # before the 8-byte section end

    def flip_both(data: bytearray) -> bytes:
        data[batch_at] ^= 0xFF
        data[trailer_at] ^= 0xFF
        return bytes(data)

    _rewrite(args, key, flip_both)
    r = run_cli(*args, "inspect", key, "--sections", "--check")
    assert_one_line_error(r, key, "checksum mismatch")
    assert r.code == 6
    byte = int(r.err.split(": byte ")[1].split(":")[0])
    assert first["position"] <= byte <= batch_at
    r = run_cli(*args, "inspect", key, "--sections")  # no --check: the trailer's CRC fails
    assert_one_line_error(r, key)
    assert r.code == 6
    assert last["position"] <= int(r.err.split(": byte ")[1].split(":")[0]) <= trailer_at


def test_a_bitmap_that_disagrees_with_the_footer_is_a_format_error(
    compacted: tuple[list[str], str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid file cannot hold such a bitmap (its trailer's stats are checked against the
    footer), so the ranged read is replaced by one returning a bitmap with one offset."""
    args, key, _ = compacted
    one = OffsetSet(0, BitMap([0]))
    monkeypatch.setattr("compactor.cli.inspect_cmd.read_section_offsets", lambda *a, **k: one)
    r = run_cli(*args, "inspect", key, "--sections")
    assert_one_line_error(r, key, "byte 16: ", "offset bitmap holds 1 offsets")
    assert r.code == 6
    assert run_cli(*args, "inspect", key).code == 0  # the bitmaps are read for --sections


def test_a_truncated_file_or_a_corrupt_footer_fails_without_check(
    compacted: tuple[list[str], str, int],
) -> None:
    args, key, _ = compacted
    original = _rewrite(args, key, lambda d: bytes(d[: len(d) - 7]))
    r = run_cli(*args, "inspect", key)
    assert_one_line_error(r, key, "byte ")
    assert r.code == 6

    def footer_flip(data: bytearray) -> bytes:
        data[len(data) - 30] ^= 0x01  # inside the footer frame
        return bytes(data)

    _rewrite(args, key, lambda d: footer_flip(bytearray(original)))
    r = run_cli(*args, "inspect", key, "--sections")
    assert_one_line_error(r, key, "byte ")
    assert r.code == 6


def test_a_missing_object_is_exit_5(compacted: tuple[list[str], str, int]) -> None:
    args, _, _ = compacted
    r = run_cli(*args, "inspect", "data/L1/nope.cf")
    assert_one_line_error(r, "nope.cf")
    assert r.code == 5
