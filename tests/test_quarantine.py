"""A damaged live file set aside (``compactor catalog quarantine``), and given back.

One file that cannot be read fails every job that takes it, and at L0 the planner's job
always takes the oldest run: without a way to set it aside, the compaction of every
partition stops behind it. These tests hold the catalog change (pure), its log entry and
checkpoint, and the commands end to end on a local store: the damaged file fails a job
and changes nothing, is set aside, the files after it are compacted without it and lose
nothing, a job planned before cannot commit over it, and a release gives it back.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from clirunner import one_line, run_cli
from planner_catalogs import NOW_MS, FileMaker, compacted, snapshot
from worker_scenarios import add_file, make_topics

from compactor.catalog import Catalog, CatalogError, CommitConflict, LiveFile, Snapshot
from compactor.catalog.changes import (
    Quarantined,
    quarantine_file,
    release_file,
    replace_files,
)
from compactor.catalog.codec import state_from_json, state_to_json
from compactor.catalog.delta import Delta, apply, delta_from_json, delta_to_json, diff
from compactor.catalog.leases import JobLeases, LeaseKeeper, renew_lease, take_lease
from compactor.catalog.quarantine import file_damage
from compactor.catalog.snapshot import Quarantine
from compactor.fileformat import FormatError, Record
from compactor.objectstore import LocalStore
from compactor.planner.plan import full_plan, plan

NOW = NOW_MS


def _snap(n: int = 5) -> tuple[Snapshot, list[LiveFile]]:
    files = FileMaker("c").many(n, level=0)
    return snapshot([compacted("c")], files), files


def test_a_quarantine_is_set_kept_and_released() -> None:
    snap, files = _snap()
    aside = quarantine_file(snap, files[2].id, "checksum mismatch", NOW)
    assert aside.quarantined == {files[2].id: Quarantine(files[2].id, "checksum mismatch", NOW)}
    assert aside.files == snap.files  # nothing else changes: its records stay live
    with pytest.raises(CatalogError, match="quarantined already: checksum mismatch"):
        quarantine_file(aside, files[2].id, "again", NOW + 1)
    with pytest.raises(CatalogError, match="is not live"):
        quarantine_file(snap, "nope", "x", NOW)
    with pytest.raises(CatalogError, match="is not quarantined"):
        release_file(snap, files[2].id)
    assert release_file(aside, files[2].id).quarantined == {}


def test_no_job_replaces_or_leases_a_quarantined_file() -> None:
    snap, files = _snap()
    aside = quarantine_file(snap, files[1].id, "truncated", NOW)
    ids = [f.id for f in files[:3]]
    with pytest.raises(Quarantined, match=f"input file {files[1].id} is quarantined: truncated"):
        replace_files(aside, ids, [], NOW)
    assert isinstance(Quarantined("x"), CommitConflict)  # a job planned before is stale
    with pytest.raises(Quarantined):
        take_lease(aside, "job-1", "me", ids, NOW, 60_000)
    replace_files(snap, ids, [], NOW)  # the same run, not set aside, is replaced
    replace_files(aside, [f.id for f in files[2:]], [], NOW)  # and the run after it


def test_the_planner_compacts_around_a_quarantined_file() -> None:
    snap, files = _snap(40)
    for at, expected in ((0, [f.id for f in files[1:33]]), (9, [])):
        aside = quarantine_file(snap, files[at].id, "damaged", NOW)
        jobs = plan(aside, NOW).jobs
        assert [[i.id for i in j.inputs] for j in jobs] == ([expected] if expected else [])
    # the daily (full) compaction takes the runs on either side of it
    aside = quarantine_file(snap, files[9].id, "damaged", NOW)
    runs = [[i.id for i in j.inputs] for j in full_plan(aside, NOW).jobs]
    assert runs == [[f.id for f in files[:9]], [f.id for f in files[10:]]]


def test_a_quarantine_ends_with_its_file() -> None:
    """A writer that predates quarantines may replace a quarantined file: its delta
    removes the file and says nothing of the quarantine, which ends with the file, so
    every quarantined file is live."""
    snap, files = _snap()
    aside = quarantine_file(snap, files[0].id, "damaged", NOW)
    older_writers = Delta(removed_files=(files[0].id,))  # no quarantine_removed
    after = apply(aside, older_writers, aside.version + 1)
    assert after.quarantined == {}
    assert [f.id for f in after.files] == [f.id for f in files[1:]]


def test_only_a_drop_that_reads_nothing_may_lease_and_replace_a_quarantined_file() -> None:
    """Retention's drop is decided on the catalog's summaries, never on the objects: it
    may lease (and renew) and replace a run holding a quarantined file, and the quarantine
    ends with the file, in the snapshot, its delta and its checkpoint alike."""
    snap, files = _snap()
    aside = quarantine_file(snap, files[1].id, "truncated", NOW)
    ids = [f.id for f in files[:3]]
    leased = take_lease(aside, "drop-1", "me", ids, NOW, 60_000, unread=True)
    renewed = renew_lease(leased, "drop-1", "me", NOW + 1, 60_000, unread=True)
    with pytest.raises(Quarantined):  # a job that reads its inputs may not renew over it
        renew_lease(leased, "drop-1", "me", NOW + 1, 60_000)
    with pytest.raises(Quarantined):
        replace_files(renewed, ids, [], NOW, job_id="drop-1")
    dropped = replace_files(renewed, ids, [], NOW, job_id="drop-1", unread=True)
    assert [f.id for f in dropped.files] == [f.id for f in files[3:]]
    assert dropped.quarantined == {} and dropped.leases == {}
    d = diff(renewed, dropped)
    assert d.quarantine_removed == (files[1].id,)
    again = delta_from_json(json.loads(json.dumps(delta_to_json(d))))
    assert apply(renewed, again, renewed.version + 1) == dataclasses.replace(
        dropped, version=renewed.version + 1
    )
    assert "quarantined" not in state_to_json(dropped, NOW)


def test_a_drops_lease_keeper_renews_over_a_quarantined_file(tmp_path: Path) -> None:
    """``replay --execute`` and a Spark task guard a job with a ``LeaseKeeper``: a drop's
    renews its lease over a quarantined input, any other job's stops there."""
    store = LocalStore(tmp_path)
    catalog = Catalog(store)
    make_topics(catalog, {"c": (1, {"cleanup.policy": "compact"})})
    for i in range(2):
        add_file(store, catalog, f"f{i}", {("c", 0): [Record(i, NOW, b"k", b"v")]})
    ids = [f.id for f in catalog.snapshot().files]
    catalog.commit(lambda s: quarantine_file(s, ids[0], "damaged", NOW))
    leases = JobLeases(catalog, "me")
    leases.take("drop-1", ids, 3, unread=True)
    for unread in (True, False):
        keeper = LeaseKeeper(leases, "drop-1", 3, unread=unread)
        time.sleep(0.01)  # past a third of the lease: the keeper renews
        if unread:
            before = catalog.snapshot().leases["drop-1"].expires_ms
            keeper()
            renewed = catalog.snapshot().leases["drop-1"]
            assert renewed.inputs == tuple(ids) and renewed.expires_ms > before
        else:
            with pytest.raises(Quarantined):
                keeper()


