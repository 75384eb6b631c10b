"""The planner's rules, one small hand-built catalog per rule and edge
(docs/ARCHITECTURE.md §3.3)."""

from __future__ import annotations

import pytest
from planner_catalogs import (
    DAY_MS,
    NOW_MS,
    FileMaker,
    apply_job,
    compacted,
    live_file,
    plain,
    section,
    snapshot,
    topic,
)

from compactor.catalog import ConfigError, LiveFile, Snapshot
from compactor.catalog.changes import append_files, create_topic, replace_files
from compactor.catalog.config import TopicConfig
from compactor.planner.config import HOUR_MS, MINUTE_MS, GiB, PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.maxlag import dirty_files
from compactor.planner.plan import Plan, plan, plan_notes

C = compacted("c")
P = plain("p")


def _plan(
    files: list[LiveFile],
    now: int = NOW_MS,
    busy: frozenset[str] = frozenset(),
    config: PlannerConfig | None = None,
) -> Plan:
    return plan(snapshot([C, P], files), now, config, busy)


def _ids(job: Job) -> list[str]:
    return [i.id for i in job.inputs]


# --- level rules ----------------------------------------------------------------------


def test_31_l0_files_wait_32_make_one_copy_job() -> None:
    make = FileMaker()
    files = make.many(31)
    assert _plan(files).jobs == ()
    files.append(make())
    (job,) = _plan(files).jobs
    assert job.rule == "L0->L1"
    assert _ids(job) == [f.id for f in files]
    assert job.output_level == 1
    assert job.deduplicate is False


def test_70_l0_files_make_two_jobs_of_32_oldest_first() -> None:
    files = FileMaker().many(70)
    jobs = _plan(files).jobs
    assert [j.rule for j in jobs] == ["L0->L1", "L0->L1"]
    assert _ids(jobs[0]) == [f.id for f in files[:32]]
    assert _ids(jobs[1]) == [f.id for f in files[32:64]]
    taken = {i for j in jobs for i in _ids(j)}
    assert [f.id for f in files if f.id not in taken] == [f.id for f in files[64:]]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels_above_l0_move_up_and_deduplicate(level: int) -> None:
    make = FileMaker()
    files = make.many(32, level=level)
    (job,) = _plan(files).jobs
    assert job.rule == f"L{level}->L{level + 1}"
    assert job.output_level == level + 1
    assert job.deduplicate is True
    assert len(job.inputs) == 32


def test_l4_is_the_top_no_level_rule_above_it() -> None:
    # 40 L4 files of very different sizes: no level job, no top run
    make = FileMaker()
    files = [make(MAX_LEVEL, size=1000 * 3**i) for i in range(40)]
    assert _plan(files).jobs == ()


def test_a_busy_file_breaks_a_run() -> None:
    make = FileMaker()
    files = make.many(40)
    busy = frozenset({files[20].id})
    assert _plan(files, busy=busy).jobs == ()  # runs of 20 and 19
    files += make.many(24)  # the run after the busy file is now 43 long
    (job,) = _plan(files, busy=busy).jobs
    assert _ids(job) == [f.id for f in files[21:53]]
    # without the busy file, the oldest 32 are taken
    jobs = _plan(files).jobs
    assert _ids(jobs[0]) == [f.id for f in files[:32]]


def test_busy_files_are_never_in_a_job() -> None:
    make = FileMaker()
    files = make.many(64)
    busy = frozenset(f.id for f in files[:32])
    (job,) = _plan(files, busy=busy).jobs
    assert not busy & set(_ids(job))


def test_files_of_another_level_break_a_run() -> None:
    make = FileMaker()
    files = make.many(16) + [make(1)] + make.many(16)
    assert _plan(files).jobs == ()


# --- top-level runs ---------------------------------------------------------------------


def test_ten_similar_top_level_files_make_a_top_run() -> None:
    make = FileMaker()
    files = [make(MAX_LEVEL, size=GiB + i * 10_000_000) for i in range(10)]
    (job,) = _plan(files).jobs
    assert job.rule == "top-run"
    assert _ids(job) == [f.id for f in files]
    assert job.output_level == MAX_LEVEL
    assert job.deduplicate is True


def test_nine_similar_top_level_files_wait() -> None:
    make = FileMaker()
    assert _plan([make(MAX_LEVEL, size=GiB) for _ in range(9)]).jobs == ()


