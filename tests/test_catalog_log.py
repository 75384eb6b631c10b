"""The catalog's log: deltas, checkpoints, concurrent committers, leases, upgrade from
format 1, history, and the cost of a commit (objects read and written per commit)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from conftest import S3Url
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.catalog import Catalog, CommitConflict, CommitRecord, LiveFile, Snapshot, TopicConfig
from compactor.catalog.changes import append_files, create_topic, replace_files
from compactor.catalog.delta import apply, delta_from_json, delta_to_json, diff
from compactor.catalog.garbage import collect_catalog_garbage
from compactor.catalog.leases import JobLeases, release_lease, renew_lease, take_lease
from compactor.catalog.log import LAST_CHECKPOINT_KEY, checkpoint_key, log_key
from compactor.catalog.manifests import (
    SECTION_FIELDS,
    manifest_bytes,
    manifest_key,
    read_manifest,
    write_manifest,
)
from compactor.catalog.snapshot import CATALOG_FORMAT
from compactor.fileformat import SectionMeta
from compactor.objectstore import LocalStore, ObjectStore, open_store


def _section(partition: int, first: int, last: int, topic: str = "t") -> SectionMeta:
    return SectionMeta(topic, partition, first, last, last - first + 1, 100, 5, 9, 0, 8, 100)


def _file(file_id: str, *sections: SectionMeta, level: int = 0) -> LiveFile:
    return LiveFile.of_sections(file_id, f"data/L{level}/{file_id}.cf", level, 1000, 0, sections)


def _topic(c: Catalog, partitions: int = 4) -> Snapshot:
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    return c.commit(lambda s: create_topic(s, "t", partitions, config), CommitRecord("topic"))


def _ingest(c: Catalog, file_id: str, partition: int, count: int = 10) -> Snapshot:
    """Append one file of ``count`` records at the partition's next offset."""
    n = c.snapshot().next_offsets[("t", partition)]
    sections = (_section(partition, n, n + count - 1),)
    f = _file(file_id, *sections)
    return c.commit(
        lambda s: append_files(s, [f], {("t", partition): n}, {("t", partition): n + count}),
        CommitRecord("ingest", {"files": [file_id]}),
        new_files={file_id: (f, sections)},
    )


def _catalog_objects(store: ObjectStore) -> dict[str, bytes]:
    return {o.key: store.get(o.key)[0] for o in store.list("_catalog/")}


# --- deltas -----------------------------------------------------------------------------


@st.composite
def _states(draw: st.DrawFn) -> tuple[Snapshot, Snapshot]:
    """A state and a successor made of appends, replacements, offsets and leases."""
    s = create_topic(Snapshot(), "t", 3, TopicConfig.parse({"cleanup.policy": "compact"}))
    files = [
        _file(f"f{i}", _section(i % 3, 100 * i, 100 * i + 9))
        for i in range(draw(st.integers(0, 6)))
    ]
    s = append_files(s, files, {}, {})
    new = s
    if new.files and draw(st.booleans()):
        start = draw(st.integers(0, len(new.files) - 1))
        end = draw(st.integers(start + 1, len(new.files)))
        ids = [f.id for f in new.files[start:end]]
        outputs = [_file(f"out{k}", _section(k, 10_000 + k, 10_000 + k)) for k in range(2)]
        new = replace_files(new, ids, outputs[: draw(st.integers(0, 2))], now_ms=7)
    if draw(st.booleans()):
        added = [_file(f"new{k}", _section(k % 3, 50_000 + k, 50_000 + k)) for k in range(2)]
        new = append_files(new, added, {}, {("t", 0): 60_000})
    if new.files and draw(st.booleans()):
        new = take_lease(new, "job", "w", [new.files[0].id], now_ms=1, ttl_ms=100)
    return s, new


@given(_states())
@settings(max_examples=200, deadline=None)
def test_a_delta_turns_the_old_state_into_the_new_one(states: tuple[Snapshot, Snapshot]) -> None:
    old, new = states
    d = diff(old, new)
    assert apply(old, d, old.version + 1) == Snapshot(
        old.version + 1,
        new.topics,
        new.next_offsets,
        new.files,
        new.garbage,
        new.leases,
        new.last_full_compaction_ms,
    )
    again = delta_from_json(json.loads(json.dumps(delta_to_json(d))))
    assert apply(old, again, 9) == apply(old, d, 9)


