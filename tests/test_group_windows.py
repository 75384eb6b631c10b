"""Windows that span partitions (worker.group) against the Kafka model: many small
partitions of two compacted topics with different delete horizons, in version-3 inputs,
under every strategy and time rule, compacted in shared windows; and with buffers of a
few entries, the fallback when one window cannot hold a group."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from unittest import mock

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_model import TopicRules, compact, view
from test_worker_model import (
    FULL_SIZE,
    NOW,
    _buffer,
    _check_partition,
    partition_records,
    settings_of,
    topic_rules,
)
from worker_scenarios import add_file, make_topics, read_file, read_live

from compactor.catalog import Catalog
from compactor.fileformat import Record, records_to_batch
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker import pipeline
from compactor.worker.group import group_window, salted_keys, sequence
from compactor.worker.kernel import ENTRY_BYTES, KeyBuffer
from compactor.worker.pipeline import Phase1Mode
from compactor.worker.policy import PartitionPolicy
from compactor.worker.runner import run_job

FILES = 3
DELETE_RETENTION = {"a": 0, "b": 86_400_000}
"""Two compacted topics under one strategy, with different delete.retention.ms."""


@dataclass
class GroupScenario:
    rules: TopicRules
    """Topic "a"'s; topic "b" differs only in delete.retention.ms."""
    partitions: dict[tuple[str, int], list[list[Record]]]
    """Each partition's records, per file."""
    first: int
    """The job compacts files ``first``..."""
    buffer_entries: int
    group_bytes: int | None
    """A smaller ``GROUP_BYTES`` (phase 1 then runs in this process), so that groups
    close on their weight; None: the default, which these few records never reach."""

    def rules_of(self, topic: str) -> TopicRules:
        return replace(self.rules, delete_retention_ms=DELETE_RETENTION[topic])


@st.composite
def group_scenarios(draw: st.DrawFn) -> GroupScenario:
    rules = draw(topic_rules())
    if draw(st.integers(0, 3)):  # mostly no min.compaction.lag.ms: groups form
        rules = replace(rules, min_lag_ms=0)
    count = draw(st.integers(1, 12))
    partitions = {}
    for topic in DELETE_RETENTION:
        for p in range(count):
            records = draw(partition_records())
            cuts = sorted(draw(st.lists(st.integers(0, len(records)), min_size=2, max_size=2)))
            partitions[(topic, p)] = [
                records[: cuts[0]],
                records[cuts[0] : cuts[1]],
                records[cuts[1] :],
            ]
    return GroupScenario(
        rules=rules,
        partitions=partitions,
        first=draw(st.integers(0, FILES - 1)),
        buffer_entries=draw(st.sampled_from([1, 2, 3, 7, 12, 10_000, FULL_SIZE])),
        group_bytes=draw(st.sampled_from([None, None, 1, 200, 2_000])),
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_scenarios())
def test_small_partitions_share_windows_and_match_the_model(sc: GroupScenario) -> None:
    """Compacts files ``first``.. and checks each partition against the model (exactly,
    with a buffer that holds every group; never fewer records otherwise) and the
    materialized view."""
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        count = max(p for _, p in sc.partitions) + 1
        make_topics(
            catalog,
            {t: (count, settings_of(sc.rules_of(t))) for t in DELETE_RETENTION},
        )
        files = [
            add_file(
                store,
                catalog,
                f"f{i}",
                {tp: chunks[i] for tp, chunks in sc.partitions.items()},
                share_below=SHARE_BELOW,
            )
            for i in range(FILES)
        ]
        job = Job(
            inputs=tuple(JobInput(f.id, f.key, f.size) for f in files[sc.first :]),
            output_level=2,
            deduplicate=True,
        )
        before = read_live(store, catalog)
        with contextlib.ExitStack() as patched:
            phase1: Phase1Mode | None = None
            if sc.group_bytes is not None:
                patched.enter_context(mock.patch.object(pipeline, "GROUP_BYTES", sc.group_bytes))
                phase1 = "inline"  # the limit is this process's: phase 1 must run here
            report = run_job(
                store, catalog, job, _buffer(sc.buffer_entries), now_ms=NOW, phase1=phase1
            )
        assert report.committed
        assert all(f.gets == 2 for f in report.inputs)
        out: dict[tuple[str, int], list[Record]] = {}
        for key in report.outputs:
            out.update(read_file(store, key))
        after = read_live(store, catalog)
        big_buffer = sc.buffer_entries >= 10_000
        compacted = [tp for tp, chunks in sc.partitions.items() if any(chunks[sc.first :])]
        if big_buffer and sc.rules.min_lag_ms == 0 and len(compacted) > 1 and not sc.group_bytes:
            assert report.stats.windows < len(compacted), "no window spans partitions"
        if sc.group_bytes == 1:  # every group closes after its first partition
            assert report.stats.windows >= len(compacted)
        assert report.stats.records_out == sum(len(v) for v in out.values())
        tombstones = sum(r.value is None for v in out.values() for r in v)
        assert report.stats.tombstones_kept == tombstones
        assert report.stats.partitions == len(compacted)
        for tp, chunks in sc.partitions.items():
            rules = sc.rules_of(tp[0])
            holding = [i for i, c in enumerate(chunks) if c]
            oldest = bool(holding) and sc.first <= holding[0]
            inp = [r for chunk in chunks[sc.first :] for r in chunk]
            expected = compact(
                inp,
                rules,
                deduplicate=True,
                now_ms=NOW,
                includes_oldest=oldest,
                includes_newest=True,
            )
            _check_partition(tp, inp, out.get(tp, []), expected, rules, big_buffer, oldest)
            if rules.retention_ms is None:
                assert view(after.get(tp, []), rules) == view(before.get(tp, []), rules), tp


