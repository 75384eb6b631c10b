"""Several ingest processes into one store at once: every record lands exactly once,
offsets unique and contiguous per partition, in each process's own order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from clirunner import run_cli

PROCESSES = 4
RECORDS_PER_PROCESS = 3000
PARTITIONS = 3


def test_concurrent_ingesters(tmp_path: Path, any_store_url: list[str]) -> None:
    store = any_store_url
    assert run_cli(*store, "topic", "create", "t", "--partitions", str(PARTITIONS)).code == 0
    inputs = []
    for proc in range(PROCESSES):
        src = tmp_path / f"in{proc}.jsonl"
        with src.open("w") as f:
            for i in range(RECORDS_PER_PROCESS):
                rec = {
                    "topic": "t",
                    "partition": i % PARTITIONS,
                    "key": f"k{i % 97}",
                    "value": f"{proc}:{i}",
                }
                f.write(json.dumps(rec) + "\n")
        inputs.append(src)
    # Small files and several commits per process make the races frequent.
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "compactor.cli.main",
                *store,
                "ingest",
                str(src),
                "--max-file-records",
                "500",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
        )
        for src in inputs
    ]
    rebases = 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
        result = json.loads(out)
        assert result["records"] == RECORDS_PER_PROCESS
        rebases += result["rebases"]
    seen: dict[str, int] = {}
    per_process_order: dict[tuple[int, int], list[int]] = defaultdict(list)
    for partition in range(PARTITIONS):
        d = run_cli(*store, "dump", "--topic", "t", "--partition", str(partition))
        assert d.code == 0, d.err
        records = [json.loads(line) for line in d.out.splitlines()]
        assert [r["offset"] for r in records] == list(range(len(records)))
        for r in records:
            assert r["value"] not in seen, f"{r['value']} landed twice"
            seen[r["value"]] = r["offset"]
            proc, i = map(int, r["value"].split(":"))
            assert i % PARTITIONS == partition
            per_process_order[(proc, partition)].append(i)
    assert len(seen) == PROCESSES * RECORDS_PER_PROCESS
    for order in per_process_order.values():
        assert order == sorted(order)
    assert run_cli(*store, "verify").code == 0
    print(f"rebases over concurrent ingests: {rebases}")