def test_a_quarantine_travels_in_deltas_and_checkpoints_and_costs_no_bytes_without_one() -> None:
    snap, files = _snap()
    aside = quarantine_file(snap, files[0].id, "bad frame", NOW)
    set_delta = diff(snap, aside)
    assert set_delta.quarantine_set == (Quarantine(files[0].id, "bad frame", NOW),)
    released = release_file(aside, files[0].id)
    release_delta = diff(aside, released)
    assert release_delta.quarantine_removed == (files[0].id,)
    for old, new, d in ((snap, aside, set_delta), (aside, released, release_delta)):
        again = delta_from_json(json.loads(json.dumps(delta_to_json(d))))
        assert again == d
        assert apply(old, again, old.version + 1) == dataclasses.replace(
            new, version=old.version + 1
        )
    state = state_from_json(json.loads(json.dumps(state_to_json(aside, NOW))))
    assert state.quarantined == aside.quarantined
    # a store that never quarantined a file writes exactly the keys it always wrote
    assert "quarantined" not in state_to_json(snap, NOW)
    plain = delta_to_json(diff(snap, replace_files(snap, [files[0].id], [], NOW)))
    assert not {"quarantine_set", "quarantine_removed"} & set(plain)
    assert Delta().empty and not diff(aside, aside).quarantine_set


