"""The planner's time rules, one hand-built catalog per rule and edge: retention drops
and rewrites, tombstones past their horizon, min lag's leftovers, and the full
compaction's "already full" skip (planner.retention, planner.tombstones, planner.full,
planner.maxlag)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_catalogs import NOW_MS, apply_job, live_file, section, snapshot, topic

from compactor.catalog import LiveFile
from compactor.catalog.changes import quarantine_file
from compactor.fileformat import SectionMeta
from compactor.planner.config import HOUR_MS, MINUTE_MS, PlannerConfig
from compactor.planner.job import Job
from compactor.planner.maxlag import dirty_files
from compactor.planner.plan import full_plan, plan, plan_notes
from compactor.planner.retention import why_not_droppable

RET = HOUR_MS
CUT = NOW_MS - RET
QUIET = PlannerConfig(full_compaction_interval_ms=1 << 50)
"""No daily compaction: each test sees only the rule it is about."""

LOGS = topic("logs", {"cleanup.policy": "delete", "retention.ms": str(RET)}, partitions=4)
KV = topic(
    "kv",
    {"cleanup.policy": "compact,delete", "retention.ms": str(RET), "delete.retention.ms": "0"},
    partitions=4,
)
FOREVER = topic("keep", {"cleanup.policy": "compact"}, partitions=4)
BY_TIME = topic(
    "bytime", {"cleanup.policy": "compact", "compaction.strategy": "timestamp"}, partitions=4
)
TOPICS = [LOGS, KV, FOREVER, BY_TIME]


def _f(
    fid: str, level: int, *sections: SectionMeta, created: int = NOW_MS - 10 * HOUR_MS
) -> LiveFile:
    return live_file(fid, level, *sections, created_ms=created)


def _plan(files: list[LiveFile], now: int = NOW_MS, **settings: int | float) -> list[Job]:
    config = PlannerConfig(full_compaction_interval_ms=1 << 50, **settings)  # type: ignore[arg-type]
    return list(plan(snapshot(TOPICS, files), now, config).jobs)


def _ids(job: Job) -> list[str]:
    return [i.id for i in job.inputs]


# --- retention: drops ---------------------------------------------------------------------


def test_wholly_expired_files_are_dropped_unread_whatever_their_level() -> None:
    files = [
        _f("a", 4, section("logs", 0, max_ts=CUT - 1, min_ts=CUT - 9)),
        _f("b", 0, section("logs", 0, max_ts=CUT - 1, min_ts=CUT - 2)),
        _f("c", 0, section("logs", 0, max_ts=CUT, min_ts=CUT)),  # exactly at the cutoff
    ]
    (job,) = [j for j in _plan(files) if j.drop]
    assert _ids(job) == ["a", "b"]
    assert (job.rule, job.output_level, job.deduplicate) == ("retention", 0, False)
    assert dict(job.numbers)["files"] == 2
    assert not [j for j in _plan(files, now=NOW_MS - 1) if j.drop and "b" in _ids(j)]


def test_an_older_file_within_retention_blocks_a_drop() -> None:
    """Retention removes partitions from their start: an expired file behind live data
    of the same partition stays (Kafka never deletes a segment before an older one)."""
    files = [
        _f("young", 0, section("logs", 1, min_ts=NOW_MS)),
        _f("old", 0, section("logs", 1, max_ts=CUT - 5, min_ts=CUT - 9)),
        _f("other", 0, section("logs", 2, max_ts=CUT - 5, min_ts=CUT - 9)),
    ]
    drops = [_ids(j) for j in _plan(files) if j.drop]
    assert drops == [["other"]]


def test_later_runs_wait_for_earlier_runs_holding_their_partitions() -> None:
    """Each drop job is safe alone: a run behind another run holding the same partition
    (split by a busy file) waits for the next plan."""
    files = [
        _f("r1", 0, section("logs", 0, min_ts=CUT - 9, max_ts=CUT - 9)),
        _f("busy", 0, section("logs", 3, min_ts=CUT - 9, max_ts=CUT - 9)),
        _f("r2", 0, section("logs", 0, min_ts=CUT - 5, max_ts=CUT - 5)),
        _f("r3", 0, section("logs", 1, min_ts=CUT - 5, max_ts=CUT - 5)),
    ]
    snap = snapshot(TOPICS, files)
    jobs = plan(snap, NOW_MS, QUIET, frozenset({"busy"})).jobs
    assert [_ids(j) for j in jobs if j.drop] == [["r1"], ["r3"]]


def test_a_file_no_job_may_read_is_still_dropped_unread_once_wholly_expired() -> None:
    """A quarantined file and one too large to compact are offered to no job that reads
    them, but a drop reads nothing: wholly past retention.ms they go, in one run with
    their expired neighbours, and stop holding back the newer files of their
    partitions. A running job's hold (busy) still keeps a file; within retention, a set
    aside file stays and blocks as before."""
    big = section("logs", 1, min_ts=CUT - 9, max_ts=CUT - 8, uncompressed=10**9)
    files = [
        _f("aside", 0, section("logs", 0, min_ts=CUT - 9, max_ts=CUT - 8)),
        _f("big", 1, big),
        _f("next", 0, section("logs", 0, min_ts=CUT - 5, max_ts=CUT - 4)),
        _f("young", 0, section("logs", 0, min_ts=NOW_MS - 5)),
        _f("after", 0, section("logs", 2, min_ts=CUT - 3, max_ts=CUT - 2)),
    ]
    config = PlannerConfig(
        full_compaction_interval_ms=1 << 50, max_partition_uncompressed_bytes=10**6
    )
    aside = quarantine_file(snapshot(TOPICS, files), "aside", "damaged", NOW_MS)
    for jobs in (plan(aside, NOW_MS, config).jobs, full_plan(aside, NOW_MS, config).jobs):
        drops = [(j.rule, _ids(j)) for j in jobs if j.drop]
        assert drops == [("retention", ["aside", "big", "next"]), ("retention", ["after"])]
        assert not any("aside" in _ids(j) or "big" in _ids(j) for j in jobs if not j.drop)
    busy = plan(aside, NOW_MS, config, frozenset({"aside"})).jobs
    assert [_ids(j) for j in busy if j.drop] == [["big"], ["after"]]  # "next" waits behind it
    young = quarantine_file(
        snapshot(TOPICS, [_f("kept", 0, section("logs", 0, min_ts=NOW_MS)), *files[2:3]]),
        "kept",
        "damaged",
        NOW_MS,
    )
    assert [_ids(j) for j in plan(young, NOW_MS, config).jobs if j.drop] == []
    notes = plan_notes(aside, NOW_MS, config)
    assert "1 quarantined file set aside, taken by no job but retention's unread drop" in (
        " ".join(notes)
    )


def _partitions(f: LiveFile) -> set[tuple[str, int]]:
    return {(s.topic, p) for s in f.topics for lo, hi in s.partitions for p in range(lo, hi + 1)}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_drops_take_every_file_that_may_go_readable_or_not(data: st.DataObject) -> None:
    """Random sequences of delete-topic files, wholly expired or not, some quarantined,
    too large or busy. Each plan's drops are safe (no busy input; each passes the
    commit's own check, ``why_not_droppable``; no other job holds an unreadable file),
    and planning and dropping until nothing changes leaves no wholly expired file that
    is not busy unless an older file that stays holds one of its partitions: quarantine
    and size make no difference to a drop."""
    n = data.draw(st.integers(1, 10))
    files = []
    for i in range(n):
        parts = sorted(data.draw(st.sets(st.integers(0, 3), min_size=1, max_size=3)))
        ts = data.draw(st.sampled_from([CUT - 2 * HOUR_MS, CUT - 1, NOW_MS - 5]))
        size = data.draw(st.sampled_from([1000, 10**9]))  # 10**9: too large below
        sections = [section("logs", p, min_ts=ts - 9, max_ts=ts, uncompressed=size) for p in parts]
        files.append(_f(f"f{i:02d}", data.draw(st.integers(0, 4)), *sections))
    ids = [f.id for f in files]
    snap = snapshot(TOPICS, files)
    for fid in data.draw(st.sets(st.sampled_from(ids))):
        snap = quarantine_file(snap, fid, "damaged", NOW_MS)
    busy = frozenset(data.draw(st.sets(st.sampled_from(ids))))
    config = PlannerConfig(
        full_compaction_interval_ms=1 << 50, max_partition_uncompressed_bytes=10**6
    )
    unreadable = set(snap.quarantined) | {f.id for f in files if f.max_section_bytes > 10**6}
    for _round in range(n + 1):
        planned = plan(snap, NOW_MS, config, busy).jobs
        for job in (*planned, *full_plan(snap, NOW_MS, config, busy).jobs):
            held = [i.id for i in job.inputs]
            assert not busy & set(held), job
            if job.drop:
                assert why_not_droppable(snap, NOW_MS, held) is None, job
            else:
                assert not unreadable & set(held), job
        drops = [j for j in planned if j.drop]
        if not drops:
            break
        for job in drops:
            snap = apply_job(snap, job, NOW_MS)
    assert set(snap.quarantined) <= {f.id for f in snap.files}
    stays: list[LiveFile] = []
    for f in snap.files:
        expired = all(s.max_timestamp < CUT for s in f.topics)
        if expired and f.id not in busy:
            older = {tp for g in stays for tp in _partitions(g)}
            assert older & _partitions(f), f"{f.id} may go, and stays"
        stays.append(f)


def test_a_file_with_any_topic_within_retention_is_not_dropped() -> None:
    files = [_f("mixed", 0, section("logs", 0, min_ts=CUT - 9, max_ts=CUT - 9), section("keep", 0))]
    jobs = _plan(files)
    assert [j.drop for j in jobs] == [False]
    assert jobs[0].rule == "retention" and jobs[0].output_level == 1


# --- retention: rewrites ------------------------------------------------------------------


def test_a_file_with_some_expired_sections_is_rewritten_when_worth_it() -> None:
    """The expired share, estimated from the summaries: here the logs section (three
    quarters of the bytes) is wholly past retention, the other topic is kept forever."""
    expired = section("logs", 0, min_ts=CUT - 1, max_ts=CUT - 1, uncompressed=3000)
    kept = section("keep", 1, uncompressed=1000)
    (job,) = _plan([_f("l0", 0, expired, kept)])
    assert (job.rule, job.output_level, job.deduplicate, job.drop) == ("retention", 1, False, False)
    assert dict(job.numbers)["expired_share"] == 0.75
    assert "retention.min.expired.ratio" in job.reason
    # Half of a kv file's time span has expired, but all of it will within the delay: it
    # is left to be dropped unread.
    half = section("kv", 0, min_ts=CUT - 20 * MINUTE_MS, max_ts=CUT + 20 * MINUTE_MS)
    assert _plan([_f("soon", 4, half)]) == []
    assert _plan([_f("soon", 4, half)], retention_max_delay_ms=20 * MINUTE_MS)[0].rule == (
        "retention"
    )
    # A sliver expired: under the ratio, so it waits for retention.max.delay.ms.
    small = section("kv", 0, min_ts=CUT - 5, max_ts=CUT - 1)
    big = section("kv", 1, min_ts=CUT - 5, max_ts=NOW_MS)
    f = _f("l4b", 4, small, big)
    assert _plan([f]) == []
    # Its oldest record expired at NOW - 5: due an hour later (the ratio set out of reach,
    # as the clock moving on expires more of it).
    assert _plan([f], now=NOW_MS - 5 + HOUR_MS - 1, retention_min_expired_ratio=1.0) == []
    (late,) = _plan([f], now=NOW_MS - 5 + HOUR_MS, retention_min_expired_ratio=1.0)
    assert "retention.max.delay.ms" in late.reason
    assert _plan([f], retention_max_delay_ms=0)[0].rule == "retention"


def test_a_rewrite_waits_while_an_older_file_holds_the_partition() -> None:
    older = _f("older", 4, section("kv", 0, min_ts=NOW_MS - 5, max_ts=NOW_MS))
    f = _f(
        "f",
        4,
        section("kv", 0, max_ts=CUT - 1, min_ts=CUT - 5),
        section("kv", 1, min_ts=NOW_MS),
    )
    assert [j for j in _plan([older, f], retention_max_delay_ms=0) if j.rule == "retention"] == []


def test_a_file_written_after_its_oldest_record_expired_is_not_rewritten_for_it() -> None:
    """Records past retention inside a younger section may sit behind a younger record;
    the job that wrote the file had its chance, so the planner does not loop on it."""
    s = section("kv", 0, min_ts=CUT - 10, max_ts=NOW_MS)
    assert _plan([_f("before", 4, s, created=CUT - 20 + RET)], retention_max_delay_ms=0)
    assert _plan([_f("after", 4, s, created=NOW_MS)], retention_max_delay_ms=0) == []


def test_retention_comes_before_size_rules() -> None:
    files = [
        _f(f"l0-{i}", 0, section("logs", 0, min_ts=CUT - 1, max_ts=CUT - 1)) for i in range(40)
    ]
    jobs = _plan(files)
    assert [j.rule for j in jobs] == ["retention"] and len(jobs[0].inputs) == 40


# --- tombstones -----------------------------------------------------------------------------


def _tomb(topic_name: str, partition: int, horizon: int) -> SectionMeta:
    return section(topic_name, partition, tombstones=1, min_delete_horizon=horizon)


def test_tombstones_past_their_horizon_take_the_partitions_oldest_data() -> None:
    files = [
        _f("oldest", 4, section("keep", 0)),
        _f("between", 2, section("keep", 3)),
        _f("tomb", 2, _tomb("keep", 0, NOW_MS - 20 * MINUTE_MS)),
        _f("after", 0, section("keep", 0)),
    ]
    (job,) = _plan(files)
    assert (job.rule, _ids(job), job.deduplicate, job.output_level) == (
        "tombstones",
        ["oldest", "between", "tomb"],
        True,
        4,
    )
    # Before the horizon, and within tombstone.buffer.ms after it: nothing.
    assert _plan(files, now=NOW_MS - 20 * MINUTE_MS - 1) == []
    assert _plan(files, now=NOW_MS - 5 * MINUTE_MS - 1) == []
    assert [j.rule for j in _plan(files, now=NOW_MS - 5 * MINUTE_MS)] == ["tombstones"]


def test_tombstones_under_the_timestamp_strategy_take_the_newest_data_too() -> None:
    files = [
        _f("oldest", 4, section("bytime", 1)),
        _f("tomb", 2, _tomb("bytime", 1, NOW_MS - HOUR_MS)),
        _f("newest", 0, section("bytime", 1)),
        _f("unrelated", 0, section("bytime", 2)),
    ]
    (job,) = _plan(files)
    assert _ids(job) == ["oldest", "tomb", "newest"]


def test_a_busy_file_in_the_span_makes_the_tombstones_wait() -> None:
    files = [
        _f("oldest", 4, section("keep", 0)),
        _f("tomb", 2, _tomb("keep", 0, NOW_MS - HOUR_MS)),
    ]
    snap = snapshot(TOPICS, files)
    assert plan(snap, NOW_MS, QUIET, frozenset({"oldest"})).jobs == ()
    notes = plan_notes(snap, NOW_MS, QUIET)
    assert any(n.startswith("tombstones: 1 file topics") for n in notes)


# --- min.compaction.lag.ms and max.compaction.lag.ms ------------------------------------------


def test_records_left_young_by_a_compaction_become_dirty_once_old_enough() -> None:
    t = topic(
        "lag",
        {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(HOUR_MS),
            "max.compaction.lag.ms": str(2 * HOUR_MS),
        },
    )
    written = NOW_MS - 10 * HOUR_MS
    young = section("lag", 0, min_ts=written - 5 * HOUR_MS, max_ts=written - 30 * MINUTE_MS)
    all_old = section("lag", 0, min_ts=written - 5 * HOUR_MS, max_ts=written - HOUR_MS)
    f = live_file("young", 4, young, created_ms=written)
    g = live_file("old", 4, all_old, created_ms=written)
    snap = snapshot([t], [f, g])
    # The young records (written - 1 h, written - 30 min] are dirty once they pass both lags.
    assert dirty_files(snap, NOW_MS) == {"young": written - HOUR_MS + 1 + 2 * HOUR_MS}
    assert dirty_files(snapshot([t], [f]), written + HOUR_MS) == {}


# --- compact --full -------------------------------------------------------------------------


def test_full_skips_an_already_full_file_only_without_due_work() -> None:
    clean = _f("clean", 4, section("keep", 0), created=NOW_MS)
    assert full_plan(snapshot(TOPICS, [clean]), NOW_MS).jobs == ()
    tomb = _f("tomb", 4, _tomb("keep", 0, NOW_MS), created=NOW_MS - 1)
    (job,) = full_plan(snapshot(TOPICS, [tomb]), NOW_MS).jobs
    assert job.rule == "full"
    assert full_plan(snapshot(TOPICS, [tomb]), NOW_MS - 1).jobs == ()
    partly = _f("partly", 4, section("kv", 0, min_ts=CUT - 1, max_ts=NOW_MS), created=CUT)
    assert [j.rule for j in full_plan(snapshot(TOPICS, [partly]), NOW_MS).jobs] == ["full"]


def test_full_drops_expired_files_unread_and_compacts_the_rest() -> None:
    files = [
        _f("gone", 4, section("logs", 0, min_ts=CUT - 1, max_ts=CUT - 1)),
        _f("kept", 0, section("keep", 0)),
    ]
    jobs = full_plan(snapshot(TOPICS, files), NOW_MS).jobs
    assert [(j.rule, j.drop, _ids(j)) for j in jobs] == [
        ("retention", True, ["gone"]),
        ("full", False, ["kept"]),
    ]


def test_full_skips_a_top_level_file_whose_due_work_an_older_file_outside_it_blocks() -> None:
    """A tombstone past its horizon in an L4 file is work for ``--full`` only where the
    job would hold the partition's oldest data. Behind an older file no job may take (set
    aside here), the rewrite could drop nothing: it is not planned, rather than copying
    the file at every run. Where the older file misses a partition, or is released, it is."""
    older = _f("older", 0, section("keep", 0), section("keep", 1))
    tomb = _f("tomb", 4, _tomb("keep", 0, NOW_MS), _tomb("keep", 1, NOW_MS), created=NOW_MS - 1)
    aside = quarantine_file(snapshot(TOPICS, [older, tomb]), "older", "damaged", NOW_MS)
    assert full_plan(aside, NOW_MS).jobs == ()
    free = snapshot(TOPICS, [older, tomb])
    assert [_ids(j) for j in full_plan(free, NOW_MS).jobs] == [["older", "tomb"]]
    wider = _f("wider", 4, _tomb("keep", 0, NOW_MS), _tomb("keep", 2, NOW_MS), created=NOW_MS - 1)
    aside = quarantine_file(snapshot(TOPICS, [older, wider]), "older", "damaged", NOW_MS)
    assert [_ids(j) for j in full_plan(aside, NOW_MS).jobs] == [["wider"]]  # partition 2's
    # Under the timestamp strategy a tombstone needs the newest data too: a newer file
    # set aside blocks it as well.
    last = _f("last", 4, _tomb("bytime", 0, NOW_MS), created=NOW_MS - 1)
    newer = _f("newer", 0, section("bytime", 0))
    aside = quarantine_file(snapshot(TOPICS, [last, newer]), "newer", "damaged", NOW_MS)
    assert full_plan(aside, NOW_MS).jobs == ()
    first = _f("first", 4, _tomb("keep", 0, NOW_MS), created=NOW_MS - 1)
    newer = _f("newer", 0, section("keep", 0))
    aside = quarantine_file(snapshot(TOPICS, [first, newer]), "newer", "damaged", NOW_MS)
    assert [_ids(j) for j in full_plan(aside, NOW_MS).jobs] == [["first"]]  # offset: oldest


def test_full_skips_a_top_level_file_whose_expired_records_an_older_file_shields() -> None:
    older = _f("older", 0, section("kv", 0))
    partly = _f("partly", 4, section("kv", 0, min_ts=CUT - 1, max_ts=NOW_MS), created=CUT)
    aside = quarantine_file(snapshot(TOPICS, [older, partly]), "older", "damaged", NOW_MS)
    assert full_plan(aside, NOW_MS).jobs == ()
    free = snapshot(TOPICS, [older, partly])
    assert [_ids(j) for j in full_plan(free, NOW_MS).jobs] == [["older", "partly"]]


def test_full_counts_a_file_the_same_plan_drops_as_gone() -> None:
    """The drops of a plan run before its full compaction: a wholly expired older file
    about to be dropped does not shield a top-level file's expired records."""
    gone = _f("gone", 1, section("kv", 0, min_ts=CUT - 9, max_ts=CUT - 1))
    partly = _f("partly", 4, section("kv", 0, min_ts=CUT - 1, max_ts=NOW_MS), created=CUT)
    jobs = full_plan(snapshot(TOPICS, [gone, partly]), NOW_MS).jobs
    assert [(j.rule, j.drop, _ids(j)) for j in jobs] == [
        ("retention", True, ["gone"]),
        ("full", False, ["partly"]),
    ]
    daily = plan(snapshot(TOPICS, [gone, partly], last_full_compaction_ms=0), NOW_MS).jobs
    assert [(j.rule, _ids(j)) for j in daily] == [("retention", ["gone"]), ("daily", ["partly"])]