# --- commits, checkpoints, reads --------------------------------------------------------


def test_a_commit_writes_one_log_entry_and_its_manifests(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    c = Catalog(store)
    _topic(c)
    before = set(_catalog_objects(store))
    snap = _ingest(c, "a", 0)
    written = set(_catalog_objects(store)) - before
    assert written == {log_key(2), manifest_key("a")}
    assert snap.version == 2
    assert c.sections(snap.files[0]) == (_section(0, 0, 9),)


def test_checkpoints_bound_what_a_reader_gets(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    c = Catalog(store, checkpoint_interval=5)
    _topic(c)
    for i in range(22):
        _ingest(c, f"f{i}", i % 4)
    assert json.loads(store.get(LAST_CHECKPOINT_KEY)[0]) == {"version": 20}
    for v in (5, 10, 15, 20):
        store.head(checkpoint_key(v))
    fresh = LocalStore(tmp_path)
    snap = Catalog(fresh).snapshot()
    assert snap == c.snapshot()
    # the hint, checkpoint 20, entries 21..23, and the miss at 24
    assert fresh.gets.total == 1 + 1 + 3 + 1


def test_a_reader_finds_the_newest_checkpoint_without_the_hint(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    c = Catalog(store, checkpoint_interval=3)
    _topic(c)
    for i in range(7):
        _ingest(c, f"f{i}", 0)
    store.delete(LAST_CHECKPOINT_KEY)
    assert Catalog(LocalStore(tmp_path)).snapshot() == c.snapshot()


def test_a_log_that_does_not_chain_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    c = Catalog(store)
    _topic(c)
    _ingest(c, "a", 0)
    entry = json.loads(store.get(log_key(2))[0])
    entry["delta"]["removed_files"] = ["nope"]
    store.put(log_key(3), json.dumps({**entry, "version": 3}).encode())
    with pytest.raises(Exception, match="removes a file that is not live"):
        Catalog(LocalStore(tmp_path)).snapshot()


# --- concurrency ------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [False, True])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_racing_ingests_and_compactions_lose_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, processes: bool, where: str
) -> None:
    """4 ingesters each append to their own partition while 2 compactors replace
    disjoint runs; the final state is exactly what the successful changes imply."""
    if where == "local":
        url, endpoint = str(tmp_path / "store"), None
    else:
        s3: S3Url = request.getfixturevalue("s3_url")
        url, endpoint = s3.url, s3.endpoint_url
    c = Catalog(open_store(url, endpoint_url=endpoint))
    _topic(c)
    for i in range(8):
        _ingest(c, f"seed{i}", i % 4, count=1)
    work = [(_ingest_many, (url, endpoint, p)) for p in range(4)]
    work += [(_compact_pair, (url, endpoint, k)) for k in range(2)]
    if processes:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=fn, args=args) for fn, args in work]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            assert p.exitcode == 0
    else:
        threads = [threading.Thread(target=fn, args=args) for fn, args in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    final = Catalog(open_store(url, endpoint_url=endpoint)).snapshot()
    ids = [f.id for f in final.files]
    assert len(ids) == len(set(ids))
    # seeds 0..3 compacted into out0, seeds 4..7 into out1; every ingest kept.
    assert [i for i in ids if i.startswith("seed")] == []
    assert ids[:2] == ["out0", "out1"]
    for p in range(4):
        mine = [f for f in final.files if f.id.startswith(f"p{p}-")]
        assert [f.id for f in mine] == [f"p{p}-{j}" for j in range(10)]
        assert final.next_offsets[("t", p)] == 2 + 10 * 5
    assert final.version == 1 + 8 + 40 + 2


def _ingest_many(url: str, endpoint: str | None, partition: int) -> None:
    c = Catalog(open_store(url, endpoint_url=endpoint))
    for j in range(10):
        _ingest(c, f"p{partition}-{j}", partition, count=5)


def _compact_pair(url: str, endpoint: str | None, k: int) -> None:
    c = Catalog(open_store(url, endpoint_url=endpoint))
    inputs = [f"seed{i}" for i in range(4 * k, 4 * k + 4)]
    out = _file(f"out{k}", *(_section(p, 0 + k, 0 + k) for p in range(4)), level=1)
    c.commit(
        lambda s: replace_files(s, inputs, [out], now_ms=5),
        CommitRecord("compaction", {"inputs": inputs}),
        new_files={out.id: (out, ())},
    )


# --- leases -----------------------------------------------------------------------------


def test_a_lease_keeps_inputs_from_other_jobs_until_it_expires(tmp_path: Path) -> None:
    c = Catalog(LocalStore(tmp_path))
    _topic(c)
    _ingest(c, "a", 0)
    _ingest(c, "b", 1)
    snap = c.commit(lambda s: take_lease(s, "job1", "w1", ["a", "b"], now_ms=1000, ttl_ms=500))
    assert snap.leased_inputs(1499) == {"a": "job1", "b": "job1"}
    assert snap.leased_inputs(1500) == {}
    with pytest.raises(CommitConflict, match="leased by job job1"):
        c.commit(lambda s: take_lease(s, "job2", "w2", ["b"], now_ms=1200, ttl_ms=500))
    with pytest.raises(CommitConflict, match="leased by job job1"):
        c.commit(lambda s: replace_files(s, ["a"], [], now_ms=1200, job_id="job2"))
    # Renewal by whoever holds the job (the lease is the job's, not the process's).
    snap = c.commit(lambda s: renew_lease(s, "job1", "w3", now_ms=1400, ttl_ms=500))
    assert snap.leases["job1"].owner == "w3" and snap.leases["job1"].expires_ms == 1900
    # Expired: another job may take the inputs, and the first can no longer renew.
    snap = c.commit(lambda s: take_lease(s, "job2", "w2", ["b"], now_ms=2000, ttl_ms=500))
    assert set(snap.leases) == {"job2"}
    with pytest.raises(CommitConflict, match="holds no lease"):
        c.commit(lambda s: renew_lease(s, "job1", "w1", now_ms=2001, ttl_ms=500))
    c.commit(lambda s: release_lease(s, "job2"))


def test_a_late_job_commits_once_if_its_inputs_are_still_live_and_unclaimed(
    tmp_path: Path,
) -> None:
    c = Catalog(LocalStore(tmp_path))
    _topic(c)
    _ingest(c, "a", 0)
    c.commit(lambda s: take_lease(s, "job1", "w1", ["a"], now_ms=0, ttl_ms=10))
    out = _file("o", _section(0, 0, 9), level=1)
    late = c.commit(lambda s: replace_files(s, ["a"], [out], now_ms=99, job_id="job1"))
    assert [f.id for f in late.files] == ["o"] and late.leases == {}
    with pytest.raises(CommitConflict, match="no longer live"):
        c.commit(lambda s: replace_files(s, ["a"], [out], now_ms=99, job_id="job1"))


# --- upgrade from format 1 --------------------------------------------------------------


def _format1(store: ObjectStore) -> dict[str, object]:
    section = [("t", 0, 0, 9, 10, 1000, 5, 9, 0, 8, 100)]
    data: dict[str, object] = {
        "format": 1,
        "version": 7,
        "topics": {
            "t": {
                "partitions": 2,
                "config": {"cleanup.policy": "compact"},
                "next_offsets": [10, 0],
            }
        },
        "files": [
            {
                "id": "old",
                "key": "data/L0/old.cf",
                "level": 0,
                "size": 500,
                "created_ms": 3,
                "sections": [list(s) for s in section],
            }
        ],
        "garbage": [{"key": "data/L0/gone.cf", "replaced_ms": 2}],
        "last_full_compaction_ms": 3,
    }
    store.put("_catalog/catalog.json", json.dumps(data).encode())
    return data


def test_a_format1_store_is_read_as_is_and_upgraded_by_its_first_commit(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    _format1(store)
    c = Catalog(store)
    snap = c.snapshot()
    assert snap.version == 7 and [f.id for f in snap.files] == ["old"]
    assert c.sections(snap.files[0])[0].record_count == 10
    assert not list(store.list("_catalog/log/"))  # reading changes nothing
    after = _ingest(c, "new", 1)
    assert [f.id for f in after.files] == ["old", "new"]
    assert after.next_offsets == {("t", 0): 10, ("t", 1): 10}
    fence = json.loads(store.get("_catalog/catalog.json")[0])
    assert fence["format"] == 2 and fence["upgraded"]["version"] == 7
    kinds = [e.record.kind for e in c.history()]
    assert kinds == ["ingest", "upgrade"]
    fresh = Catalog(LocalStore(tmp_path))
    assert fresh.snapshot() == after
    assert fresh.sections(after.files[0]) == c.sections(snap.files[0])


def test_an_interrupted_upgrade_is_finished_from_the_fence(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    data = _format1(store)
    store.put("_catalog/catalog.json", json.dumps({"format": 2, "upgraded": data}).encode())
    c = Catalog(store)
    assert c.snapshot().version == 7
    assert c.upgrade()
    assert Catalog(LocalStore(tmp_path)).snapshot().version == 8
    assert not Catalog(LocalStore(tmp_path)).upgrade()


def test_history_shows_an_upgrade_under_its_own_version_and_the_old_one_beside_it(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    _format1(store)
    c = Catalog(store)
    assert c.upgrade()
    (entry,) = [e.history_json() for e in c.history()]
    assert entry == {
        "id": "8",
        "version": 8,
        "kind": "upgrade",
        "time_ms": entry["time_ms"],
        "from_format": 1,
        "from_version": 7,
    }
    assert list(entry)[:4] == ["id", "version", "kind", "time_ms"]
    stored = json.loads(store.get(log_key(8))[0])["commit"]
    assert stored == {"kind": "upgrade", "from_format": 1, "version": 7}  # CATALOG.md §5


# --- history ----------------------------------------------------------------------------


def test_history_lists_every_commit_newest_first(tmp_path: Path) -> None:
    c = Catalog(LocalStore(tmp_path))
    _topic(c)
    _ingest(c, "a", 0)
    c.commit(lambda s: take_lease(s, "j", "w", ["a"], now_ms=0, ttl_ms=10), CommitRecord("lease"))
    entries = [e.history_json() for e in c.history()]
    assert [(e["id"], e["kind"]) for e in entries] == [
        ("3", "lease"),
        ("2", "ingest"),
        ("1", "topic"),
    ]
    assert entries[1]["files"] == ["a"]
    assert [e["id"] for e in (x.history_json() for x in c.history(limit=1))] == ["3"]


def test_verify_replays_the_log_against_every_checkpoint(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    c = Catalog(store, checkpoint_interval=3)
    _topic(c)
    for i in range(7):
        _ingest(c, f"f{i}", i % 4)
    assert c.check_log() == []
    state = json.loads(store.get(checkpoint_key(6))[0])
    state["topics"]["t"]["next_offsets"][0] += 1
    store.put(checkpoint_key(6), json.dumps(state).encode())
    assert c.check_log() == ["checkpoint 6 differs from the log replayed to it"]
    store.delete(log_key(5))
    assert "the log has gaps" in c.check_log()[0]


def test_job_leases_record_taken_renewed_expired_in_the_history(tmp_path: Path) -> None:
    clock = [1_000]
    c = Catalog(LocalStore(tmp_path), clock=lambda: clock[0])
    _topic(c)
    _ingest(c, "a", 0)
    _ingest(c, "b", 1)
    leases = JobLeases(c, "sched-1")
    assert leases.take("j1", ["a"], ttl_ms=100).expires_ms == 1_100
    clock[0] = 1_050
    assert leases.renew("j1", ttl_ms=100).expires_ms == 1_150
    leases.take("j2", ["b"], ttl_ms=10)
    assert c.snapshot().leased_inputs(clock[0]) == {"a": "j1", "b": "j2"}
    clock[0] = 2_000
    assert leases.expire() == ["j1", "j2"]
    assert c.snapshot().leases == {}
    records = [e.history_json() for e in c.history(limit=4)]
    assert [(r["action"], r.get("job_id")) for r in records] == [
        ("expired", None),
        ("taken", "j2"),
        ("renewed", "j1"),
        ("taken", "j1"),
    ]
    assert records[0]["expired"] == ["j1", "j2"]


def test_a_lease_commit_reads_the_catalog_once_and_records_what_its_change_dropped(
    tmp_path: Path,
) -> None:
    clock = [1_000]
    store = LocalStore(tmp_path)
    c = Catalog(store, clock=lambda: clock[0])
    _topic(c)
    _ingest(c, "a", 0)
    leases = JobLeases(c, "worker-1")
    leases.take("j1", ["a"], ttl_ms=100)
    clock[0] = 2_000  # j1 expired
    version = c.snapshot().version
    store.gets.reset()
    leases.take("j2", ["a"], ttl_ms=100)  # drops j1's lease as it takes j2's
    # the 404 of the next version only: no read of the state of its own for the record
    assert store.gets.snapshot() == {log_key(version + 1): 1}
    assert set(c.snapshot().leases) == {"j2"}
    record = c.history(limit=1)[0].history_json()
    assert (record["action"], record["job_id"], record["expired"]) == ("taken", "j2", ["j1"])


def test_a_reader_following_the_log_keeps_no_count_of_each_version(tmp_path: Path) -> None:
    """A worker reads every version the catalog ever commits: its store's GET counter
    counts them in all, and holds no entry per version (the memory of a long-lived
    worker)."""
    store, c, version = _topic_and_reader(tmp_path)
    writer = Catalog(LocalStore(tmp_path))
    before = store.gets.total
    for _ in range(50):
        writer.commit(lambda s: s, CommitRecord("nothing"))
        c.snapshot()
    assert c.snapshot().version == version + 50
    assert store.gets.total - before == 50 * 2 + 1  # each entry and the miss after it; a miss
    assert store.gets.snapshot() == {}


def _topic_and_reader(tmp_path: Path) -> tuple[LocalStore, Catalog, int]:
    store = LocalStore(tmp_path)
    c = Catalog(store)
    _topic(c)
    return store, c, c.snapshot().version


def _read_topic(tmp_path: Path) -> tuple[LocalStore, Catalog, int]:
    """A catalog holding a topic, read, and its store's GET count reset."""
    store, c, version = _topic_and_reader(tmp_path)
    store.gets.reset()
    return store, c, version


def test_a_commit_reads_the_next_version_again_only_after_writing_manifests(
    tmp_path: Path,
) -> None:
    store, c, version = _read_topic(tmp_path)
    _ingest(c, "a", 0)  # a snapshot (its next offset), then a commit with a manifest
    # the snapshot's miss, the commit's before the manifest and after it
    assert store.gets.snapshot() == {log_key(version + 1): 3}
    store.gets.reset()
    c.commit(lambda s: s, CommitRecord("nothing"))
    assert store.gets.snapshot() == {log_key(version + 2): 1}


def test_a_commit_on_the_state_just_read_sends_no_get_and_still_loses_no_race(
    tmp_path: Path,
) -> None:
    store, c, version = _read_topic(tmp_path)
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    c.commit(lambda s: create_topic(s, "u", 1, config), CommitRecord("u"), refresh=False)
    assert c.snapshot(refresh=False).version == version + 1
    assert store.gets.snapshot() == {}  # neither the commit nor the kept state read
    # Another reader commits past the state this one holds: this one's PUT of that version
    # is refused, and its change is applied again on top of the other's.
    _ingest(Catalog(LocalStore(tmp_path)), "b", 1)
    c.commit(lambda s: create_topic(s, "v", 1, config), CommitRecord("v"), refresh=False)
    fresh = Catalog(LocalStore(tmp_path)).snapshot()
    assert fresh.version == version + 3
    assert {"t", "u", "v"} <= set(fresh.topics)
    assert [f.id for f in fresh.files] == ["b"]
    history = Catalog(LocalStore(tmp_path)).history(limit=2)
    assert [e.record.kind for e in history] == ["v", "ingest"]


def test_garbage_collection_folds_old_history_into_the_newest_checkpoint(tmp_path: Path) -> None:
    clock = [1_000]
    store = LocalStore(tmp_path)
    c = Catalog(store, checkpoint_interval=3, clock=lambda: clock[0])
    _topic(c)
    for i in range(7):
        clock[0] += 1_000
        _ingest(c, f"f{i}", i % 4)
    before = c.snapshot()
    clock[0] = 6_500  # versions 1..5 are older than 1,000 ms; 6 (the newest checkpoint) too
    deleted = collect_catalog_garbage(c, grace_ms=100, history_retention_ms=1_000)
    assert deleted == [checkpoint_key(3)] + [log_key(v) for v in range(1, 6)]
    assert [e.version for e in c.history()] == [8, 7, 6]
    fresh = Catalog(LocalStore(tmp_path))
    assert fresh.snapshot() == before
    assert fresh.check_log() == []


_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=12),  # any str: quotes, escapes, non-ASCII
            st.lists(_INT64, min_size=10, max_size=10),
            st.none() | _INT64,
        ),
        max_size=30,
    ),
    st.text(max_size=8),
    _INT64,
)
def test_a_manifest_is_byte_for_byte_what_json_dumps_writes(
    rows: list[tuple[str, list[int], int | None]], file_id: str, written_ms: int
) -> None:
    """``manifest_bytes`` writes its rows in one compiled pass (``_sections.json_rows``):
    the same bytes as ``json.dumps`` with the catalog's separators, for any topic, any
    64-bit figures and a horizon or none."""
    sections = [SectionMeta(topic, *figures, horizon) for topic, figures, horizon in rows]
    expected = json.dumps(
        {
            "format": CATALOG_FORMAT,
            "id": file_id,
            "key": "data/L1/f.cf",
            "written_ms": written_ms,
            "sections": [[getattr(s, name) for name in SECTION_FIELDS] for s in sections],
        },
        separators=(",", ":"),
    ).encode()
    assert manifest_bytes(file_id, "data/L1/f.cf", written_ms, sections) == expected


@pytest.mark.parametrize(
    ("value", "reason"), [(True, "is a bool"), (1 << 63, "past 64 bits"), (1.5, "is a float")]
)
def test_a_manifest_refuses_a_figure_json_would_write_otherwise(value: object, reason: str) -> None:
    """A section's figures are 64-bit ints: anything else (which ``json.dumps`` would
    write as something else) is a TypeError, not a manifest."""
    section = SectionMeta("t", 0, 0, value, 1, 20, 7, 7, 0, 316, 90)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=reason):
        manifest_bytes("f1", "data/L1/f1.cf", 1234, [section])


