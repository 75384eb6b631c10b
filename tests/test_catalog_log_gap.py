"""A log entry missing between others (deleted by hand or by a lifecycle rule) is a gap:
readers refuse it before anything is written, a checkpoint past it is read on from, and
`verify` judges no object stray while it lasts (CATALOG.md §3 step 4)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clirunner import assert_one_line_error, run_cli

from compactor.catalog import Catalog, CommitRecord, CorruptCatalog, LiveFile, TopicConfig
from compactor.catalog.catalog import GAP_CHECK_INTERVAL_MS
from compactor.catalog.changes import append_files, create_topic
from compactor.catalog.delta import Delta
from compactor.catalog.log import LogEntry, entry_to_bytes, log_key
from compactor.catalog.snapshot import Snapshot
from compactor.catalog.verify import verify_store
from compactor.cli.exit_codes import ExitCode
from compactor.fileformat import SectionMeta
from compactor.objectstore import LocalStore, ObjectInfo, ObjectStore

NOW = 1_700_000_000_000


def _ingest(c: Catalog, file_id: str) -> Snapshot:
    n = c.snapshot().next_offsets[("t", 0)]
    sections = (SectionMeta("t", 0, n, n + 9, 10, 100, 5, 9, 0, 8, 100),)
    f = LiveFile.of_sections(file_id, f"data/L0/{file_id}.cf", 0, 1000, 0, sections)
    return c.commit(
        lambda s: append_files(s, [f], {("t", 0): n}, {("t", 0): n + 10}),
        CommitRecord("ingest", {"files": [file_id]}),
        new_files={file_id: (f, sections)},
    )


def _log(
    store: ObjectStore,
    ingests: int,
    checkpoint_interval: int = 20,
    clock: Callable[[], int] = lambda: NOW,
) -> Catalog:
    """Version 1 makes topic t, versions 2.. ingest one file each."""
    c = Catalog(store, checkpoint_interval=checkpoint_interval, clock=clock)
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    c.commit(lambda s: create_topic(s, "t", 1, config), CommitRecord("topic"))
    for i in range(ingests):
        _ingest(c, f"f{i}")
    return c


def _objects(store: ObjectStore) -> dict[str, str]:
    return {o.key: o.etag for o in store.list()}


def _no_change(s: Snapshot) -> Snapshot:
    return s


@pytest.mark.parametrize("missing", [(4,), (3, 4, 5)])
def test_a_reader_refuses_a_gap_and_names_the_missing_versions(
    store: ObjectStore, missing: tuple[int, ...]
) -> None:
    _log(store, 6)  # versions 1..7
    for v in missing:
        store.delete(log_key(v))
    with pytest.raises(CorruptCatalog) as err:
        Catalog(store).snapshot()
    named = f"version {missing[0]} is" if len(missing) == 1 else "versions 3 to 5 are"
    assert f"{named} missing while version {missing[-1] + 1} exists" in str(err.value)
    assert f"nothing after version {missing[0] - 1} can be read" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_commit_into_a_gap_writes_nothing(store: ObjectStore) -> None:
    _log(store, 6)
    store.delete(log_key(4))
    before = _objects(store)
    sections = (SectionMeta("t", 0, 30, 39, 10, 100, 5, 9, 0, 8, 100),)
    f = LiveFile.of_sections("g", "data/L0/g.cf", 0, 1000, 0, sections)
    with pytest.raises(CorruptCatalog, match="version 4 is missing"):
        # without a snapshot first: the commit's own read refuses, before the manifest
        Catalog(store).commit(_no_change, new_files={"g": (f, sections)})
    assert _objects(store) == before  # no entry in the gap, no manifest


def test_a_kept_reader_refuses_a_gap_that_appears_behind_its_back(
    local_store: LocalStore,
) -> None:
    now = [NOW]
    kept = _log(local_store, 2, clock=lambda: now[0])  # versions 1..3, kept at 3
    other = Catalog(LocalStore(local_store.root))
    for i in range(4):
        _ingest(other, f"o{i}")  # versions 4..7
    entry, _ = local_store.get(log_key(4))
    local_store.delete(log_key(4))
    before = _objects(local_store)
    # Within a minute of its last look, a kept reader does not LIST again: it holds 3.
    assert kept.snapshot().version == 3
    now[0] += GAP_CHECK_INTERVAL_MS
    with pytest.raises(CorruptCatalog, match="version 4 is missing while version 5 exists"):
        kept.commit(_no_change)
    with pytest.raises(CorruptCatalog, match="version 4 is missing"):
        kept.snapshot()
    assert _objects(local_store) == before
    local_store.put(log_key(4), entry)  # restored: the kept reader reads on
    assert kept.snapshot() == other.snapshot()
    assert kept.commit(_no_change).version == 8


def test_a_gap_into_the_next_thousand_is_seen(local_store: LocalStore) -> None:
    """Near the end of a thousand, the reader lists the next one too."""
    _log(local_store, 0)  # version 1
    for v in range(2, 1003):
        entry = LogEntry(v, NOW, CommitRecord("change"), Delta())
        local_store.put(log_key(v), entry_to_bytes(entry), if_none_match=True)
    for v in range(990, 1001):
        local_store.delete(log_key(v))
    before = _objects(local_store)
    with pytest.raises(CorruptCatalog, match="versions 990 to 1000 are missing"):
        Catalog(local_store).commit(_no_change)
    assert _objects(local_store) == before


def test_a_checkpoint_past_the_gap_holds_what_it_lost(local_store: LocalStore) -> None:
    """A checkpoint newer than the missing entries is read on from, as a fresh reader
    does through the hint: a kept reader behind it is not stuck, nor stale."""
    now = [NOW]
    kept = _log(local_store, 1, checkpoint_interval=5, clock=lambda: now[0])  # versions 1..2
    writer = Catalog(LocalStore(local_store.root), checkpoint_interval=5)
    for i in range(6):
        _ingest(writer, f"w{i}")  # versions 3..8, checkpoint 5
    local_store.delete(log_key(3))  # collected (or deleted) while the kept reader idled
    now[0] += GAP_CHECK_INTERVAL_MS
    assert kept.snapshot() == writer.snapshot()
    assert kept.snapshot().version == 8
    # ...and a gap after that checkpoint is refused
    local_store.delete(log_key(7))
    with pytest.raises(CorruptCatalog, match="version 7 is missing while version 8 exists"):
        Catalog(local_store).snapshot()


def test_the_normal_read_adds_one_list_and_no_get(local_store: LocalStore) -> None:
    _log(local_store, 4)  # versions 1..5, no checkpoint
    fresh = LocalStore(local_store.root)
    lists: list[str] = []
    original = fresh.list

    def counted(prefix: str = "") -> Iterator[ObjectInfo]:
        lists.append(prefix)
        return original(prefix)

    fresh.list = counted  # type: ignore[method-assign]
    now = [NOW]
    reader = Catalog(fresh, clock=lambda: now[0])
    reader.snapshot()
    # the hint (absent), entry 1 (is the store format 2?), entries 1..5, the miss at 6
    assert fresh.gets.total == 1 + 1 + 5 + 1
    # no hint: the checkpoints' LIST (as before); then the thousand holding version 6
    assert lists == ["_catalog/checkpoints/", "_catalog/log/" + "0" * 17]
    reader.snapshot()  # kept: the miss at 6 again, no LIST within the interval
    assert fresh.gets.total == 1 + 1 + 5 + 2
    assert len(lists) == 2
    now[0] += GAP_CHECK_INTERVAL_MS
    reader.snapshot()
    assert len(lists) == 3


def _cli_store(tmp_path: Path) -> list[str]:
    args = ["--store", str(tmp_path / "store"), "--now-ms", str(NOW)]
    config = ["--config", "cleanup.policy=compact"]
    assert run_cli(*args, "topic", "create", "t", "--partitions", "2", *config).code == 0
    for i in range(6):
        line = json.dumps({"topic": "t", "partition": i % 2, "key": f"k{i}", "value": str(i)})
        assert run_cli(*args, "ingest", "-", stdin=(line + "\n").encode()).code == 0
    return args  # versions 1..7


def test_compact_full_on_a_gap_exits_4_and_writes_nothing(tmp_path: Path) -> None:
    args = _cli_store(tmp_path)
    store = LocalStore(tmp_path / "store")
    store.delete(log_key(4))
    before = _objects(store)
    r = run_cli(*args, "compact", "--full")
    assert r.code == ExitCode.CATALOG
    assert_one_line_error(r, "version 4 is missing while version 5 exists")
    assert r.out == ""  # no job's "committed" line
    assert _objects(store) == before


def test_verify_calls_no_file_past_a_gap_a_stray(tmp_path: Path) -> None:
    args = _cli_store(tmp_path)
    store = LocalStore(tmp_path / "store")
    store.delete(log_key(4))
    for command in (["verify"], ["verify", "--json"]):
        r = run_cli(*args, *command)
        assert r.code in (ExitCode.VERIFY_FAILED, ExitCode.CATALOG), r
        assert "stray" not in r.err
        assert '"strays": [{' not in r.out
        assert "Traceback" not in r.err
        assert "version 4" in r.out + r.err
    # The library's report on any snapshot: the gap is the problem, no strays.
    report = verify_store(Catalog(store), Snapshot())
    assert report.strays == ()
    assert any("gaps between versions 1 and 7 (missing: version 4)" in p for p in report.problems)
    assert not report.ok
