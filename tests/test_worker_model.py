"""The worker against the independent model of Kafka semantics (tests/kafka_model.py):
random records, tombstones, null keys, headers, all three strategies, min lag,
compact,delete, delete horizons, buffers from one entry to the default 128 MiB, phase 1
inline or on its own thread."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_model import TopicRules, compact, view
from worker_scenarios import add_file, make_topics, read_file, read_live

from compactor.catalog import Catalog
from compactor.catalog.verify import verify_store
from compactor.fileformat import Record
from compactor.fileformat.writer import BLOCK_BYTES, SHARE_BELOW
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import ENTRY_BYTES, KeyBuffer
from compactor.worker.pipeline import PHASE1_MODES, Phase1Mode
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000
KEYS = [b"a", b"b", b"c", b"d", b"e", b"\x00\xff"]
FULL_SIZE = (128 << 20) // ENTRY_BYTES
"""The default 128 MiB buffer, in entries: one instance, reused by every example that draws
it, as a worker process reuses its buffer for every partition and job."""
_full_size_buffer: list[KeyBuffer] = []


def _buffer(entries: int) -> KeyBuffer:
    if entries != FULL_SIZE:
        return KeyBuffer(entries * ENTRY_BYTES)
    if not _full_size_buffer:
        _full_size_buffer.append(KeyBuffer(128 << 20))
    return _full_size_buffer[0]


@st.composite
def topic_rules(draw: st.DrawFn) -> TopicRules:
    strategy = draw(st.sampled_from(["offset", "timestamp", "header"]))
    return TopicRules(
        compacted=True,
        strategy=strategy,
        header="v" if strategy == "header" else None,
        min_lag_ms=draw(st.sampled_from([0, 0, 500, 5_000])),
        retention_ms=draw(st.sampled_from([None, None, 3_000, 8_000])),
        delete_retention_ms=draw(st.sampled_from([0, 1_000, 86_400_000])),
    )


def settings_of(rules: TopicRules) -> dict[str, str]:
    s = {
        "cleanup.policy": "compact" if rules.retention_ms is None else "compact,delete",
        "compaction.strategy": rules.strategy,
        "min.compaction.lag.ms": str(rules.min_lag_ms),
        "delete.retention.ms": str(rules.delete_retention_ms),
    }
    if rules.retention_ms is not None:
        s["retention.ms"] = str(rules.retention_ms)
    if rules.header:
        s["compaction.strategy.header"] = rules.header
    return s


def plain_settings(rules: TopicRules) -> dict[str, str]:
    retention = -1 if rules.retention_ms is None else rules.retention_ms
    return {"cleanup.policy": "delete", "retention.ms": str(retention)}


header_entries = st.one_of(
    st.tuples(st.just("v"), st.integers(-3, 3).map(lambda v: v.to_bytes(8, "big", signed=True))),
    st.tuples(st.just("v"), st.binary(max_size=4)),  # wrong length: no header value
    st.tuples(st.just("other"), st.binary(max_size=3)),
)


@st.composite
def partition_records(draw: st.DrawFn) -> list[Record]:
    n = draw(st.integers(0, 40))
    offset = draw(st.integers(0, 5))
    out = []
    for _ in range(n):
        value = draw(st.one_of(st.none(), st.binary(max_size=6)))
        horizon = None
        if value is None:
            horizon = draw(st.sampled_from([None, None, NOW - 10, NOW, NOW + 10]))
        out.append(
            Record(
                offset=offset,
                timestamp=NOW - draw(st.integers(0, 10_000)),
                key=draw(st.one_of(st.sampled_from(KEYS), st.none())),
                value=value,
                headers=tuple(draw(st.lists(header_entries, max_size=2))),
                delete_horizon=horizon,
            )
        )
        offset += draw(st.integers(1, 3))
    return out


@dataclass
class Scenario:
    rules: TopicRules
    partitions: list[list[Record]]
    plain: list[Record]
    files: int
    first: int
    last: int
    deduplicate: bool
    buffer_entries: int
    phase1: Phase1Mode
    plain_rules: TopicRules
    """The delete topic "d": retention.ms forever, or short enough to expire records."""
    share_below: int
    """The input files' writers' (0: version 2; else small sections share blocks, so
    their partitions are compacted in windows that span partitions)."""
    block_bytes: int


_SHARING = [
    {"share_below": share, "block_bytes": block}
    for share, block in [
        (0, BLOCK_BYTES),
        (200, 400),
        (200, BLOCK_BYTES),
        (SHARE_BELOW, BLOCK_BYTES),
    ]
]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    files = draw(st.integers(1, 4))
    first = draw(st.integers(0, files - 1))
    last = draw(st.integers(first + 1, files))
    return Scenario(
        rules=draw(topic_rules()),
        partitions=draw(st.lists(partition_records(), min_size=1, max_size=3)),
        plain=draw(partition_records()),
        files=files,
        first=first,
        last=last,
        deduplicate=draw(st.booleans()),
        buffer_entries=draw(st.sampled_from([1, 2, 3, 7, 10_000, FULL_SIZE])),
        phase1=draw(st.sampled_from(PHASE1_MODES)),
        plain_rules=TopicRules(
            compacted=False, retention_ms=draw(st.sampled_from([None, 0, 3_000, 8_000]))
        ),
        **draw(st.sampled_from(_SHARING)),
    )


def _chunks(records: list[Record], n: int) -> list[list[Record]]:
    size = -(-len(records) // n) if records else 0
    return [records[i * size : (i + 1) * size] for i in range(n)]


Chunked = dict[tuple[str, int], list[list[Record]]]


def set_up(store: LocalStore, catalog: Catalog, sc: Scenario) -> tuple[Chunked, list[Any], Job]:
    """The scenario's topics and files in the store; each partition's records per file,
    the files, and the job over files ``first`` to ``last``."""
    make_topics(
        catalog,
        {
            "t": (len(sc.partitions), settings_of(sc.rules)),
            "d": (1, plain_settings(sc.plain_rules)),
        },
    )
    chunked = {("t", p): _chunks(recs, sc.files) for p, recs in enumerate(sc.partitions)}
    chunked[("d", 0)] = _chunks(sc.plain, sc.files)
    files = [
        add_file(
            store,
            catalog,
            f"f{i}",
            {tp: chunks[i] for tp, chunks in chunked.items()},
            share_below=sc.share_below,
            block_bytes=sc.block_bytes,
        )
        for i in range(sc.files)
    ]
    job = Job(
        inputs=tuple(JobInput(f.id, f.key, f.size) for f in files[sc.first : sc.last]),
        output_level=2 if sc.deduplicate else 1,
        deduplicate=sc.deduplicate,
    )
    return chunked, files, job


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_worker_matches_kafka_model(sc: Scenario) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        chunked, files, job = set_up(store, catalog, sc)
        before = read_live(store, catalog)
        buffer = _buffer(sc.buffer_entries)
        report = run_job(store, catalog, job, buffer, now_ms=NOW, phase1=sc.phase1)
        assert report.committed
        assert report.phase1 == sc.phase1
        assert all(f.gets == 2 for f in report.inputs)
        snap = catalog.snapshot()
        assert [f.id for f in snap.files[: sc.first]] == [f.id for f in files[: sc.first]]
        assert verify_store(catalog, snap).ok

        outputs = {key: read_file(store, key) for key in report.outputs}
        for key, sections in outputs.items():
            topics = {tp[0] for tp in sections}
            assert len(topics) <= 1, f"{key} mixes compacted and plain topics"
        out: dict[tuple[str, int], list[Record]] = {}
        for sections in outputs.values():
            for tp, recs in sections.items():
                out[tp] = recs
        after = read_live(store, catalog)
        big_buffer = sc.buffer_entries >= 10_000
        for tp, chunks in chunked.items():
            inp = [r for chunk in chunks[sc.first : sc.last] for r in chunk]
            got = out.get(tp, [])
            rules = sc.rules if tp[0] == "t" else sc.plain_rules
            holding = [i for i, c in enumerate(chunks) if c]
            oldest = bool(holding) and sc.first <= holding[0]
            newest = bool(holding) and holding[-1] < sc.last
            expected = compact(
                inp,
                rules,
                deduplicate=sc.deduplicate,
                now_ms=NOW,
                includes_oldest=oldest,
                includes_newest=newest,
            )
            rehorizon = (
                sc.deduplicate
                and rules.compacted
                and oldest
                and (rules.strategy == "offset" or newest)
            )
            _check_partition(tp, inp, got, expected, rules, big_buffer, rehorizon)
            if rules.retention_ms is None:
                assert view(after.get(tp, []), rules) == view(before.get(tp, []), rules)
        records_out = sum(len(v) for v in out.values())
        assert report.stats.records_out == records_out
        tombstones = sum(r.value is None for v in out.values() for r in v)
        assert report.stats.tombstones_kept == tombstones
        assert report.stats.records_in == sum(
            len(c) for chunks in chunked.values() for c in chunks[sc.first : sc.last]
        )


def _content(r: Record) -> tuple[object, ...]:
    return (r.offset, r.timestamp, r.key, r.value, r.headers)


def _check_partition(
    tp: tuple[str, int],
    inp: list[Record],
    got: list[Record],
    expected: list[Record],
    rules: TopicRules,
    big_buffer: bool,
    rehorizon: bool,
) -> None:
    """``rehorizon``: the job may give a tombstone past its horizon a new one."""
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), f"{tp}: offsets not strictly increasing"
    by_offset = {r.offset: r for r in inp}
    for r in got:
        src = by_offset.get(r.offset)
        assert src is not None and _content(src) == _content(r), f"{tp}: record {r.offset} altered"
        if r.delete_horizon != src.delete_horizon:
            past = src.delete_horizon is not None and src.delete_horizon <= NOW and rehorizon
            assert r.value is None, f"{tp}: horizon set on a value"
            assert src.delete_horizon is None or past, f"{tp}: horizon rewritten"
            assert r.delete_horizon == NOW + max(1, rules.delete_retention_ms)
    if big_buffer:
        assert got == expected, f"{tp}: differs from the model"
    else:
        # Windows may keep extra copies and tombstones, never fewer records.
        kept = {r.offset for r in got}
        missing = [r.offset for r in expected if r.offset not in kept]
        assert not missing, f"{tp}: model keeps {missing}, worker dropped them"
