"""The catalog through the command line: `history`, garbage of the catalog's own objects."""

from __future__ import annotations

import json
from pathlib import Path

from clirunner import run_cli

from compactor.catalog import Catalog
from compactor.objectstore import LocalStore

NOW = 1_700_000_000_000


def _store(tmp_path: Path) -> list[str]:
    args = ["--store", str(tmp_path / "store"), "--now-ms", str(NOW)]
    config = ["--config", "cleanup.policy=compact"]
    assert run_cli(*args, "topic", "create", "t", "--partitions", "2", *config).code == 0
    for i in range(3):
        line = json.dumps({"topic": "t", "partition": i % 2, "key": "k", "value": str(i)})
        assert run_cli(*args, "ingest", "-", stdin=(line + "\n").encode()).code == 0
    return args


def test_history_shows_every_commit_newest_first(tmp_path: Path) -> None:
    args = _store(tmp_path)
    full = run_cli(*args, "compact", "--full", "--json")
    assert full.code == 0, full.err
    job = json.loads(full.out)["jobs"][0]
    r = run_cli(*args, "history", "--json")
    assert r.code == 0, r.err
    entries = json.loads(r.out)
    assert [(e["id"], e["kind"]) for e in entries] == [
        ("5", "compaction"),
        ("4", "ingest"),
        ("3", "ingest"),
        ("2", "ingest"),
        ("1", "topic"),
    ]
    compaction = entries[0]
    assert compaction["job"]["id"] == job["job_id"]
    assert compaction["outputs"] == job["outputs"]
    assert len(compaction["inputs"]) == 3
    assert compaction["report"]["records_in"] == 3
    assert all(isinstance(e["time_ms"], int) for e in entries)
    limited = json.loads(run_cli(*args, "history", "--json", "--limit", "2").out)
    assert [e["id"] for e in limited] == ["5", "4"]
    text = run_cli(*args, "history")
    assert text.code == 0 and "compaction" in text.out and "full: 3 inputs" in text.out
    assert len(text.out.splitlines()) == 1 + 5


def test_compact_collects_the_catalogs_superseded_objects(tmp_path: Path) -> None:
    args = _store(tmp_path)
    root = tmp_path / "store"
    # An orphan manifest: its commit never happened.
    (root / "_catalog" / "files" / "orphan.json").write_text(
        json.dumps({"format": 2, "id": "orphan", "key": "k", "written_ms": 0, "sections": []})
    )
    r = run_cli(*args, "compact", "--full", "--grace-ms", "0", "--history-retention-ms", "0")
    assert r.code == 0, r.err
    assert not (root / "_catalog" / "files" / "orphan.json").exists()
    assert run_cli(*args, "verify").code == 0
    assert Catalog(LocalStore(root)).snapshot().garbage == ()
