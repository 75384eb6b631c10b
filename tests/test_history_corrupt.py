"""`compactor history` on a corrupt catalog: refused as every other command refuses it,
exit 4 and one line on stderr, the store left byte for byte as it was."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirunner import one_line, run_cli, tree

from compactor.catalog import Catalog
from compactor.catalog.log import LOG_PREFIX
from compactor.objectstore import LocalStore, ObjectInfo

HERE = Path(__file__).resolve().parent
FORMAT1 = HERE / "fixtures" / "format1-store"
NOW = "1700000000000"


def _entry(root: Path, version: int) -> Path:
    return root / "_catalog" / "log" / f"{version:020d}.json"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store with a log of versions 1 to 5: a topic and four ingests."""
    root = tmp_path / "store"
    s = str(root)
    create = ["topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact"]
    assert run_cli("--store", s, *create).code == 0
    for i in range(4):
        line = json.dumps({"topic": "t", "partition": i % 2, "key": f"k{i}", "value": str(i)})
        r = run_cli("--store", s, "--now-ms", NOW, "ingest", "-", stdin=(line + "\n").encode())
        assert r.code == 0, r.err
    assert sorted(p.name for p in (root / "_catalog" / "log").iterdir()) == [
        f"{v:020d}.json" for v in range(1, 6)
    ]
    return root


def _refused(root: Path, *args: str, fragments: tuple[str, ...]) -> None:
    before = tree(root)
    r = run_cli("--store", str(root), "history", *args)
    one_line(r, 4, *fragments)
    assert tree(root) == before


@pytest.mark.parametrize("args", [(), ("--json",), ("--limit", "3")])
def test_a_truncated_entry_is_refused(store: Path, args: tuple[str, ...]) -> None:
    entry = _entry(store, 3)
    entry.write_bytes(entry.read_bytes()[:40])
    _refused(store, *args, fragments=(f"_catalog/log/{3:020d}.json is not valid JSON",))
    # The same line as a command that reads the state.
    stats = run_cli("--store", str(store), "stats")
    assert run_cli("--store", str(store), "history", *args).err == stats.err


def test_an_entry_that_is_not_an_entry_is_refused(store: Path) -> None:
    _entry(store, 4).write_text('{"format": 2, "version": 4}')
    _refused(store, "--json", fragments=(f"_catalog/log/{4:020d}.json",))


@pytest.mark.parametrize("args", [(), ("--json",), ("--limit", "3")])
def test_a_missing_entry_is_a_gap_and_refused(store: Path, args: tuple[str, ...]) -> None:
    _entry(store, 3).unlink()
    _refused(store, *args, fragments=("has a gap", "version 3 is missing while version 4 exists"))


def test_a_limit_reads_only_the_entries_it_shows(store: Path) -> None:
    """Entries older than the ``--limit`` shown are not read: a gap or a corrupt entry
    there is not history's to find (``verify`` reports it)."""
    _entry(store, 1).write_bytes(b"{")
    _entry(store, 2).unlink()
    r = run_cli("--store", str(store), "history", "--json", "--limit", "2")
    assert r.code == 0, r.err
    assert [e["id"] for e in json.loads(r.out)] == ["5", "4"]
    r = run_cli("--store", str(store), "history", "--limit", "3")  # 5, 4, 3: no gap among them
    assert r.code == 0 and len(r.out.splitlines()) == 1 + 3, r
    _refused(store, "--json", "--limit", "4", fragments=("has a gap", "version 2 is missing"))


def test_a_garbage_format1_catalog_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(FORMAT1, root)
    ok = run_cli("--store", str(root), "history", "--json")
    assert ok.code == 0 and json.loads(ok.out) == [], ok
    (root / "_catalog" / "catalog.json").write_bytes(b"\x00not json")
    _refused(root, fragments=("_catalog/catalog.json is not valid JSON",))
    (root / "_catalog" / "catalog.json").write_text('{"format": 1, "topics": []}')
    _refused(root, "--json", fragments=("_catalog/catalog.json",))


class _CollectedAfterList(LocalStore):
    """A store whose log loses its oldest entries right after each LIST of it, as under
    a garbage collection running beside ``history``."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        listed = list(super().list(prefix))
        if prefix == LOG_PREFIX:
            for v in (1, 2):
                self.delete(f"{LOG_PREFIX}{v:020d}.json")
        return iter(listed)


def test_entries_collected_while_listing_end_the_history(store: Path) -> None:
    """A listed entry gone when read was collected (oldest first): the history ends above
    it, without a gap, and without an error."""
    entries = Catalog(_CollectedAfterList(store)).history()
    assert [e.version for e in entries] == [5, 4, 3]


class _CollectedWhileListing(LocalStore):
    """A store whose log loses versions 1 to 3 while a LIST of it goes on, after the LIST
    has returned version 1: the listing shows 1, 4, 5, a gap that is no gap."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        listed = list(super().list(prefix))
        if prefix != LOG_PREFIX:
            return iter(listed)
        for v in (1, 2, 3):
            self.delete(f"{LOG_PREFIX}{v:020d}.json")
        return iter([listed[0], *listed[3:]])


def test_entries_collected_while_listing_are_not_a_gap(store: Path) -> None:
    entries = Catalog(_CollectedWhileListing(store)).history()
    assert [e.version for e in entries] == [5, 4]


def test_a_gap_whose_older_side_is_still_there_is_refused_under_a_listing_race(
    store: Path,
) -> None:
    """The positive control of the test above: the same listing, its older side present,
    is a gap."""
    _entry(store, 2).unlink()
    _entry(store, 3).unlink()
    with pytest.raises(Exception, match="has a gap"):
        Catalog(LocalStore(store)).history()
