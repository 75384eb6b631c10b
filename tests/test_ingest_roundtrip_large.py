"""1,000,000 records over 100 partitions: JSON Lines in, dumped back byte-identical."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

from clirunner import run_cli

RECORDS = 1_000_000
PARTITIONS = 100


def _line(partition: int, offset: int | None, i: int, rng: random.Random) -> str:
    rec: dict[str, object] = {"topic": "big", "partition": partition}
    if offset is not None:
        rec["offset"] = offset
    kind = i % 50
    if kind == 0:
        rec["key"] = None
    elif kind == 1:
        rec["key_b64"] = base64.b64encode(b"\xff" + i.to_bytes(4, "big")).decode()
    else:
        rec["key"] = f"key-{rng.randrange(20_000)}"
    if kind == 2:
        rec["value"] = None
    elif kind == 3:
        rec["value_b64"] = base64.b64encode(b"\x80" + rng.randbytes(40)).decode()
    else:
        rec["value"] = rng.randbytes(50).hex()
    rec["timestamp"] = 1_700_000_000_000 + i
    rec["headers"] = [["trace", f"t{i}"]] if kind == 4 else []
    return json.dumps(rec, separators=(",", ":"))


def test_million_records_round_trip(tmp_path: Path, any_store_url: list[str]) -> None:
    rng = random.Random(42)
    next_offset = [0] * PARTITIONS
    expected: list[list[str]] = [[] for _ in range(PARTITIONS)]
    src = tmp_path / "in.jsonl"
    with src.open("w") as f:
        for i in range(RECORDS):
            p = rng.randrange(PARTITIONS)
            state = rng.getstate()
            f.write(_line(p, None, i, rng) + "\n")
            rng.setstate(state)
            expected[p].append(_line(p, next_offset[p], i, rng))
            next_offset[p] += 1
    store = any_store_url
    assert run_cli(*store, "topic", "create", "big", "--partitions", str(PARTITIONS)).code == 0
    r = run_cli(*store, "ingest", str(src))
    assert r.code == 0, r.err
    assert json.loads(r.out)["records"] == RECORDS
    for p in range(PARTITIONS):
        d = run_cli(*store, "dump", "--topic", "big", "--partition", str(p))
        assert d.code == 0, d.err
        assert d.out == "".join(line + "\n" for line in expected[p]), f"partition {p} differs"
    v = run_cli(*store, "verify")
    assert v.code == 0, v.err