def test_top_run_size_ratio_bound_is_inclusive() -> None:
    make = FileMaker()
    sizes = [1000, 2000] * 5
    (job,) = _plan([make(MAX_LEVEL, size=s) for s in sizes]).jobs
    assert job.numbers and dict(job.numbers)["size_ratio"] == 2.0
    make = FileMaker()
    sizes = [1000, 2001] * 5
    assert _plan([make(MAX_LEVEL, size=s) for s in sizes]).jobs == ()


def test_a_very_different_size_in_the_middle_is_not_compacted_across() -> None:
    make = FileMaker()
    sizes = [GiB] * 5 + [100 * GiB] + [GiB] * 5
    assert _plan([make(MAX_LEVEL, size=s) for s in sizes]).jobs == ()
    # with ten similar files on each side, one job on each side, neither spanning it
    make = FileMaker()
    files = [make(MAX_LEVEL, size=s) for s in [GiB] * 10 + [100 * GiB] + [GiB] * 10]
    jobs = _plan(files).jobs
    assert [_ids(j) for j in jobs] == [
        [f.id for f in files[:10]],
        [f.id for f in files[11:]],
    ]


def test_top_run_similarity_is_judged_per_output_group() -> None:
    # ten plain files of similar size and one huge compacted file among them: the
    # compacted file does not make the plain ones dissimilar
    make = FileMaker("p")
    files = [make(MAX_LEVEL, size=GiB) for _ in range(5)]
    files.append(make(MAX_LEVEL, size=100 * GiB, topic_name="c"))
    files += [make(MAX_LEVEL, size=GiB) for _ in range(5)]
    (job,) = _plan(files).jobs
    assert _ids(job) == [f.id for f in files]


def test_top_run_takes_at_most_max_files() -> None:
    make = FileMaker()
    files = [make(MAX_LEVEL, size=GiB) for _ in range(40)]
    (job,) = _plan(files).jobs  # 8 left over, under the 10 a run needs
    assert _ids(job) == [f.id for f in files[:32]]


# --- too-large partitions ---------------------------------------------------------------


def test_a_file_with_a_too_large_section_splits_runs_and_is_never_compacted() -> None:
    make = FileMaker()
    huge = make(uncompressed=128 * GiB + 1)
    files = make.many(20) + [huge] + make.many(20)
    assert _plan(files).jobs == ()
    # exactly at the cap is still compactable
    at_cap = make(uncompressed=128 * GiB)
    files2 = make.many(20) + [at_cap] + make.many(11)
    (job,) = _plan(files2).jobs
    assert at_cap.id in _ids(job)
    # never in the daily compaction either, which runs on each side of it
    snap = snapshot([C, P], files, last_full_compaction_ms=NOW_MS - DAY_MS)
    jobs = plan(snap, NOW_MS).jobs
    assert [j.rule for j in jobs] == ["daily", "daily"]
    assert all(huge.id not in _ids(j) for j in jobs)
    assert _ids(jobs[0]) == [f.id for f in files[:20]]
    assert _ids(jobs[1]) == [f.id for f in files[21:]]


def test_a_too_large_dirty_file_is_never_in_a_max_lag_job() -> None:
    make = FileMaker("m")
    topics = [compacted("m", max_lag_ms=HOUR_MS), P]
    old = NOW_MS - 3 * HOUR_MS
    huge = make(uncompressed=200 * GiB, min_ts=old)
    snap = snapshot(topics, [make(min_ts=old), huge, make(min_ts=old)])
    jobs = plan(snap, NOW_MS).jobs
    assert [j.rule for j in jobs] == ["max-lag", "max-lag"]
    assert all(huge.id not in _ids(j) for j in jobs)


# --- daily compaction -------------------------------------------------------------------


def test_daily_compaction_due_and_not_due() -> None:
    make = FileMaker()
    files = [make(2), make(1), make(0)]
    snap = snapshot([C, P], files, last_full_compaction_ms=NOW_MS)
    assert plan(snap, NOW_MS + DAY_MS - 1).jobs == ()
    (job,) = plan(snap, NOW_MS + DAY_MS).jobs
    assert job.rule == "daily" and job.is_full
    assert _ids(job) == [f.id for f in files]
    assert job.output_level == MAX_LEVEL and job.deduplicate
    numbers = dict(job.numbers)
    assert numbers["since_last_full_ms"] == DAY_MS
    assert numbers["interval_ms"] == DAY_MS


def test_daily_compaction_runs_alone() -> None:
    make = FileMaker()
    files = make.many(40)  # would make an L0->L1 job
    snap = snapshot([C, P], files, last_full_compaction_ms=NOW_MS - DAY_MS)
    jobs = plan(snap, NOW_MS).jobs
    assert [j.rule for j in jobs] == ["daily"]
    assert _ids(jobs[0]) == [f.id for f in files]


