"""The catalog's pure changes and its compare-and-swap commit on a real store."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.catalog import Catalog, CatalogError, CommitConflict, LiveFile, Snapshot, TopicConfig
from compactor.catalog.catalog import NewFiles
from compactor.catalog.changes import (
    OffsetsMoved,
    append_files,
    create_topic,
    expired_garbage,
    forget_garbage,
    replace_files,
)
from compactor.catalog.manifests import MANIFEST_PREFIX, manifest_key, write_manifest
from compactor.catalog.snapshot import InputEnds
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
    return LiveFile.of_sections(file_id, f"data/L{level}/{file_id}.cf", level, 1000, 0, sections)


def _new(*files_and_sections: tuple[LiveFile, tuple[SectionMeta, ...]]) -> NewFiles:
    """``Catalog.commit``'s ``new_files``: the manifests of the files a commit adds."""
    return {f.id: (f, sections) for f, sections in files_and_sections}


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
    assert s1.files_holding("t", 0) == [f1]
    assert s1.files_holding("t", 1) == []
    assert f1.holds("t", 0) and not f1.holds("t", 1)
    assert (f1.record_count, f1.section_count, f1.topic_names) == (10, 1, frozenset({"t"}))
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
    sec = _section("t", 1, 0, 4)
    f = _file("a", sec)
    catalog.commit(
        lambda s: append_files(s, [f], {("t", 1): 0}, {("t", 1): 5}), new_files=_new((f, (sec,)))
    )
    latest = catalog.snapshot()
    assert latest.version == 2
    assert latest.files == (f,)
    assert catalog.sections(f) == (sec,)  # from the file's manifest
    assert catalog.section(f, "t", 1) == sec
    # a fresh reader of the store sees the same
    fresh = Catalog(store)
    assert fresh.snapshot() == latest
    assert fresh.sections(latest.files[0]) == (sec,)


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
    # bump names each file after the offset of its one record
    assert [f.id for f in final.files] == [f"f{i}" for i in range(threads_n * per_thread)]
    assert all(f.record_count == 1 and f.holds("t", 0) for f in final.files)
    assert final.version == 1 + threads_n * per_thread


def test_collect_garbage_deletes_objects_after_grace(store: ObjectStore) -> None:
    from compactor.catalog.garbage import collect_garbage

    catalog = Catalog(store)
    catalog.commit(lambda s: create_topic(s, "t", 1, TopicConfig()))
    sec = _section("t", 0, 0, 0)
    old = _file("old", sec)
    store.put(old.key, b"old bytes")
    catalog.commit(
        lambda s: append_files(s, [old], {("t", 0): 0}, {("t", 0): 1}),
        new_files=_new((old, (sec,))),
    )
    new = _file("new", sec, level=1)
    store.put(new.key, b"new bytes")
    catalog.commit(
        lambda s: replace_files(s, ["old"], [new], now_ms=1_000), new_files=_new((new, (sec,)))
    )
    assert [g.file_id for g in catalog.snapshot().garbage] == ["old"]
    assert collect_garbage(catalog, now_ms=1_500, grace_ms=1_000) == []
    assert store.head(old.key).size == 9
    assert catalog.sections(old) == (sec,)  # its manifest stays as long as the file
    assert collect_garbage(catalog, now_ms=2_000, grace_ms=1_000) == [old.key]
    assert [o.key for o in store.list("data/")] == [new.key]
    assert [o.key for o in store.list(MANIFEST_PREFIX)] == [manifest_key("new")]
    assert catalog.snapshot().garbage == ()


def test_collect_catalog_garbage_deletes_orphan_manifests_after_grace(store: ObjectStore) -> None:
    """A manifest whose commit never happened (a crash in between) is deleted once older
    than the grace period; the live file's manifest stays."""
    from compactor.catalog.garbage import collect_catalog_garbage

    clock = [1_000_000]
    catalog = Catalog(store, clock=lambda: clock[0])
    catalog.commit(lambda s: create_topic(s, "t", 1, TopicConfig()))
    sec = _section("t", 0, 0, 0)
    live = _file("a", sec)
    catalog.commit(
        lambda s: append_files(s, [live], {("t", 0): 0}, {("t", 0): 1}),
        new_files=_new((live, (sec,))),
    )
    write_manifest(store, "orphan", "data/L0/orphan.cf", catalog.clock(), (sec,))
    assert collect_catalog_garbage(catalog, grace_ms=1_000) == []
    clock[0] += 1_000
    assert collect_catalog_garbage(catalog, grace_ms=1_000) == [manifest_key("orphan")]
    assert [o.key for o in store.list(MANIFEST_PREFIX)] == [manifest_key("a")]
    assert catalog.sections(catalog.snapshot().files[0]) == (sec,)