def test_a_manifest_is_the_documented_json(tmp_path: Path) -> None:
    """CATALOG.md §7: an object with the file's id, key and write time, and each section
    as an array of SECTION_FIELDS in order (the delete horizon null when there is none);
    read back, the same sections."""
    store_sections = (
        SectionMeta("t", 3, 10, 19, 10, 1600, 5, 9, 2, 16, 300, 777),
        SectionMeta("ü", 0, 0, 0, 1, 20, 7, 7, 0, 316, 90),
    )
    body = manifest_bytes("f1", "data/L1/f1.cf", 1234, store_sections)
    assert json.loads(body) == {
        "format": CATALOG_FORMAT,
        "id": "f1",
        "key": "data/L1/f1.cf",
        "written_ms": 1234,
        "sections": [
            ["t", 3, 10, 19, 10, 1600, 5, 9, 2, 16, 300, 777],
            ["ü", 0, 0, 0, 1, 20, 7, 7, 0, 316, 90, None],
        ],
    }
    assert b", " not in body and b": " not in body  # compact separators
    store = LocalStore(tmp_path)
    write_manifest(store, "f1", "data/L1/f1.cf", 1234, store_sections)
    assert store.get(manifest_key("f1"))[0] == body
    assert read_manifest(store, "f1") == store_sections
