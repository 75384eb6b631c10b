"""``compactor inspect``: one data file's footer, sections and bitmaps, and ``--check``
naming the byte of a corrupt or truncated file (local store and moto's S3)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli

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
    assert doc["key"] == key and doc["format_version"] == 2
    assert doc["size"] == _store(args).head(key).size
    assert doc["records"] == records and doc["section_count"] == 3 and doc["partitions"] == 3
    assert doc["tombstones"] >= 1  # the tombstone of "gone", kept by a first compaction
    assert doc["footer_crc"] == "ok" and doc["checked"] is False
    sections = doc["sections"]
    assert [(s["topic"], s["partition"]) for s in sections] == [("t", 0), ("t", 1), ("t", 2)]
    assert sum(s["record_count"] for s in sections) == records
    for s in sections:
        assert s["bitmap_cardinality"] == s["record_count"]
    assert sections[0]["position"] == 16
    for a, b in zip(sections, sections[1:], strict=False):
        assert a["position"] + a["length"] == b["position"]  # sections tile the file
    text = run_cli(*args, "inspect", key, "--sections")
    assert text.code == 0 and f"{records:,} records" in text.out
    assert len([line for line in text.out.splitlines() if line.strip().startswith("t ")]) == 3
    checked = run_cli(*args, "inspect", key, "--check", "--json")
    assert checked.code == 0 and json.loads(checked.out)["checked"] is True


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