def test_daily_compaction_skips_runs_already_full() -> None:
    make = FileMaker("c")
    one = make(MAX_LEVEL)
    snap = snapshot([C, P], [one], last_full_compaction_ms=NOW_MS - 2 * DAY_MS)
    assert plan(snap, NOW_MS).jobs == ()
    # one compacted and one plain L4 file are as full as it gets, too
    two = [one, make(MAX_LEVEL, topic_name="p")]
    assert plan(snapshot([C, P], two, NOW_MS - 2 * DAY_MS), NOW_MS).jobs == ()


def test_daily_interval_is_configurable() -> None:
    files = FileMaker().many(2)
    config = PlannerConfig.parse({"full.compaction.interval.ms": str(HOUR_MS)})
    snap = snapshot([C, P], files, last_full_compaction_ms=NOW_MS - HOUR_MS)
    assert [j.rule for j in plan(snap, NOW_MS, config).jobs] == ["daily"]
    assert plan(snap, NOW_MS).jobs == ()


def test_no_last_full_compaction_means_never_due() -> None:
    files = FileMaker().many(5)
    snap = snapshot([C, P], files, last_full_compaction_ms=None)
    for now in (0, NOW_MS, NOW_MS + 365 * DAY_MS):
        assert plan(snap, now).jobs == ()


def test_the_daily_clock_starts_at_the_first_ingest_and_restarts_on_full() -> None:
    snap = create_topic(Snapshot(), "c", 1, TopicConfig.parse({"cleanup.policy": "compact"}))
    assert snap.last_full_compaction_ms is None
    make = FileMaker()
    first = [
        live_file("a", 0, section("c", first=0, count=10), created_ms=NOW_MS + 5),
        live_file("b", 0, section("c", first=10, count=10), created_ms=NOW_MS + 3),
    ]
    snap = append_files(snap, first, {("c", 0): 0}, {("c", 0): 20})
    assert snap.last_full_compaction_ms == NOW_MS + 3  # the earliest of the first files
    later = [live_file("d", 0, section("c", first=20, count=10), created_ms=NOW_MS + 99)]
    snap = append_files(snap, later, {("c", 0): 20}, {("c", 0): 30})
    assert snap.last_full_compaction_ms == NOW_MS + 3  # only the first ingest starts it
    assert plan(snap, NOW_MS + 3 + DAY_MS - 1).jobs == ()
    (daily,) = plan(snap, NOW_MS + 3 + DAY_MS).jobs
    assert daily.rule == "daily"
    # a non-full replacement keeps the clock; a full one restarts it
    out = make(MAX_LEVEL)
    kept = replace_files(snap, ["a"], [out], now_ms=NOW_MS + 2 * DAY_MS)
    assert kept.last_full_compaction_ms == NOW_MS + 3
    done = apply_job(snap, daily, NOW_MS + 2 * DAY_MS)
    assert done.last_full_compaction_ms == NOW_MS + 2 * DAY_MS
    assert plan(done, NOW_MS + 3 * DAY_MS - 1).jobs == ()


# --- max.compaction.lag.ms --------------------------------------------------------------


def _lag_snapshot(max_lag_ms: int, *min_ts: int, level: int = 0) -> Snapshot:
    make = FileMaker("m")
    files = [make(level, min_ts=t) for t in min_ts]
    return snapshot([compacted("m", max_lag_ms=max_lag_ms), P], files)


def test_max_lag_below_two_hours_is_raised_to_two_hours() -> None:
    for lag in (0, MINUTE_MS, HOUR_MS, 2 * HOUR_MS):
        snap = _lag_snapshot(lag, NOW_MS - 2 * HOUR_MS + 1)
        assert dirty_files(snap, NOW_MS) == {}, lag
        assert dirty_files(snap, NOW_MS + 1) == {"f0000": NOW_MS + 1}, lag
    snap = _lag_snapshot(3 * HOUR_MS, NOW_MS - 2 * HOUR_MS - 1)
    assert dirty_files(snap, NOW_MS) == {}  # above the floor, the topic's own lag counts
    assert dirty_files(snap, NOW_MS + HOUR_MS + 1) == {"f0000": NOW_MS + HOUR_MS - 1}


