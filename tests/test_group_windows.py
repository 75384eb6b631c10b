"""Windows that span partitions (worker.group) against the Kafka model: many small
partitions of two compacted topics with different delete horizons, in version-3 inputs,
compacted in shared windows; and the fallback when one window cannot hold a group."""

from __future__ import annotations

import tempfile

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_model import TopicRules, compact, view
from test_worker_model import NOW, partition_records
from worker_scenarios import add_file, make_topics, read_file, read_live

from compactor.catalog import Catalog
from compactor.fileformat import Record, records_to_batch
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.group import group_window, salted_keys
from compactor.worker.kernel import ENTRY_BYTES, KeyBuffer
from compactor.worker.policy import PartitionPolicy
from compactor.worker.runner import run_job

TOPICS = {"a": 0, "b": 86_400_000}
"""Two compacted topics under one strategy, with different delete.retention.ms."""
FILES = 3


def _settings(delete_retention_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "compact", "delete.retention.ms": str(delete_retention_ms)}


def _rules(delete_retention_ms: int) -> TopicRules:
    return TopicRules(compacted=True, strategy="offset", delete_retention_ms=delete_retention_ms)


def _run(
    partitions: dict[tuple[str, int], list[list[Record]]], first: int, buffer: KeyBuffer
) -> None:
    """Compacts files ``first``.. of ``partitions`` (records per file) and checks each
    partition against the model (exactly, with a buffer that holds every group; never
    fewer records otherwise) and the materialized view."""
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        count = max(p for _, p in partitions) + 1
        make_topics(catalog, {t: (count, _settings(ms)) for t, ms in TOPICS.items()})
        files = [
            add_file(
                store,
                catalog,
                f"f{i}",
                {tp: chunks[i] for tp, chunks in partitions.items()},
                share_below=SHARE_BELOW,
            )
            for i in range(FILES)
        ]
        job = Job(
            inputs=tuple(JobInput(f.id, f.key, f.size) for f in files[first:]),
            output_level=2,
            deduplicate=True,
        )
        before = read_live(store, catalog)
        report = run_job(store, catalog, job, buffer, now_ms=NOW)
        assert report.committed
        assert all(f.gets == 2 for f in report.inputs)
        out: dict[tuple[str, int], list[Record]] = {}
        for key in report.outputs:
            out.update(read_file(store, key))
        after = read_live(store, catalog)
        exact = buffer.capacity >= 1000
        deduplicated = [tp for tp, chunks in partitions.items() if any(chunks[first:])]
        if exact:  # a few groups, not a window per partition
            assert report.stats.windows < len(deduplicated) or len(deduplicated) <= 1
        for tp, chunks in partitions.items():
            rules = _rules(TOPICS[tp[0]])
            holding = [i for i, c in enumerate(chunks) if c]
            inp = [r for chunk in chunks[first:] for r in chunk]
            expected = compact(
                inp,
                rules,
                deduplicate=True,
                now_ms=NOW,
                includes_oldest=bool(holding) and first <= holding[0],
                includes_newest=True,
            )
            got = out.get(tp, [])
            if exact:
                assert got == expected, tp
            else:
                assert {r.offset for r in expected} <= {r.offset for r in got}, tp
            assert view(after.get(tp, []), rules) == view(before.get(tp, []), rules), tp


@st.composite
def small_partitions(draw: st.DrawFn) -> dict[tuple[str, int], list[list[Record]]]:
    count = draw(st.integers(1, 12))
    out = {}
    for topic in TOPICS:
        for p in range(count):
            records = draw(partition_records())
            cuts = sorted(draw(st.lists(st.integers(0, len(records)), min_size=2, max_size=2)))
            out[(topic, p)] = [records[: cuts[0]], records[cuts[0] : cuts[1]], records[cuts[1] :]]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_partitions(), st.integers(0, FILES - 1))
def test_small_partitions_share_windows_and_match_the_model(
    partitions: dict[tuple[str, int], list[list[Record]]], first: int
) -> None:
    _run(partitions, first, KeyBuffer(1 << 20))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_partitions(), st.integers(0, FILES - 1), st.integers(1, 12))
def test_a_group_one_window_cannot_hold_is_compacted_partition_by_partition(
    partitions: dict[tuple[str, int], list[list[Record]]], first: int, entries: int
) -> None:
    _run(partitions, first, KeyBuffer(entries * ENTRY_BYTES))


def test_equal_keys_of_different_partitions_never_meet() -> None:
    """Salting is injective: a key of one partition never equals another partition's key,
    even where its bytes end as another key's salt would."""
    keys = [b"k", b"k", b"k\x00\x00\x00\x01", b"k", None, b""]
    counts = [1, 1, 1, 2, 1]
    salted = salted_keys(pa.array(keys, pa.binary()), counts).to_pylist()
    assert salted == [
        b"k\x00\x00\x00\x00",
        b"k\x00\x00\x00\x01",
        b"k\x00\x00\x00\x01\x00\x00\x00\x02",
        b"k\x00\x00\x00\x03",
        None,
        b"\x00\x00\x00\x04",
    ]
    batch = records_to_batch(
        [Record(offset=i + 10, timestamp=0, key=k, value=b"v") for i, k in enumerate(keys)]
    )
    policy = PartitionPolicy(True, "offset", None, NOW, None, None, NOW, False)
    window = group_window(batch, counts, policy, KeyBuffer(1 << 20))
    assert window is not None
    keep, _ = window
    # Every key is its partition's only one but in partition 3 (rows 3 and 4: the null
    # key takes no part), so rows 0, 1, 2, 3 and 5 win, as sequence numbers.
    assert keep.winners.to_pylist() == [0, 1, 2, 3, 5]


def test_a_group_too_big_for_the_buffer_is_refused() -> None:
    batch = records_to_batch(
        [Record(offset=i, timestamp=0, key=b"k%d" % i, value=b"v") for i in range(3)]
    )
    policy = PartitionPolicy(True, "offset", None, NOW, None, None, NOW, False)
    assert group_window(batch, [3], policy, KeyBuffer(2 * ENTRY_BYTES)) is None
