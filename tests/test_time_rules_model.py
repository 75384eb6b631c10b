"""The time rules at their boundaries, against the independent Kafka model
(tests/kafka_model.py) and against direct statements of each rule:

- retention.ms: exactly at the cutoff a record stays, one millisecond older it goes, and
  only from the partition's start;
- delete horizons: a tombstone whose horizon is now goes, one a millisecond later stays;
- min.compaction.lag.ms expiring between two compactions;
- drop jobs: no GET, and no drop of a file that is no longer wholly expired;
- the planner and worker together, run until idle at a sequence of clocks: every plan
  terminates, and the latest value per key never changes except by retention.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_model import TopicRules, compact, view
from worker_scenarios import add_file, make_topics, read_file, read_live

from compactor.catalog import Catalog
from compactor.catalog.verify import verify_store
from compactor.fileformat import Record
from compactor.objectstore import LocalStore
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job, JobInput
from compactor.planner.plan import full_plan, plan
from compactor.worker.compactor import Compactor
from compactor.worker.kernel import ENTRY_BYTES, KeyBuffer
from compactor.worker.runner import run_job
from compactor.worker.stats import JobReport

NOW = 1_700_000_000_000
RETENTION = 5_000
CUTOFF = NOW - RETENTION
KEYS = [b"a", b"b", b"c", b"d"]


def _records(draw: st.DrawFn, n: int, stamps: st.SearchStrategy[int]) -> list[Record]:
    out = []
    offset = 0
    for _ in range(n):
        value = draw(st.one_of(st.none(), st.binary(max_size=3)))
        out.append(
            Record(
                offset=offset,
                timestamp=draw(stamps),
                key=draw(st.sampled_from(KEYS)),
                value=value,
                headers=(),
                delete_horizon=draw(st.sampled_from([None, NOW - 1, NOW, NOW + 1]))
                if value is None
                else None,
            )
        )
        offset += draw(st.integers(1, 2))
    return out


def _split(records: list[Record], files: int) -> list[list[Record]]:
    size = -(-len(records) // files) if records else 0
    return [records[i * size : (i + 1) * size] for i in range(files)]


@st.composite
def retention_cases(draw: st.DrawFn) -> tuple[str, list[Record], int, int, bool, int]:
    strategy = draw(st.sampled_from(["offset", "timestamp"]))
    n = draw(st.integers(0, 24))
    records = _records(draw, n, st.integers(CUTOFF - 2, CUTOFF + 2))
    files = draw(st.integers(1, 3))
    first = draw(st.integers(0, files - 1))
    return (
        strategy,
        records,
        files,
        first,
        draw(st.booleans()),
        draw(st.sampled_from([2, 1 << 20])),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(retention_cases())
def test_retention_removes_exactly_the_expired_prefix(
    case: tuple[str, list[Record], int, int, bool, int],
) -> None:
    strategy, records, files, first, dedup, entries = case
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        make_topics(
            catalog,
            {
                "d": (1, {"cleanup.policy": "delete", "retention.ms": str(RETENTION)}),
                "c": (
                    1,
                    {
                        "cleanup.policy": "compact,delete",
                        "retention.ms": str(RETENTION),
                        "compaction.strategy": strategy,
                    },
                ),
            },
        )
        chunks = _split(records, files)
        live = [
            add_file(store, catalog, f"f{i}", {("d", 0): chunk, ("c", 0): chunk})
            for i, chunk in enumerate(chunks)
        ]
        inputs = live[first:]
        job = Job(
            inputs=tuple(JobInput(f.id, f.key, f.size) for f in inputs),
            output_level=2 if dedup else 1,
            deduplicate=dedup,
        )
        report = run_job(store, catalog, job, KeyBuffer(entries * ENTRY_BYTES), now_ms=NOW)
        assert report.committed
        got: dict[tuple[str, int], list[Record]] = {}
        for key in report.outputs:
            got.update(read_file(store, key))
        holding = [i for i, c in enumerate(chunks) if c]
        oldest = bool(holding) and first <= holding[0]
        newest = True
        inp = [r for c in chunks[first:] for r in c]

        # The delete topic, stated directly: the longest prefix older than the cutoff
        # goes (a record exactly at the cutoff stays), and only if the job holds the
        # partition's oldest data.
        cut = 0
        while oldest and cut < len(inp) and inp[cut].timestamp < CUTOFF:
            cut += 1
        assert got.get(("d", 0), []) == inp[cut:]
        assert report.stats.dropped_retention >= cut

        rules = TopicRules(strategy=strategy, retention_ms=RETENTION)
        expected = compact(
            inp,
            rules,
            deduplicate=dedup,
            now_ms=NOW,
            includes_oldest=oldest,
            includes_newest=newest,
        )
        kept = got.get(("c", 0), [])
        if entries > 100:
            assert kept == expected
        else:
            assert {r.offset for r in expected} <= {r.offset for r in kept}
        assert verify_store(catalog, catalog.snapshot()).ok


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_tombstones_go_exactly_at_their_horizon(data: st.DataObject) -> None:
    """A winning tombstone whose horizon is now goes; one whose horizon is a millisecond
    later stays, and so does every horizon it already had."""
    horizons = data.draw(st.lists(st.sampled_from([NOW - 1, NOW, NOW + 1]), max_size=4))
    records = [
        Record(offset=i, timestamp=NOW - 100, key=KEYS[i], value=b"old", headers=())
        for i in range(len(horizons))
    ] + [
        Record(
            offset=10 + i,
            timestamp=NOW - 50,
            key=KEYS[i],
            value=None,
            headers=(),
            delete_horizon=h,
        )
        for i, h in enumerate(horizons)
    ]
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        make_topics(catalog, {"c": (1, {"cleanup.policy": "compact"})})
        f = add_file(store, catalog, "f0", {("c", 0): records}, level=2)
        job = Job(inputs=(JobInput(f.id, f.key, f.size),), output_level=2, deduplicate=True)
        report = run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW)
        got = read_live(store, catalog).get(("c", 0), [])
        assert [(r.key, r.delete_horizon) for r in got] == [
            (KEYS[i], h) for i, h in enumerate(horizons) if h > NOW
        ]
        assert report.stats.dropped_tombstone_expired == sum(h <= NOW for h in horizons)
        assert got == compact(
            records,
            TopicRules(),
            deduplicate=True,
            now_ms=NOW,
            includes_oldest=True,
            includes_newest=True,
        )


@st.composite
def lag_cases(draw: st.DrawFn) -> tuple[list[Record], int, int, int]:
    min_lag = draw(st.sampled_from([1_000, 5_000]))
    t1 = NOW
    t2 = NOW + draw(st.integers(0, 6_000))
    records = _records(draw, draw(st.integers(0, 30)), st.integers(NOW - 8_000, NOW))
    return records, min_lag, t1, t2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lag_cases(), st.sampled_from([1, 3, 1 << 20]))
def test_min_lag_expiring_between_two_compactions(
    case: tuple[list[Record], int, int, int], entries: int
) -> None:
    """Records too young at the first compaction are compacted by the second once they
    are old enough, exactly as the model compacts twice; the view never changes."""
    records, min_lag, t1, t2 = case
    rules = TopicRules(min_lag_ms=min_lag, delete_retention_ms=86_400_000)
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        make_topics(
            catalog,
            {"c": (1, {"cleanup.policy": "compact", "min.compaction.lag.ms": str(min_lag)})},
        )
        add_file(store, catalog, "f0", {("c", 0): records})
        buffer = KeyBuffer(entries * ENTRY_BYTES)
        expected = list(records)
        for now in (t1, t2):
            live = catalog.snapshot().files
            if not live:
                break
            job = Job(
                inputs=tuple(JobInput(g.id, g.key, g.size) for g in live),
                output_level=2,
                deduplicate=True,
            )
            run_job(store, catalog, job, buffer, now_ms=now)
            expected = compact(
                expected,
                rules,
                deduplicate=True,
                now_ms=now,
                includes_oldest=True,
                includes_newest=True,
            )
            got = read_live(store, catalog).get(("c", 0), [])
            assert view(got, rules) == view(records, rules)
            if entries > 100:
                assert got == expected
            else:
                assert {r.offset for r in expected} <= {r.offset for r in got}


def test_a_drop_job_reads_nothing_and_drops_only_what_expired() -> None:
    old = [Record(offset=0, timestamp=CUTOFF - 1, key=b"a", value=b"1", headers=())]
    at_cutoff = [Record(offset=1, timestamp=CUTOFF, key=b"a", value=b"2", headers=())]
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        make_topics(
            catalog, {"d": (1, {"cleanup.policy": "delete", "retention.ms": str(RETENTION)})}
        )
        f0 = add_file(store, catalog, "f0", {("d", 0): old})
        f1 = add_file(store, catalog, "f1", {("d", 0): at_cutoff})
        quiet = PlannerConfig(full_compaction_interval_ms=1 << 60)  # no daily compaction
        jobs = plan(catalog.snapshot(), NOW, quiet).jobs
        assert [(j.drop, [i.id for i in j.inputs]) for j in jobs] == [(True, ["f0"])]
        store.gets.reset()  # counts every key's GETs
        report = run_job(store, catalog, jobs[0], KeyBuffer(1 << 20), now_ms=NOW)
        assert report.committed and report.outputs == []
        assert store.gets.get(f0.key) == 0
        assert [f.id for f in catalog.snapshot().files] == ["f1"]
        assert report.stats.dropped_retention == 1

        # f1's record sits exactly at the cutoff: a drop job for it is refused at the
        # commit, and nothing changes.
        forged = replace(jobs[0], inputs=(JobInput(f1.id, f1.key, f1.size),))
        before = catalog.snapshot()
        report = run_job(store, catalog, forged, KeyBuffer(1 << 20), now_ms=NOW)
        assert not report.committed and "retention" in report.note
        assert catalog.snapshot().files == before.files
        assert plan(catalog.snapshot(), NOW, quiet).jobs == ()
        assert [j.drop for j in plan(catalog.snapshot(), NOW + 1, quiet).jobs] == [True]


def _bounded(rules_run: list[str]) -> Callable[[JobReport], None]:
    """An ``on_report`` that fails a ``run_planned`` that goes on and on."""

    def count(report: JobReport) -> None:
        rules_run.append(report.rule)
        assert len(rules_run) < 50, f"compact --until-idle does not end: {rules_run}"

    return count


@st.composite
def stores(draw: st.DrawFn) -> tuple[dict[str, str], list[list[Record]], list[int]]:
    settings_ = {
        "cleanup.policy": draw(st.sampled_from(["compact", "compact,delete", "delete"])),
        "retention.ms": str(draw(st.sampled_from([2_000, 20_000]))),
        "delete.retention.ms": str(draw(st.sampled_from([0, 1_000, 10_000]))),
        "min.compaction.lag.ms": str(draw(st.sampled_from([0, 3_000]))),
        "compaction.strategy": draw(st.sampled_from(["offset", "timestamp"])),
    }
    ingests = []
    offset = 0
    start = NOW - 30_000
    for _ in range(draw(st.integers(1, 5))):
        batch = _records(draw, draw(st.integers(1, 8)), st.integers(start, start + 6_000))
        batch = [replace(r, offset=offset + j, delete_horizon=None) for j, r in enumerate(batch)]
        offset += len(batch)
        ingests.append(batch)
        start += 5_000
    clocks = sorted(draw(st.lists(st.integers(NOW - 10_000, NOW + 40_000), min_size=1, max_size=4)))
    return settings_, ingests, clocks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores(), st.sampled_from([1, 4, 1 << 16]))
def test_until_idle_terminates_and_keeps_every_view(
    case: tuple[dict[str, str], list[list[Record]], list[int]], entries: int
) -> None:
    """Planner and worker together, with every time rule in play and small key buffers:
    each ``compact --until-idle`` ends, and for each key the latest value is the one
    ingested or (retention) none."""
    topic_settings, ingests, clocks = case
    planner = PlannerConfig(
        level_trigger_files=2,
        tombstone_buffer_ms=0,
        retention_max_delay_ms=0,
        max_lag_buffer_ms=0,
        max_lag_deadline_ms=1,
    )
    rules = TopicRules(strategy=topic_settings["compaction.strategy"])
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        make_topics(catalog, {"t": (1, topic_settings)})
        for i, batch in enumerate(ingests):
            add_file(store, catalog, f"f{i}", {("t", 0): batch})
        every = [r for batch in ingests for r in batch]
        truth = view(every, rules)
        compactor = Compactor(store, key_buffer_bytes=entries * ENTRY_BYTES)
        for now in clocks:
            compactor.run_planned(now, planner, until_idle=True, on_report=_bounded([]))
            live = read_live(store, catalog).get(("t", 0), [])
            assert verify_store(catalog, catalog.snapshot()).ok
            if "compact" not in topic_settings["cleanup.policy"]:
                continue
            got = view(live, rules)
            for key, value in got.items():
                assert truth.get(key) == value, f"key {key!r} shows a value it did not end with"
            if topic_settings["cleanup.policy"] == "compact":
                assert got == truth
        # A full compaction applies everything due: right after it, nothing is.
        full = compactor.run_planned(clocks[-1], planner, full=True)
        assert all(r.committed for r in full)
        assert full_plan(catalog.snapshot(), clocks[-1], planner).jobs == ()
