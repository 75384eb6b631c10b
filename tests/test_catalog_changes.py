"""The catalog's pure changes and its compare-and-swap commit on a real store."""

import threading

import pytest

from compactor.catalog import Catalog, CatalogError, CommitConflict, LiveFile, Snapshot, TopicConfig
from compactor.catalog.changes import (
    OffsetsMoved,
    append_files,
    create_topic,
    expired_garbage,
    forget_garbage,
    replace_files,
)
from compactor.fileformat import SectionMeta
from compactor.objectstore import ObjectStore


def _section(topic: str, partition: int, first: int, last: int) -> SectionMeta:
    return SectionMeta(
        topic=topic,
        partition=partition,
        first_offset=first,
        last_offset=last,
        record_count=last - first + 1,
        uncompressed_bytes=100,
        min_timestamp=0,
        max_timestamp=1,
        tombstones=0,
        position=8,
        length=100,
    )


def _file(file_id: str, *sections: SectionMeta, level: int = 0) -> LiveFile:
    return LiveFile(file_id, f"data/L{level}/{file_id}.cf", level, 1000, 0, tuple(sections))


def _with_topic() -> Snapshot:
    return create_topic(Snapshot(), "t", 2, TopicConfig.parse({"cleanup.policy": "compact"}))


def test_create_topic_sets_offsets_and_refuses_duplicates() -> None:
    s = _with_topic()
    assert s.next_offsets == {("t", 0): 0, ("t", 1): 0}
    with pytest.raises(CatalogError, match="already exists"):
        create_topic(s, "t", 1, TopicConfig())
    with pytest.raises(CatalogError, match="invalid topic name"):
        create_topic(s, "a/b", 1, TopicConfig())


def test_append_refuses_when_offsets_moved() -> None:
    s = _with_topic()
    f1 = _file("a", _section("t", 0, 0, 9))
    s1 = append_files(s, [f1], {("t", 0): 0}, {("t", 0): 10})
    assert s1.next_offsets[("t", 0)] == 10
    assert s1.sections_of("t", 0) == [(f1, f1.sections[0])]
    f2 = _file("b", _section("t", 0, 0, 4))
    with pytest.raises(OffsetsMoved) as moved:
        append_files(s1, [f2], {("t", 0): 0}, {("t", 0): 5})
    assert moved.value.moved == {("t", 0): 10}


def test_replace_needs_live_contiguous_inputs_and_keeps_position() -> None:
    files = [_file(x, _section("t", 0, i * 10, i * 10 + 9)) for i, x in enumerate("abcd")]
    s = append_files(_with_topic(), files, {("t", 0): 0}, {("t", 0): 40})
    out = _file("bc", _section("t", 0, 12, 29), level=1)
    s2 = replace_files(s, ["b", "c"], [out], now_ms=500)
    assert [f.id for f in s2.files] == ["a", "bc", "d"]
    assert {g.key for g in s2.garbage} == {files[1].key, files[2].key}
    with pytest.raises(CommitConflict, match="no longer live"):
        replace_files(s2, ["b", "c"], [out], now_ms=600)
    with pytest.raises(CommitConflict, match="contiguous"):
        replace_files(s, ["a", "c"], [out], now_ms=600)


def test_garbage_expires_after_grace() -> None:
    files = [_file("a", _section("t", 0, 0, 0))]
    s = append_files(_with_topic(), files, {("t", 0): 0}, {("t", 0): 1})
    s = replace_files(s, ["a"], [], now_ms=1000)
    assert expired_garbage(s, now_ms=1500, grace_ms=1000) == ()
    gone = expired_garbage(s, now_ms=2000, grace_ms=1000)
    assert [g.key for g in gone] == [files[0].key]
    assert forget_garbage(s, gone).garbage == ()


def test_commit_round_trips_and_versions(store: ObjectStore) -> None:
    catalog = Catalog(store)
    assert catalog.snapshot().version == 0
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    committed = catalog.commit(lambda s: create_topic(s, "t", 3, config))
    assert committed.version == 1
    again = catalog.snapshot()
    assert again.version == 1 and again.topics["t"].config == config
    f = _file("a", _section("t", 1, 0, 4))
    catalog.commit(lambda s: append_files(s, [f], {("t", 1): 0}, {("t", 1): 5}))
    latest = catalog.snapshot()
    assert latest.version == 2
    assert latest.files == (f,)


def test_racing_commits_are_all_applied_once(store: ObjectStore) -> None:
    catalog = Catalog(store)
    catalog.commit(lambda s: create_topic(s, "t", 1, TopicConfig()))
    threads_n, per_thread = 4, 5

    def bump(s: Snapshot) -> Snapshot:
        nxt = s.next_offsets[("t", 0)]
        f = _file(f"f{nxt}", _section("t", 0, nxt, nxt))
        return append_files(s, [f], {("t", 0): nxt}, {("t", 0): nxt + 1})

    def worker() -> None:
        for _ in range(per_thread):
            Catalog(store).commit(bump)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = catalog.snapshot()
    assert final.next_offsets[("t", 0)] == threads_n * per_thread
    assert [f.sections[0].first_offset for f in final.files] == list(range(threads_n * per_thread))
    assert final.version == 1 + threads_n * per_thread


def test_collect_garbage_deletes_objects_after_grace(store: ObjectStore) -> None:
    from compactor.catalog.garbage import collect_garbage

    catalog = Catalog(store)
    catalog.commit(lambda s: create_topic(s, "t", 1, TopicConfig()))
    old = _file("old", _section("t", 0, 0, 0))
    store.put(old.key, b"old bytes")
    catalog.commit(lambda s: append_files(s, [old], {("t", 0): 0}, {("t", 0): 1}))
    new = _file("new", _section("t", 0, 0, 0), level=1)
    store.put(new.key, b"new bytes")
    catalog.commit(lambda s: replace_files(s, ["old"], [new], now_ms=1_000))
    assert collect_garbage(catalog, now_ms=1_500, grace_ms=1_000) == []
    assert store.head(old.key).size == 9
    assert collect_garbage(catalog, now_ms=2_000, grace_ms=1_000) == [old.key]
    assert [o.key for o in store.list("data/")] == [new.key]
    assert catalog.snapshot().garbage == ()