def test_dirty_files_wait_the_buffer_then_one_job_spans_them() -> None:
    # three dirty files among clean ones: dirty since NOW, NOW + 5 min, NOW + 10 min
    lag = 2 * HOUR_MS
    make = FileMaker("m")
    files = [
        make(0, min_ts=NOW_MS + HOUR_MS),  # clean (young)
        make(0, min_ts=NOW_MS - lag),
        make(0, min_ts=NOW_MS + HOUR_MS),
        make(1, min_ts=NOW_MS - lag + 5 * MINUTE_MS),
        make(0, min_ts=NOW_MS - lag + 10 * MINUTE_MS),
        make(0, min_ts=NOW_MS + HOUR_MS),  # clean
    ]
    snap = snapshot([compacted("m", max_lag_ms=lag), P], files)
    assert plan(snap, NOW_MS + 15 * MINUTE_MS - 1).jobs == ()
    (job,) = plan(snap, NOW_MS + 15 * MINUTE_MS).jobs
    assert job.rule == "max-lag"
    assert _ids(job) == [f.id for f in files[1:5]]
    assert job.deduplicate is True
    assert job.output_level == 2
    numbers = dict(job.numbers)
    assert numbers["dirty_files"] == 3
    assert numbers["oldest_dirty_since_ms"] == NOW_MS
    assert numbers["dirty_for_ms"] == 15 * MINUTE_MS
    # the buffer is configurable
    config = PlannerConfig.parse({"max.lag.buffer.ms": "0"})
    (job0,) = plan(snap, NOW_MS, config).jobs
    assert _ids(job0) == [files[1].id]


def test_max_lag_output_level_is_at_least_its_inputs() -> None:
    make = FileMaker("m")
    old = NOW_MS - 3 * HOUR_MS
    files = [make(0, min_ts=old), make(3), make(1, min_ts=old)]
    snap = snapshot([compacted("m", max_lag_ms=HOUR_MS), P], files)
    (job,) = plan(snap, NOW_MS).jobs
    assert _ids(job) == [f.id for f in files]
    assert job.output_level == 3


def test_max_lag_makes_one_job_per_run() -> None:
    make = FileMaker("m")
    old = NOW_MS - 3 * HOUR_MS
    files = [make(0, min_ts=old), make(0, min_ts=old), make(0), make(0, min_ts=old)]
    snap = snapshot([compacted("m", max_lag_ms=HOUR_MS), P], files)
    jobs = plan(snap, NOW_MS, busy=frozenset({files[2].id})).jobs
    assert [_ids(j) for j in jobs] == [[files[0].id, files[1].id], [files[3].id]]


@pytest.mark.parametrize("level", [2, 3, 4])
def test_files_at_l2_and_above_are_never_dirty(level: int) -> None:
    snap = _lag_snapshot(HOUR_MS, NOW_MS - 10 * DAY_MS, level=level)
    assert dirty_files(snap, NOW_MS) == {}
    assert plan(snap, NOW_MS).jobs == ()


def test_delete_policy_topics_are_never_dirty() -> None:
    make = FileMaker("d")
    # max.compaction.lag.ms on a delete-policy topic means nothing
    d = topic("d", {"cleanup.policy": "delete", "max.compaction.lag.ms": "0", "retention.ms": "-1"})
    snap = snapshot([C, d], [make(0, min_ts=NOW_MS - 10 * DAY_MS)])
    assert dirty_files(snap, NOW_MS) == {}
    assert plan(snap, NOW_MS).jobs == ()


def test_compacted_topics_without_max_lag_are_never_dirty() -> None:
    make = FileMaker("c")
    snap = snapshot([C, P], [make(0, min_ts=NOW_MS - 10 * DAY_MS)])
    assert dirty_files(snap, NOW_MS) == {}


def test_compact_delete_topics_with_max_lag_get_dirty() -> None:
    make = FileMaker("cd")
    cd = topic("cd", {"cleanup.policy": "compact,delete", "max.compaction.lag.ms": "1"})
    snap = snapshot([cd], [make(0, min_ts=NOW_MS - 3 * HOUR_MS)])
    (job,) = plan(snap, NOW_MS).jobs
    assert job.rule == "max-lag"


def test_max_lag_runs_before_the_level_rules() -> None:
    make = FileMaker("m")
    old = NOW_MS - 3 * HOUR_MS
    files = make.many(20) + [make(0, min_ts=old)] + make.many(20)
    snap = snapshot([compacted("m", max_lag_ms=HOUR_MS), P], files)
    config = PlannerConfig.parse({"level.trigger.files": "16"})
    jobs = plan(snap, NOW_MS, config).jobs
    assert [j.rule for j in jobs] == ["max-lag", "L0->L1", "L0->L1"]
    assert _ids(jobs[0]) == [files[20].id]
    assert _ids(jobs[1]) == [f.id for f in files[:16]]
    assert _ids(jobs[2]) == [f.id for f in files[21:37]]


