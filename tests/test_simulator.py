"""compactor simulate: the documented first-dedup figure, max-lag compliance, STCS."""

from __future__ import annotations

import json
import random

import pytest
from clirunner import assert_one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.planner.config import PlannerConfig
from compactor.planner.plan import plan
from compactor.planner.simulation.keys import KeyModel
from compactor.planner.simulation.sim import Simulation, WorkerModel, Workload


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


def test_bad_arguments_are_one_line() -> None:
    assert_one_line_error(run_cli("simulate", "--hours", "0"), "--hours")
    assert_one_line_error(run_cli("simulate", "--set", "no.such=1"), "unknown planner setting")