def test_oldest_and_newest_holder_agree_with_files_holding() -> None:
    s = _with_topic()
    files = [
        LiveFile.of_sections(f"f{i}", f"k{i}", 0, 10, 0, [_section("t", i % 2, 10 * i, 10 * i)])
        for i in range(5)
    ]
    s = append_files(s, files, {}, {})
    for p in (0, 1):
        holders = s.files_holding("t", p)
        assert s.oldest_and_newest_holder("t", p) == (holders[0], holders[-1])
    assert s.oldest_and_newest_holder("t", 5) is None
    assert s.oldest_and_newest_holder("nope", 0) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 5)), max_size=4),
        max_size=6,
    ),
    st.data(),
)
def test_input_ends_agree_with_the_holders_scan(
    held: list[list[tuple[str, int]]], data: st.DataObject
) -> None:
    """InputEnds answers as the scan of the partition's holders does, for any set of
    files, whether the set holds every file of a topic (its one-bisect path) or not."""
    files = [
        LiveFile.of_sections(
            f"f{i}", f"k{i}", 0, 10, 0, [_section(t, p, i, i) for t, p in sorted(set(parts))]
        )
        for i, parts in enumerate(held)
    ]
    snap = Snapshot(files=tuple(files))
    ids = data.draw(st.sets(st.sampled_from([f.id for f in files]))) if files else set()
    ends = InputEnds(snap, ids)
    for topic in ("t", "u", "nope"):
        for partition in range(7):
            pair = snap.oldest_and_newest_holder(topic, partition)
            expected = (False, False) if pair is None else (pair[0].id in ids, pair[1].id in ids)
            assert ends(topic, partition) == expected, (topic, partition)


def test_collect_scratch_deletes_a_killed_verifys_objects_after_a_day(store: ObjectStore) -> None:
    """What a killed ``replay --verify`` left under ``_scratch/`` goes once older than
    SCRATCH_MAX_AGE_MS by its write time; younger scratch and everything else stay."""
    from compactor.catalog.catalog import wall_ms
    from compactor.catalog.garbage import SCRATCH_MAX_AGE_MS, collect_all_garbage

    left = "_scratch/verify-3-0123456789ab/data/L1/0123-compacted.cf"
    store.put(left, b"a re-run output its verify never deleted")
    store.put("data/L1/kept.cf", b"not scratch")
    clock = [wall_ms() + SCRATCH_MAX_AGE_MS - 60_000]
    catalog = Catalog(store, clock=lambda: clock[0])
    assert collect_all_garbage(catalog, clock[0]) == []
    assert [o.key for o in store.list("_scratch/")] == [left]
    clock[0] += 120_000
    assert collect_all_garbage(catalog, clock[0]) == [left]
    assert [o.key for o in store.list("")] == ["data/L1/kept.cf"]


def test_a_killed_verifys_upload_is_aborted_after_a_day(s3_store: ObjectStore) -> None:
    """A scratch upload left pending (a verify killed mid-output) is aborted once begun
    more than SCRATCH_MAX_AGE_MS ago, whatever the grace period; a job's output upload
    under ``data/`` waits for the grace period (here, longer than any upload's age).
    Only an upload begun long ago is shown: moto dates every upload 2010, so a young
    one's staying is the objects' test above, through the same comparison."""
    from compactor.catalog.catalog import wall_ms
    from compactor.catalog.garbage import SCRATCH_MAX_AGE_MS, collect_abandoned_uploads

    part = s3_store.part_size  # type: ignore[attr-defined]
    scratch = s3_store.open_multipart("_scratch/verify-3-0123456789ab/data/L1/a-compacted.cf")
    other = s3_store.open_multipart("data/L1/0123456789abcdef0123456789abcdef-compacted.cf")
    for upload in (scratch, other):
        upload.write(b"x" * (part + 1))  # a part sent: the upload exists
    pending = {u.key for u in s3_store.pending_uploads()}
    assert pending == {scratch.key, other.key}
    later = wall_ms() + SCRATCH_MAX_AGE_MS + 60_000
    catalog = Catalog(s3_store, clock=lambda: later)
    aborted = collect_abandoned_uploads(catalog, grace_ms=later)
    assert aborted == [scratch.key]
    assert [u.key for u in s3_store.pending_uploads()] == [other.key]
    other.abort()


def test_a_long_running_jobs_upload_is_not_taken_while_it_sends_parts(
    s3_store: ObjectStore,
) -> None:
    """``compact`` takes no lease, so collection judged its upload by its start alone: a
    job running longer than the grace period had its output aborted under it by another
    process's collection, and failed. An upload is abandoned only once silent (no part
    received) for the grace period too; its start and its newest part decide, on the
    store's dates (moto dates every upload's start 2010, and its parts when sent)."""
    from compactor.catalog.catalog import wall_ms
    from compactor.catalog.garbage import collect_abandoned_uploads

    grace = 600_000
    part = s3_store.part_size  # type: ignore[attr-defined]
    running = s3_store.open_multipart("data/L1/0123456789abcdef0123456789abcdef-compacted.cf")
    running.write(b"x" * (part + 1))  # a part sent: the upload exists
    (upload,) = s3_store.pending_uploads()
    sent = s3_store.upload_written_ms(upload)
    assert sent is not None and sent >= upload.initiated_ms
    assert abs(sent - wall_ms()) < 120_000
    for now, aborted in ((sent + grace - 60_000, []), (sent + grace + 60_000, [running.key])):
        catalog = Catalog(s3_store, clock=lambda now=now: now)
        assert collect_abandoned_uploads(catalog, grace_ms=grace) == aborted
    assert list(s3_store.pending_uploads()) == []
    assert s3_store.upload_written_ms(upload) is None  # gone