# --- every job explains itself ----------------------------------------------------------


def test_each_rule_gives_numbers_rule_and_reason() -> None:
    make = FileMaker("m")
    old = NOW_MS - 3 * HOUR_MS
    files = (
        [make(MAX_LEVEL, size=GiB) for _ in range(10)]
        + make.many(32, level=1)
        + make.many(32)
        + [make(0, min_ts=old)]
    )
    snap = snapshot([compacted("m", max_lag_ms=HOUR_MS), P], files)
    jobs = plan(snap, NOW_MS).jobs
    assert [j.rule for j in jobs] == ["max-lag", "L0->L1", "L1->L2", "top-run"]
    for job in jobs:
        assert job.reason
        assert job.numbers
        assert all(isinstance(v, int | float) for _, v in job.numbers)
        again = Job.from_json(job.to_json())
        assert again == job and again.id == job.id
    assert dict(jobs[1].numbers) == {"level_files": 33, "run_files": 32, "trigger": 32}
    top = dict(jobs[3].numbers)
    assert top["files"] == 10 and top["min_files"] == 10 and top["size_ratio"] == 1.0
    daily = plan(snapshot(snap.topics.values(), files, NOW_MS - DAY_MS), NOW_MS).jobs
    assert {j.rule for j in daily} == {"daily"}
    assert all(j.reason and j.numbers for j in daily)


def test_notes_say_why() -> None:
    make = FileMaker()
    snap = snapshot([C, P], make.many(3) + [make(uncompressed=200 * GiB)])
    text = "\n".join(plan_notes(snap, NOW_MS))
    assert "L0: 4 files" in text
    assert "never compacted" in text
    assert "daily compaction due in 24.0 h" in text


def test_job_json_round_trip_and_id_check() -> None:
    (job,) = _plan(FileMaker().many(32)).jobs
    doc = job.to_json()
    assert Job.from_json(doc) == job
    doc["output_level"] = 2
    with pytest.raises(ValueError, match="does not match"):
        Job.from_json(doc)


def test_plan_is_deterministic() -> None:
    make = FileMaker()
    files = make.many(70) + make.many(40, level=1)
    assert _plan(files) == _plan(list(files))
    assert [j.id for j in _plan(files).jobs] == [j.id for j in _plan(files).jobs]


# --- PlannerConfig.parse ----------------------------------------------------------------


def test_planner_config_parse_defaults_and_overrides() -> None:
    assert PlannerConfig.parse({}) == PlannerConfig()
    config = PlannerConfig.parse(
        {
            "level.trigger.files": "16",
            "top.run.min.files": "4",
            "top.run.max.files": "8",
            "top.run.size.ratio": "1.5",
            "full.compaction.interval.ms": "1000",
            "max.partition.uncompressed.bytes": "1024",
            "max.lag.buffer.ms": "0",
            "max.lag.deadline.ms": "1",
        }
    )
    assert config.level_trigger_files == 16
    assert config.top_run_size_ratio == 1.5
    assert PlannerConfig.parse({k: str(v) for k, v in config.to_json().items()}) == config


@pytest.mark.parametrize(
    "settings",
    [
        {"level.trigger": "32"},
        {"level_trigger_files": "32"},
        {"level.trigger.files": "x"},
        {"level.trigger.files": "32.5"},
        {"level.trigger.files": "inf"},
        {"level.trigger.files": ""},
        {"level.trigger.files": "1"},
        {"level.trigger.files": "-32"},
        {"top.run.min.files": "1"},
        {"top.run.min.files": "11", "top.run.max.files": "10"},
        {"top.run.size.ratio": "0.5"},
        {"top.run.size.ratio": "two"},
        {"full.compaction.interval.ms": "0"},
        {"max.partition.uncompressed.bytes": "0"},
        {"max.lag.buffer.ms": "-1"},
        {"max.lag.buffer.ms": "30", "max.lag.deadline.ms": "30"},
    ],
)
def test_planner_config_parse_rejects_unknown_names_and_bad_values(
    settings: dict[str, str],
) -> None:
    with pytest.raises(ConfigError):
        PlannerConfig.parse(settings)


def test_planner_config_parse_rejects_nan_size_ratio() -> None:
    # NaN compares false with everything, so it passes "ratio < 1.0" and silently
    # turns the top-run rule off (no window is ever "within" a NaN ratio)
    with pytest.raises(ConfigError):
        PlannerConfig.parse({"top.run.size.ratio": "nan"})