def _ingest(store: Path, files: int) -> None:
    run_cli("--store", str(store), "topic", "create", "t", "--partitions", "4")
    for i in range(files):
        lines = "".join(
            json.dumps({"topic": "t", "partition": k % 4, "key": f"k{k % 20}", "value": f"v{i}"})
            + "\n"
            for k in range(50)
        )
        assert run_cli("--store", str(store), "ingest", "-", stdin=lines.encode()).code == 0


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_l0_file_set_aside_lets_compaction_go_on_and_loses_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s"
    _ingest(store, 40)
    cli = ("--store", str(store))
    catalog = Catalog(LocalStore(str(store)))
    before = catalog.snapshot()
    damaged = before.files[0]  # the oldest: every L0 job takes it
    _flip(store / damaged.key)
    damaged_bytes = (store / damaged.key).read_bytes()

    # without the quarantine, the job fails on it and changes nothing
    line = one_line(run_cli(*cli, "compact"), 6)
    assert damaged.key in line
    assert catalog.snapshot().version == before.version
    planned = run_cli(*cli, "plan", "--json")
    job_doc = tmp_path / "job.json"
    job_doc.write_text(json.dumps(json.loads(planned.out)["jobs"][0]))

    aside = run_cli(*cli, "catalog", "quarantine", damaged.key, "--reason", "flipped byte")
    assert aside.code == 0, aside
    shown = json.loads(aside.out)
    assert shown.pop("since_ms") > 0
    assert shown == {"quarantined": damaged.id, "key": damaged.key, "reason": "flipped byte"}
    assert "set aside: " + damaged.key + " (flipped byte)" in run_cli(*cli, "history").out
    listed = json.loads(run_cli(*cli, "catalog", "quarantined", "--json").out)
    assert [(q["file"], q["key"], q["level"], q["reason"]) for q in listed] == [
        (damaged.id, damaged.key, 0, "flipped byte")
    ]
    assert "1 quarantined file set aside" in run_cli(*cli, "plan").out

    # a job planned before it was set aside is stale: it neither runs nor commits
    replayed = run_cli(*cli, "replay", str(job_doc), "--execute")
    assert "stale" in replayed.out + replayed.err, replayed
    assert "is quarantined: flipped byte" in replayed.out + replayed.err, replayed
    version = catalog.snapshot().version

    # the run after it is compacted, and every record stays live
    done = run_cli(*cli, "compact")
    assert done.code == 0, done
    after = catalog.snapshot()
    assert after.version > version
    assert [f.id for f in after.files if f.level == 0][0] == damaged.id
    assert sum(f.record_count for f in after.files) == sum(f.record_count for f in before.files)
    compaction = [e for e in catalog.history(None) if e.record.kind == "compaction"]
    assert len(compaction) == 1
    assert damaged.id not in compaction[0].record.details["inputs"]
    assert (store / damaged.key).read_bytes() == damaged_bytes

    # mistakes are one line each, and change nothing
    version = catalog.snapshot().version
    one_line(run_cli(*cli, "catalog", "quarantine", damaged.id), 4, "quarantined already")
    one_line(run_cli(*cli, "catalog", "quarantine", "data/L0/nope.cf"), 4, "no live file")
    one_line(run_cli(*cli, "catalog", "release", after.files[-1].id), 4, "is not quarantined")
    for reason, words in (("", "is empty"), ("  ", "is empty"), ("a\nb", "control character"),
                          ("x" * 501, "longer than 500 characters")):  # fmt: skip
        line = one_line(
            run_cli(*cli, "catalog", "quarantine", after.files[-1].id, "--reason", reason), 2
        )
        assert words in line and len(line) < 200, line
    assert catalog.snapshot().version == version

    # released, the planner offers it again: a full compaction takes it, and fails on it
    released = run_cli(*cli, "catalog", "release", damaged.id)
    assert released.code == 0 and json.loads(released.out)["released"] == damaged.id
    assert catalog.snapshot().quarantined == {}
    assert json.loads(run_cli(*cli, "catalog", "quarantined", "--json").out) == []
    one_line(run_cli(*cli, "compact", "--full"), 6, damaged.key)
    kinds = [e.record.kind for e in catalog.history(3)]
    assert kinds[0] == "quarantine"


