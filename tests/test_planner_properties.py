"""Properties of ``planner.plan.plan`` over random catalogs (tests/planner_catalogs.py).

Every plan, whatever the catalog: no file in two jobs, each job a contiguous slice of
the live sequence, levels only go up, L0 -> L1 is the only copy, top runs are of
similar size, too-large, busy and quarantined files stay out, the same input gives the
same plan, a daily job runs alone, jobs survive JSON. And the planner converges: applying its
jobs and planning again at the same clock ends, without proposing a job twice, at a
state where no level below the top holds a run of trigger files.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_catalogs import Case, apply_job, cases

from compactor.catalog import Snapshot
from compactor.planner.config import MINUTE_MS, PlannerConfig
from compactor.planner.job import MAX_LEVEL, Job
from compactor.planner.maxlag import dirty_files, dirty_since_ms
from compactor.planner.plan import Plan, plan
from compactor.planner.sequence import output_group, runs, too_large

PROPERTY_SETTINGS = settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _slice_start(snap: Snapshot, job: Job) -> int:
    ids = [f.id for f in snap.files]
    inputs = [i.id for i in job.inputs]
    assert inputs[0] in ids, f"{job.rule} job names a file that is not live"
    start = ids.index(inputs[0])
    assert ids[start : start + len(inputs)] == inputs, (
        f"{job.rule} job inputs are not a contiguous slice of the live sequence"
    )
    return start


def check_plan(case: Case, result: Plan) -> None:
    snap, config = case.snap, case.config
    by_id = {f.id: f for f in snap.files}
    seen: set[str] = set()
    rules = {job.rule for job in result.jobs}
    if "daily" in rules:
        assert rules == {"daily"}, f"a daily job runs alone, got rules {sorted(rules)}"
    for job in result.jobs:
        ids = [i.id for i in job.inputs]
        # no file in two jobs
        assert not seen & set(ids), f"{job.rule} job reuses files {sorted(seen & set(ids))}"
        seen.update(ids)
        # a contiguous slice, oldest first, and the inputs' keys and sizes are the files'
        _slice_start(snap, job)
        files = [by_id[i] for i in ids]
        assert [(i.key, i.size) for i in job.inputs] == [(f.key, f.size) for f in files]
        # levels only go up
        assert 1 <= job.output_level <= MAX_LEVEL
        assert all(f.level <= job.output_level for f in files), (
            f"{job.rule} job writes L{job.output_level} from levels {[f.level for f in files]}"
        )
        # L0 -> L1 is the only copy
        assert job.deduplicate == (job.rule != "L0->L1"), job.rule
        if job.rule == "L0->L1":
            assert job.output_level == 1 and all(f.level == 0 for f in files)
        if not job.deduplicate:
            assert job.rule == "L0->L1"
        if job.rule.startswith("L") and "->" in job.rule:
            level = int(job.rule[1])
            assert all(f.level == level for f in files)
            assert job.output_level == level + 1
            assert len(files) == config.level_trigger_files
        # never a too-large file, never a busy one
        assert not any(too_large(f, config) for f in files)
        assert not case.busy & set(ids), f"busy files {sorted(case.busy & set(ids))} in a job"
        held = set(snap.quarantined) & set(ids)
        assert not held, f"quarantined files {sorted(held)} in a {job.rule} job"
        if job.rule == "top-run":
            assert all(f.level == MAX_LEVEL for f in files)
            assert len(files) <= config.top_run_max_files
            groups = [output_group(f, snap.topics) for f in files]
            for g in set(groups):
                sizes = [max(f.size, 1) for f, fg in zip(files, groups, strict=True) if fg == g]
                assert max(sizes) / min(sizes) <= config.top_run_size_ratio, (g, sizes)
            assert max(groups.count(g) for g in set(groups)) >= config.top_run_min_files
        if job.rule == "max-lag":
            dirty = dirty_files(snap, case.now_ms)
            assert ids[0] in dirty and ids[-1] in dirty, "a max-lag span ends on dirty files"
            assert job.output_level >= 2
        if job.rule == "daily":
            assert job.output_level == MAX_LEVEL
        # every job explains itself
        assert job.rule and job.reason and job.numbers
        # and survives the queue
        again = Job.from_json(job.to_json())
        assert again.id == job.id
        assert again == job
        assert Job.from_json(job.to_json()).to_json() == job.to_json()
    ids_of_jobs = [job.id for job in result.jobs]
    assert len(set(ids_of_jobs)) == len(ids_of_jobs)


@PROPERTY_SETTINGS
@given(cases())
def test_every_plan_keeps_the_invariants(case: Case) -> None:
    result = plan(case.snap, case.now_ms, case.config, case.busy)
    check_plan(case, result)


@PROPERTY_SETTINGS
@given(cases())
def test_plans_are_deterministic(case: Case) -> None:
    first = plan(case.snap, case.now_ms, case.config, case.busy)
    second = plan(case.snap, case.now_ms, case.config, frozenset(sorted(case.busy)))
    assert first == second
    assert [j.id for j in first.jobs] == [j.id for j in second.jobs]
    assert [j.dumps() for j in first.jobs] == [j.dumps() for j in second.jobs]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_daily_takes_every_run_when_due_and_never_otherwise(case: Case) -> None:
    result = plan(case.snap, case.now_ms, case.config, case.busy)
    last = case.snap.last_full_compaction_ms
    due = last is not None and case.now_ms >= last + case.config.full_compaction_interval_ms
    daily = [j for j in result.jobs if j.rule == "daily"]
    if not due:
        assert not daily
        return
    assert len(daily) == len(result.jobs)
    # one job per run of available files, except runs already as full as they get (all
    # at the top, at most one file per output group)
    unavailable = case.set_aside | {f.id for f in case.snap.files if too_large(f, case.config)}
    expected = []
    for run in runs(case.snap.files, unavailable):
        groups = [output_group(f, case.snap.topics) for f in run]
        if not (all(f.level == MAX_LEVEL for f in run) and len(set(groups)) == len(groups)):
            expected.append([f.id for f in run])
    assert [[i.id for i in j.inputs] for j in daily] == expected


def _level_runs(
    snap: Snapshot, config: PlannerConfig, busy: frozenset[str], level: int
) -> list[int]:
    frozen = {f.id for f in snap.files if too_large(f, config)}
    return [len(r) for r in runs(snap.files, busy | frozen, lambda f: f.level == level)]


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(max_files=60))
def test_applying_plans_converges(case: Case) -> None:
    snap, now, config, busy = case.snap, case.now_ms, case.config, case.busy
    proposed: set[str] = set()
    # every job takes >= 2 files or cleans a dirty file; outputs are <= 2 files per job
    bound = 3 * len(snap.files) + 2
    for _round in range(bound):
        result = plan(snap, now, config, busy)
        check_plan(Case(snap, now, config, busy), result)
        if not result.jobs:
            break
        for job in result.jobs:
            assert job.id not in proposed, f"job {job.id} ({job.rule}) proposed twice"
            proposed.add(job.id)
            snap = apply_job(snap, job, now)
    else:
        raise AssertionError(f"no fixed point after {bound} rounds")
    for level in range(MAX_LEVEL):
        lengths = _level_runs(snap, config, case.set_aside, level)
        assert all(n < config.level_trigger_files for n in lengths), (level, lengths)
    # the busy and quarantined files are untouched, still in the sequence
    assert case.set_aside <= {f.id for f in snap.files}
    assert snap.quarantined == case.snap.quarantined


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_max_lag_takes_every_waiting_dirty_file(case: Case) -> None:
    """Once the oldest available dirty file has waited the buffer, every available dirty
    file is in a deduplicating job (max-lag, or the daily compaction)."""
    snap, now, config = case.snap, case.now_ms, case.config
    result = plan(snap, now, config, case.busy)
    unavailable = case.set_aside | {f.id for f in snap.files if too_large(f, config)}
    waiting = {i: s for i, s in dirty_files(snap, now).items() if i not in unavailable}
    if not waiting or now - min(waiting.values()) < config.max_lag_buffer_ms:
        assert not any(j.rule == "max-lag" for j in result.jobs)
        return
    cleaned = {i.id for j in result.jobs if j.rule in ("max-lag", "daily") for i in j.inputs}
    assert set(waiting) <= cleaned, sorted(set(waiting) - cleaned)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(max_files=50), st.lists(st.integers(0, 20 * MINUTE_MS), min_size=1, max_size=8))
def test_planning_every_tick_keeps_max_lag(case: Case, ticks: list[int]) -> None:
    """Planning at each tick and committing the jobs at once, no compactable file stays
    dirty for max.lag.buffer.ms past the plan (so, polled often enough, the deadline)."""
    snap, now, config = case.snap, case.now_ms, case.config
    for tick in ticks:
        now += tick
        for job in plan(snap, now, config).jobs:
            snap = apply_job(snap, job, now)
        for f in snap.files:
            since = dirty_since_ms(f, snap.topics)
            if since is None or too_large(f, config) or f.id in snap.quarantined:
                continue
            assert now - since < config.max_lag_buffer_ms, (
                f"{f.id} at L{f.level} dirty for {now - since} ms after planning"
            )
