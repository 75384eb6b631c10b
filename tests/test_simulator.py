"""compactor simulate: the documented first-dedup figure, max-lag compliance, STCS,
retention.ms and delete horizons (bounded live size, lateness within the planner's
promises), and the file model behind them."""

from __future__ import annotations

import json
import math
import random

import pytest
from clirunner import assert_one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.planner.config import PlannerConfig
from compactor.planner.plan import plan
from compactor.planner.simulation import keys
from compactor.planner.simulation.files import FileModel, deduplicate, expire
from compactor.planner.simulation.keys import KeyModel
from compactor.planner.simulation.sim import Result, Simulation, WorkerModel, Workload


def _simulate(*args: str) -> dict[str, object]:
    r = run_cli("simulate", *args, "--json")
    assert r.code == 0, r.err
    doc: dict[str, object] = json.loads(r.out)
    return doc


@pytest.mark.parametrize(("agents", "rate"), [(1, "4"), (2, "2"), (4, "1")])
def test_first_dedup_at_32_x_32_files(agents: int, rate: str) -> None:
    """1 agent at 4 files/s: 32 L0 files make an L1 file every 8 s, 32 L1 files make
    the first L1 -> L2 deduplication at 32 x 32 / 4 = 256 s, plus the two jobs' own
    run time (about 1 s each in the default cost model)."""
    doc = _simulate("--agents", str(agents), "--files-per-second", rate, "--hours", "0.1")
    first = doc["first_dedup_seconds"]
    assert isinstance(first, float) and 256 <= first <= 262, first
    rules = doc["jobs_by_rule"]
    assert isinstance(rules, dict) and rules["L1->L2"] >= 1


def test_first_dedup_scales_with_the_rate() -> None:
    doc = _simulate("--files-per-second", "8", "--hours", "0.1")
    first = doc["first_dedup_seconds"]
    assert isinstance(first, float) and 128 <= first <= 134, first


def test_no_dedup_before_enough_files() -> None:
    # 0.5 h at 0.25 files/s is 450 files: L1 never reaches 32 files
    doc = _simulate("--files-per-second", "0.25", "--hours", "0.5")
    assert doc["first_dedup_seconds"] is None


def test_compare_runs_both_policies_on_the_same_workload() -> None:
    doc = _simulate("--hours", "0.5", "--compare")
    stcs = doc["stcs"]
    assert isinstance(stcs, dict)
    assert stcs["ingested_bytes"] == doc["ingested_bytes"] > 0
    assert set(stcs["jobs_by_rule"]) == {"stcs"}
    # Size-tiered with min 4 files rewrites small files over and over; the levels do not.
    assert stcs["write_amplification"] > doc["write_amplification"] > 1
    table = run_cli("simulate", "--hours", "0.2", "--compare")
    assert table.code == 0 and "write amplification" in table.out and "STCS" in table.out


@settings(max_examples=6, deadline=None)
@given(
    files_per_second=st.sampled_from([0.002, 0.01, 0.05]),
    lag_hours=st.sampled_from([0, 2, 3]),
    workers=st.integers(1, 3),
    step_s=st.sampled_from([1.0, 10.0, 30.0]),
)
def test_every_dirty_file_is_compacted_within_30_minutes(
    files_per_second: float, lag_hours: int, workers: int, step_s: float
) -> None:
    workload = Workload(
        files_per_second=files_per_second,
        hours=8,
        records_per_file=200,
        keys=10_000,
        max_compaction_lag_ms=lag_hours * 3_600_000,
    )
    config = PlannerConfig()
    sim = Simulation(
        "planner",
        lambda s, n, b: plan(s, n, config, b),
        workload,
        WorkerModel(workers=workers, step_s=step_s, sample_every_s=600),
        config,
    )
    result = sim.run()
    doc = result.to_json()
    assert doc["max_lag"]["dirty_files"] > 0  # the rule was exercised, not vacuously true
    assert doc["max_lag"]["late"] == 0, doc["max_lag"]
    assert max(result.dirty_delays_s) <= 30 * 60


def test_without_max_lag_nothing_is_dirty() -> None:
    doc = _simulate("--files-per-second", "0.01", "--hours", "6")
    lag = doc["max_lag"]
    assert isinstance(lag, dict) and lag["dirty_files"] == 0


def test_key_model_matches_sampling() -> None:
    uniform = KeyModel(1000, 0.0)
    assert uniform.distinct(1000) == pytest.approx(1000 * (1 - (1 - 1 / 1000) ** 1000), abs=1)
    zipf = KeyModel(2000, 1.1)
    rng = random.Random(7)
    weights = [k**-1.1 for k in range(1, 2001)]
    for n in (100, 3000, 20000):
        trials = [len(set(rng.choices(range(2000), weights, k=n))) for _ in range(20)]
        assert zipf.distinct(n) == pytest.approx(sum(trials) / len(trials), rel=0.03)