@pytest.mark.parametrize("how", ["compact", "replay"])
def test_a_quarantined_file_wholly_past_retention_is_dropped_unread(
    tmp_path: Path, how: str
) -> None:
    """A damaged file set aside still expires: retention's drop reads nothing, so once
    every record in it is past retention.ms it leaves the catalog with its expired
    neighbours, and its quarantine ends with it. Before that, nothing takes it."""
    t, hour = 1_700_000_000_000, 3_600_000
    store = tmp_path / "s"
    cli = ("--store", str(store))

    def ok(now: int, *args: str, stdin: bytes | None = None) -> str:
        r = run_cli(*cli, "--now-ms", str(now), *args, stdin=stdin)
        assert r.code == 0 and "Traceback" not in r.err, r
        return r.out

    retention = ("--config", "cleanup.policy=delete", "--config", f"retention.ms={hour}")
    ok(t, "topic", "create", "logs", "--partitions", "2", *retention)

    def ingest(now: int, tag: str) -> str:
        lines = "".join(
            json.dumps({"topic": "logs", "partition": p, "key": f"k{p}", "value": tag}) + "\n"
            for p in range(2)
        )
        (key,) = json.loads(ok(now, "ingest", "-", stdin=lines.encode()))["files"]
        return str(key)

    damaged_key, old_key = ingest(t, "a"), ingest(t + 1, "b")
    _flip(store / damaged_key)
    damaged_bytes = (store / damaged_key).read_bytes()
    ok(t + 2, "catalog", "quarantine", damaged_key, "--reason", "flipped byte")
    young_key = ingest(t + 2 * hour, "c")
    catalog = Catalog(LocalStore(str(store)))
    ids = {f.key: f.id for f in catalog.snapshot().files}

    # within retention.ms no job takes it
    assert json.loads(ok(t + hour - 1, "plan", "--json"))["jobs"] == []
    # wholly past it, one drop takes it with its neighbour, reading neither
    (job,) = json.loads(ok(t + 2 * hour, "plan", "--json"))["jobs"]
    assert (job["rule"], [i["key"] for i in job["inputs"]]) == ("retention", [damaged_key, old_key])
    if how == "replay":
        doc = tmp_path / "job.json"
        doc.write_text(json.dumps(job))
        ok(t + 2 * hour, "replay", str(doc), "--execute")
    else:
        ok(t + 2 * hour, "compact")
    after = catalog.snapshot()
    assert [f.key for f in after.files] == [young_key]
    assert after.quarantined == {}
    assert json.loads(ok(t + 2 * hour, "catalog", "quarantined", "--json")) == []
    (drop,) = [e for e in catalog.history(None) if e.record.kind == "compaction"]
    assert drop.record.details["inputs"] == [ids[damaged_key], ids[old_key]]
    assert damaged_key in {g.key for g in after.garbage}
    assert (store / damaged_key).read_bytes() == damaged_bytes  # never rewritten
    for p in range(2):
        dumped = ok(t + 2 * hour, "dump", "--topic", "logs", "--partition", str(p))
        assert [json.loads(x)["value"] for x in dumped.splitlines()] == ["c"]


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_worker_quarantine_after_takes_a_positive_count(tmp_path: Path, value: str) -> None:
    """``worker --quarantine-after`` is a count of deliveries: refused where the command
    line is read, before any store or queue is touched."""
    store = tmp_path / "store"
    args = ("worker", "--queue-url", "http://127.0.0.1:1/q", "--quarantine-after", value)
    one_line(run_cli("--store", str(store), *args), 2, "argument --quarantine-after")
    assert not store.exists()


def test_a_version_this_build_cannot_read_is_never_confirmed_as_damage(tmp_path: Path) -> None:
    """``file_damage`` confirms what is wrong with a file's bytes, not what this reader
    cannot read: a file of a newer format version (an upgrade rolling out) passes its
    FormatError on, so no worker sets a healthy file aside; a flipped byte is damage."""
    store = LocalStore(tmp_path)
    catalog = Catalog(store)
    make_topics(catalog, {"c": (2, {"cleanup.policy": "compact"})})
    records = {("c", p): [Record(j, NOW, b"k%d" % j, b"v") for j in range(5)] for p in range(2)}
    live = add_file(store, catalog, "f0", records)
    assert file_damage(store, live) is None
    raw = bytearray(store.get(live.key)[0])
    newer = bytes(raw[:8]) + (99).to_bytes(4, "little") + bytes(raw[12:])
    store.put(live.key, newer)
    with pytest.raises(FormatError, match="unsupported format version 99"):
        file_damage(store, live)
    raw[len(raw) // 2] ^= 0xFF
    store.put(live.key, bytes(raw))
    assert "checksum mismatch" in str(file_damage(store, live))