def test_equal_keys_of_different_partitions_never_meet() -> None:
    """Salting is injective: a key of one partition never equals another partition's key,
    even where its bytes end as another key's salt would."""

    def salt(ordinal: int) -> bytes:  # an int32's bytes, in the machine's order
        return ordinal.to_bytes(4, sys.byteorder)

    keys = [b"k", b"k", b"k" + salt(1), b"k", None, b"", b"k"]
    labels = pa.array([0, 1, 2, 3, 3, 4, 0], pa.int32())  # rows of partition 0 apart
    salted = salted_keys(pa.array(keys, pa.binary()), labels).to_pylist()
    assert salted == [
        b"k" + salt(0),
        b"k" + salt(1),
        b"k" + salt(1) + salt(2),
        b"k" + salt(3),
        None,
        salt(4),
        b"k" + salt(0),
    ]
    assert salted_keys(pa.array(keys[1:], pa.binary()), labels.slice(1)).to_pylist() == (salted[1:])
    batch = records_to_batch(
        [Record(offset=i + 10, timestamp=0, key=k, value=b"v") for i, k in enumerate(keys)]
    )
    policy = PartitionPolicy(True, "offset", None, NOW, None, None, NOW, False)
    window = group_window(batch, labels, policy, KeyBuffer(1 << 20))
    assert window is not None
    keep, _ = window
    # Every key is its partition's only one but in partitions 0 (rows 0 and 6: the later
    # wins) and 3 (rows 3 and 4: the null key takes no part), so rows 1, 2, 3, 5 and 6
    # win, as sequence numbers.
    assert keep.winners.to_pylist() == [1, 2, 3, 5, 6]


def test_a_group_too_big_for_the_buffer_is_refused() -> None:
    batch = records_to_batch(
        [Record(offset=i, timestamp=0, key=b"k%d" % i, value=b"v") for i in range(3)]
    )
    policy = PartitionPolicy(True, "offset", None, NOW, None, None, NOW, False)
    labels = pa.array([0, 0, 0], pa.int32())
    assert group_window(batch, labels, policy, KeyBuffer(2 * ENTRY_BYTES)) is None


def test_sequence_numbers_past_the_cached_ones_from_two_threads() -> None:
    """Phase 1 on its own thread and phase 2 both ask for sequence numbers; each gets all
    it asked for, whichever grows the shared array."""
    sizes = [70_000 + 1_000 * i for i in range(40)]
    got: dict[int, list[int]] = {}

    def ask(part: list[int]) -> None:
        for n in part:
            numbers = sequence(n)
            got[n] = [len(numbers), numbers[0].as_py(), numbers[n - 1].as_py()]

    threads = [threading.Thread(target=ask, args=(sizes[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {n: [n, 0, n - 1] for n in sizes}