@pytest.mark.parametrize("skew", [0.5, 1.0, 1.1, 2.0])
def test_a_wide_bucket_s_integrated_mass_is_its_sum(skew: float) -> None:
    """Buckets of more than ``_SUMMED_RANKS`` ranks are integrated, not summed: to 10^-7
    of the sum, from the first rank where buckets are that wide."""
    for lo, hi in [(5_000, 5_300), (40_000, 42_000), (900_000, 945_000)]:
        exact = math.fsum(k**-skew for k in range(lo, hi + 1))
        assert keys._mass(lo, hi, skew) == pytest.approx(exact, rel=1e-7)


def test_a_key_space_of_any_size_is_modelled_at_once() -> None:
    """A key space is a few hundred buckets whatever its size: 10^9 keys took a minute,
    summed rank by rank, and 2^63 - 1 (the most ``--keys`` takes) never ended."""
    for size in (10**9, 2**63 - 1):
        model = KeyModel(size, 1.1)
        assert len(model._buckets) < 1_000
        assert 0 < model.distinct(10**6) < 10**6
        assert model.distinct(10**6) <= model.distinct(10**7)
    r = run_cli("simulate", "--hours", "0.05", "--json", "--keys", str(2**63 - 1))
    assert r.code == 0, r.err


def test_bad_arguments_are_one_line() -> None:
    assert_one_line_error(run_cli("simulate", "--hours", "0"), "--hours")
    assert_one_line_error(run_cli("simulate", "--set", "no.such=1"), "unknown planner setting")


def _run(workload: Workload, worker: WorkerModel, **settings: str) -> Result:
    config = PlannerConfig.parse(settings)
    policy = lambda s, n, b: plan(s, n, config, b)  # noqa: E731
    return Simulation("planner", policy, workload, worker, config).run()


def _slack_ms(result: Result, worker: WorkerModel) -> float:
    """What a time bound allows on top of the planner's promise: the longest job (it
    runs after the rule fires) and one step (the planner looks once per step)."""
    return 1000 * (result.max_job_s + worker.step_s)


def test_delete_topic_reaches_a_bounded_live_size() -> None:
    """30 min of retention over 3 h of steady ingest: from the second hour on, the store
    holds about ingest rate x retention.ms and no more, and no record outlives
    retention.ms by more than retention.max.delay.ms (plus a job and a step)."""
    worker = WorkerModel(step_s=5.0, sample_every_s=60.0)
    workload = Workload(hours=3, cleanup_policy="delete", retention_ms=30 * 60_000)
    result = _run(workload, worker)
    ret = result.retention
    target = ret.ingest_per_retention_bytes
    assert target == 4 * 1000 * 100 * 1800
    hour2 = [s.live_bytes for s in result.samples if 3600 < s.t_s <= 7200]
    hour3 = [s.live_bytes for s in result.samples if s.t_s > 7200]
    assert 0.95 * target <= min(hour3) and max(hour3) <= 1.25 * target, (min(hour3), max(hour3))
    assert max(hour3) <= 1.02 * max(hour2)  # steady, not growing
    assert ret.peak_live_bytes <= 1.25 * target
    assert ret.drop_jobs > 0 and ret.records_removed > 0  # the rules were exercised
    assert ret.max_lateness_ms is not None and ret.max_lateness_ms > 0
    assert ret.max_lateness_ms <= ret.max_delay_ms + _slack_ms(result, worker)
    assert result.first_dedup_seconds is None  # a delete topic is never deduplicated
    assert result.tombstones.max_past_horizon_ms is None


def test_retention_is_on_time_on_long_dense_files() -> None:
    """Files of many records per millisecond spanning 17 min (trigger 8: L4 files of 8^4
    L0 files) under a 5 min retention.max.delay.ms."""
    worker = WorkerModel(step_s=5.0)
    workload = Workload(hours=2, cleanup_policy="delete", retention_ms=30 * 60_000)
    result = _run(
        workload, worker, **{"level.trigger.files": "8", "retention.max.delay.ms": "300000"}
    )
    ret = result.retention
    assert ret.max_lateness_ms is not None and ret.rewrite_jobs > 0
    assert ret.max_lateness_ms <= ret.max_delay_ms + _slack_ms(result, worker), ret


@pytest.mark.parametrize(
    ("policy", "retention_ms", "delete_retention_ms"),
    [("compact", -1, 30 * 60_000), ("compact", -1, 0), ("compact,delete", 3_600_000, 1_200_000)],
)
def test_tombstones_leave_within_delete_retention_and_buffer(
    policy: str, retention_ms: int, delete_retention_ms: int
) -> None:
    """A tombstone gets its horizon (now + delete.retention.ms) from the first
    deduplicating job that keeps it; it is gone tombstone.buffer.ms after that horizon,
    give or take a job and a step."""
    worker = WorkerModel(step_s=2.0)
    workload = Workload(
        hours=3,
        cleanup_policy=policy,
        retention_ms=retention_ms,
        tombstone_ratio=0.05,
        delete_retention_ms=delete_retention_ms,
    )
    result = _run(workload, worker)
    tomb = result.tombstones.to_json()
    assert result.jobs_by_rule["tombstones"] >= 1
    assert tomb["stamped"] > 0 and tomb["dropped_past_horizon"] > 0
    assert tomb["max_past_horizon_ms"] >= 0  # some horizon did pass
    slack = _slack_ms(result, worker)
    assert tomb["max_past_horizon_ms"] <= tomb["tombstone_buffer_ms"] + slack, tomb
    assert tomb["max_since_horizon_set_ms"] <= tomb["bound_ms"] + slack, tomb
    assert tomb["live_end"] < tomb["ingested"] / 10
    if retention_ms > 0:
        ret = result.retention
        assert ret.max_lateness_ms is not None and ret.records_removed > 0
        assert ret.max_lateness_ms <= ret.max_delay_ms + slack


