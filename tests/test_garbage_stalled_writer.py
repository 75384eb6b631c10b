"""Garbage collection under a writer that stalls between its manifests and its commit.

A commit writes its files' manifests, then its log entry, and a writer may stall in
between for any time (a paused process, a log entry retried with back-off) and then
commit. Collection took such a manifest as an orphan once older than the grace period,
and the commit that followed left live files without manifests: ``verify`` failed and
``dump`` could serve none of the topic's partitions. A manifest now goes only once its
data object is gone too (``catalog.garbage``). The writer is a real ingest, held at its
log entry's PUT on a real local store; collection is the real ``compact``."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from clirunner import run_cli

from compactor.catalog import Catalog
from compactor.catalog.garbage import collect_catalog_garbage
from compactor.catalog.manifests import MANIFEST_PREFIX
from compactor.ingest.agent import L0Ingest
from compactor.ingest.jsonl import InputRecord
from compactor.objectstore import LocalStore

NOW = 1_700_000_000_000


class _WriterDied(Exception):
    pass


class _LogEntryHeld(LocalStore):
    """A local store whose first PUT of a log entry waits until ``release`` is set, then
    is made, or with ``dies``, never made (the writer's process ends there)."""

    def __init__(self, root: Path, *, dies: bool = False) -> None:
        super().__init__(root)
        self.arrived, self.release = threading.Event(), threading.Event()
        self.dies = dies

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if key.startswith("_catalog/log/") and not self.release.is_set():
            self.arrived.set()
            assert self.release.wait(60)
            if self.dies:
                raise _WriterDied
        return super().put(key, data, **kwargs)


def _records(n: int) -> list[InputRecord]:
    return [
        InputRecord("t", i % 2, NOW + i, f"k{i % 7}".encode(), f"v{i}".encode(), ())
        for i in range(n)
    ]


def test_an_ingest_stalled_before_its_log_entry_keeps_its_manifests(tmp_path: Path) -> None:
    root = tmp_path / "store"
    args = ["--store", str(root)]
    create = ["topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact"]
    assert run_cli(*args, *create).code == 0
    store = _LogEntryHeld(root)
    ingest = L0Ingest(store, Catalog(store), now_ms=NOW, max_file_records=20)
    for record in _records(100):
        ingest.add(record)
    outcome: list[object] = []
    writer = threading.Thread(target=lambda: outcome.append(ingest.commit()))
    writer.start()
    try:
        assert store.arrived.wait(60)  # its data objects and manifests are written
        manifests = {o.key for o in LocalStore(root).list(MANIFEST_PREFIX)}
        assert len(manifests) == 5
        # Every manifest is older than a grace period of 0 ms, and names no live file.
        collected = run_cli(*args, "compact", "--until-idle", "--grace-ms", "0", "--json")
        assert collected.code == 0, collected.err
        assert {o.key for o in LocalStore(root).list(MANIFEST_PREFIX)} == manifests
    finally:
        store.release.set()
        writer.join(60)
    assert outcome and not isinstance(outcome[0], BaseException)
    verify = run_cli(*args, "verify")
    assert verify.code == 0, verify.err
    for partition in ("0", "1"):
        dump = run_cli(*args, "dump", "--topic", "t", "--partition", partition)
        assert dump.code == 0, dump.err
        assert len(dump.out.splitlines()) == 50


def _died(ingest: L0Ingest) -> None:
    try:
        ingest.commit()
    except _WriterDied:
        return
    raise AssertionError("the writer committed")


def test_a_dead_writers_manifest_goes_with_its_stray(tmp_path: Path) -> None:
    """A writer that never commits leaves its data objects (strays) and manifests: the
    manifests stay while the strays do, and go at the first collection after the strays
    are deleted (by hand, as README.md says)."""
    root = tmp_path / "store"
    args = ["--store", str(root)]
    create = ["topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact"]
    assert run_cli(*args, *create).code == 0
    store = _LogEntryHeld(root, dies=True)
    ingest = L0Ingest(store, Catalog(store), now_ms=NOW, max_file_records=50)
    for record in _records(100):
        ingest.add(record)
    writer = threading.Thread(target=lambda: _died(ingest))
    writer.start()
    assert store.arrived.wait(60)
    store.release.set()
    writer.join(60)
    catalog = Catalog(LocalStore(root))
    manifests = {o.key for o in catalog.store.list(MANIFEST_PREFIX)}
    assert len(manifests) == 2
    assert collect_catalog_garbage(catalog, grace_ms=0) == []
    verify = run_cli(*args, "verify", "--json")
    strays = [s["key"] for s in json.loads(verify.out)["strays"]]
    assert len(strays) == 2
    for key in strays:
        catalog.store.delete(key)
    assert sorted(collect_catalog_garbage(catalog, grace_ms=0)) == sorted(manifests)
    assert run_cli(*args, "verify").code == 0
