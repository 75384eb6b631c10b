"""The planner driving real compactions: ~1,100 small L0 files, compact --until-idle."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from clirunner import run_cli

from compactor.catalog import Catalog
from compactor.catalog.verify import verify_store
from compactor.ingest.workload import Workload, write_jsonl
from compactor.objectstore import ObjectStore
from compactor.worker.view import store_views

NOW_MS = 1_700_000_000_000 + 3_600_000
TOPICS = {
    "orders": (4, ["cleanup.policy=compact"]),
    "prices": (2, ["cleanup.policy=compact", "compaction.strategy=timestamp"]),
    "audit": (2, ["cleanup.policy=delete", "retention.ms=-1"]),
}


def _dump_all(args: list[str], topic: str) -> list[str]:
    lines = []
    for p in range(TOPICS[topic][0]):
        r = run_cli(*args, "dump", "--topic", topic, "--partition", str(p))
        assert r.code == 0, r.err
        lines += r.out.splitlines()
    return lines


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_until_idle_climbs_levels_and_keeps_every_view(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    store: ObjectStore = request.getfixturevalue(f"{store_kind}_store")
    if store_kind == "local":
        args = ["--store", str(request.getfixturevalue("tmp_path") / "store")]
    else:
        args = list(request.getfixturevalue("s3_url").cli_args)
    args += ["--now-ms", str(NOW_MS)]
    for name, (partitions, config) in TOPICS.items():
        config_args = [a for c in config for a in ("--config", c)]
        r = run_cli(*args, "topic", "create", name, "--partitions", str(partitions), *config_args)
        assert r.code == 0, r.err
    src = Path(request.getfixturevalue("tmp_path")) / "records.jsonl"
    workload = Workload(
        tuple((name, p) for name, (p, _) in TOPICS.items()), records=22_000, keys_per_partition=300
    )
    with src.open("w") as out:
        write_jsonl(workload.generate(), out)
    r = run_cli(*args, "ingest", str(src), "--max-file-records", "20")
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["files"]) == 1_100

    planned = run_cli(*args, "plan", "--json")
    assert planned.code == 0, planned.err
    jobs = json.loads(planned.out)["jobs"]
    assert len(jobs) == 1_100 // 32
    assert {j["rule"] for j in jobs} == {"L0->L1"}
    assert not any(j["deduplicate"] for j in jobs)
    table = run_cli(*args, "plan")
    assert table.code == 0 and "L0->L1" in table.out and "a run of 1100 contiguous L0" in table.out

    catalog = Catalog(store)
    before = catalog.snapshot()
    views_before = store_views(catalog, before)
    audit_before = _dump_all(args, "audit")

    r = run_cli(*args, "compact", "--until-idle", "--json")
    assert r.code == 0, r.err
    rules = Counter(job["rule"] for job in json.loads(r.out)["jobs"])
    assert rules["L0->L1"] == 34 and rules["L1->L2"] >= 1, rules

    after = catalog.snapshot()
    levels = Counter(f.level for f in after.files)
    assert levels[0] < 32
    assert sum(n for level, n in levels.items() if level >= 2) >= 1
    assert verify_store(catalog, after).ok
    assert store_views(catalog, after) == views_before
    assert _dump_all(args, "audit") == audit_before  # delete policy: every record kept
    for f in after.files:
        if f.level >= 1:
            compacted = {after.topics[t].config.compacted for t in f.topic_names}
            assert len(compacted) == 1, f"{f.key} mixes compacted and plain topics"
    # (verify_store checked that each file's summaries sum up its manifest's sections)
    orders_records = sum(t.record_count for f in after.files if (t := f.topic("orders")))
    orders_before = sum(t.record_count for f in before.files if (t := f.topic("orders")))
    assert orders_records < orders_before  # compacted topics were deduplicated

    idle = run_cli(*args, "plan")
    assert idle.code == 0 and idle.out.startswith("no jobs due"), idle.out