def test_simulate_cli_reports_retention_and_tombstones() -> None:
    doc = _simulate(
        "--hours",
        "0.5",
        "--cleanup-policy",
        "compact,delete",
        "--retention-ms",
        "600000",
        "--tombstone-ratio",
        "0.1",
        "--delete-retention-ms",
        "60000",
    )
    assert doc["workload"]["cleanup_policy"] == "compact,delete"  # type: ignore[index]
    ret, tomb = doc["retention"], doc["tombstones"]
    assert isinstance(ret, dict) and isinstance(tomb, dict)
    assert ret["retention_ms"] == 600000 and ret["records_removed"] > 0
    assert ret["peak_live_bytes"] >= ret["final_live_bytes"] > 0
    assert ret["max_retention_lateness_ms"] <= ret["retention_max_delay_ms"] + 10_000
    # Retention (10 min) outruns the horizon (1 min + the 15 min buffer): the tombstones
    # leave with their files, none stays past its horizon longer than the bound.
    assert tomb["ingested"] == 7200 * 100 and tomb["removed_other"] > 0
    assert tomb["max_past_horizon_ms"] <= tomb["bound_ms"]
    assert tomb["bound_ms"] == 60000 + 900000
    text = run_cli(
        "simulate", "--hours", "0.5", "--cleanup-policy", "delete", "--retention-ms", "600000"
    )
    assert text.code == 0 and "retention late by, max" in text.out, text.err


def test_default_topic_keeps_records_and_has_no_tombstones() -> None:
    doc = _simulate("--hours", "0.2")
    ret, tomb = doc["retention"], doc["tombstones"]
    assert isinstance(ret, dict) and isinstance(tomb, dict)
    assert ret["retention_ms"] == -1 and ret["max_retention_lateness_ms"] is None
    assert ret["records_removed"] == 0 and tomb["ingested"] == 0
    assert "retention" not in doc["jobs_by_rule"]  # type: ignore[operator]


def test_bad_time_arguments_are_one_line() -> None:
    assert_one_line_error(run_cli("simulate", "--tombstone-ratio", "2"), "--tombstone-ratio")
    assert_one_line_error(run_cli("simulate", "--retention-ms", "-2"), "--retention-ms")
    assert_one_line_error(run_cli("simulate", "--cleanup-policy", "x"), "--cleanup-policy")


def _model(records: int, min_ts: int, max_ts: int, **kw: int) -> FileModel:
    return FileModel(records, records * 100, records, 0, records - 1, min_ts, max_ts, **kw)


def test_expire_removes_what_is_older_than_the_cutoff() -> None:
    dense = _model(4001, 0, 1000, fresh=400)  # 4 records per ms
    rest, gone = expire(dense, 250)
    assert rest is not None and gone == 1000 and rest.records == 3001
    assert rest.min_ts == 250  # the record at the cutoff stays
    assert rest.fresh == 300 and rest.size == 300_100
    sparse = _model(11, 0, 1000)  # one record every 100 ms
    rest, gone = expire(sparse, 250)
    assert rest is not None and gone == 3 and rest.min_ts == 300
    assert expire(sparse, 1001) == (None, 11)
    assert expire(sparse, 0) == (sparse, 0)


def test_deduplicate_stamps_and_drops_tombstones() -> None:
    keys = KeyModel(1000, 0.0)
    m = _model(500, 0, 1000, fresh=50, stamped=((900, 50), (5000, 50)))
    not_oldest = deduplicate(m, keys, 100, now_ms=2000, horizon_ms=3000, droppable=False)
    out = not_oldest.output
    assert out is not None and not_oldest.tombstones_dropped == 0
    assert out.min_delete_horizon == 900  # kept with its passed horizon
    assert [h for h, _ in out.stamped] == [900, 3000, 5000] and out.fresh == 0
    oldest = deduplicate(m, keys, 100, now_ms=2000, horizon_ms=3000, droppable=True)
    out = oldest.output
    assert out is not None and oldest.tombstones_dropped > 0
    assert out.min_delete_horizon == 3000
    assert out.deleted == oldest.tombstones_dropped
    assert out.records == keys.distinct(500) - oldest.tombstones_dropped
