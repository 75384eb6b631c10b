"""WorkerError: what only the worker can find. An input object replaced while a job runs
(the two pointers disagree), or one holding a topic the catalog does not know, fails the
job with an error naming the job (and the partition); nothing is committed or written."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
from worker_scenarios import add_file, make_topics

from compactor.catalog import Catalog, TopicConfig
from compactor.fileformat import FileWriter, Record, records_to_batch
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import LocalStore, ObjectStore, ObjectStream
from compactor.planner.job import Job, JobInput
from compactor.worker.errors import PhaseMismatch, WorkerError
from compactor.worker.kernel import KeyBuffer
from compactor.worker.partition import phase1_windows, phase2_windows
from compactor.worker.pipeline import Phase1Mode
from compactor.worker.policy import PartitionPolicy
from compactor.worker.runner import run_job
from compactor.worker.stats import CompactionStats

NOW = 1_700_000_000_000


def _records(n: int, first: int = 0) -> list[Record]:
    return [Record(first + i, NOW, b"k%d" % (i % 3), b"v%d" % i) for i in range(n)]


def _object(sections: dict[tuple[str, int], list[Record]], share_below: int = 0) -> bytes:
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name="replacement", share_below=share_below)
    for (topic, partition), records in sorted(sections.items()):
        writer.write_section(topic, partition, [records_to_batch(records)])
    writer.finish()
    return sink.getvalue()


class SwappingStore(LocalStore):
    """Serves the second stream of ``key`` (phase 2's) from another object: as if the
    input had been replaced between the two GETs."""

    def __init__(self, root: Path, key: str, other: str) -> None:
        super().__init__(root)
        self.key, self.other, self.opened = key, other, 0

    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        if key == self.key:
            self.opened += 1
            if self.opened == 2:
                key = self.other
        return super().open_stream(key, start, buffer_size=buffer_size)


def _objects(store: ObjectStore) -> dict[str, bytes]:
    return {o.key: store.get(o.key)[0] for o in store.list("")}


def _job_over_two_files(store: ObjectStore) -> tuple[Catalog, Job, str]:
    catalog = Catalog(store)
    make_topics(catalog, {"t": (2, {"cleanup.policy": "compact"})})
    first = add_file(store, catalog, "f0", {("t", 0): _records(30), ("t", 1): _records(30)})
    add_file(store, catalog, "f1", {("t", 0): _records(30, 30), ("t", 1): _records(30, 30)})
    live = catalog.snapshot().files
    return catalog, Job(tuple(JobInput(f.id, f.key, f.size) for f in live), 2, True), first.key


@pytest.mark.parametrize("phase1", ["inline", "thread"])  # a SwappingStore stays here
@pytest.mark.parametrize(
    ("replacement", "reason"),
    [
        ({("t", 0): _records(10), ("t", 1): _records(30)}, "ended before phase 1's"),
        ({("t", 0): _records(40), ("t", 1): _records(20)}, "never saw"),
        ({("s", 0): _records(30), ("t", 1): _records(30)}, "phase 2's pointer is at s/0"),
    ],
    ids=["fewer records", "more records", "other partition"],
)
def test_an_input_replaced_between_the_phases_is_a_phase_mismatch(
    tmp_path: Path,
    replacement: dict[tuple[str, int], list[Record]],
    reason: str,
    phase1: Phase1Mode,
) -> None:
    store = SwappingStore(tmp_path / "store", "data/L0/f0.cf", "other.cf")
    catalog, job, victim = _job_over_two_files(store)
    data = _object(replacement)
    assert len(data) <= store.head(victim).size  # never read past the recorded size
    store.put("other.cf", data)
    snap_before, objects_before = catalog.snapshot(), _objects(store)
    with pytest.raises(PhaseMismatch) as failure:
        run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW, phase1=phase1)
    error = failure.value
    assert (error.job_id, error.topic, error.partition) == (job.id, "t", 0)
    assert str(error).startswith(f"job {job.id}: partition t/0: phase 2's pointer")
    assert reason in str(error)
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before


@pytest.mark.parametrize("phase1", ["inline", "thread"])  # a SwappingStore stays here
@pytest.mark.parametrize(
    ("replacement", "partition", "reason"),
    [
        (
            {("t", 0): _records(30), ("t", 2): _records(10)},
            2,
            "phase 2's pointer holds 40 records, phase 1's held 60",
        ),
        (
            {("t", 0): _records(30)},
            2,
            "phase 2's pointer holds 30 records, phase 1's held 60",
        ),
        (
            {("t", 0): _records(30), ("t", 1): _records(30), ("t", 2): _records(30)},
            1,
            "phase 2's pointer has a section of this partition, which phase 1's group does not",
        ),
    ],
    ids=["fewer records", "partition missing", "partition added"],
)
def test_a_group_replaced_between_the_phases_is_a_phase_mismatch(
    tmp_path: Path,
    replacement: dict[tuple[str, int], list[Record]],
    partition: int,
    reason: str,
    phase1: Phase1Mode,
) -> None:
    """Small partitions in shared blocks share one window (``worker.group``): phase 2
    takes the group's partitions as runs of blocks, and a partition phase 1's group lacks,
    or one with other records than phase 1 saw, fails the job naming it. (Partition 4,
    too big to share a block, ends the group before phase 2 reaches the replaced file's
    end, where its size would be the error.)"""
    store = SwappingStore(tmp_path / "store", "data/L0/f0.cf", "other.cf")
    catalog = Catalog(store)
    make_topics(catalog, {"t": (5, {"cleanup.policy": "compact"})})
    old = {("t", 0): _records(30), ("t", 2): _records(30)}
    new = {("t", 0): _records(30, 30), ("t", 2): _records(30, 30)}
    big = [Record(i, NOW, b"b%d" % i, b"x" * 1000) for i in range(200)]
    old[("t", 4)] = new[("t", 4)] = replacement[("t", 4)] = big
    add_file(store, catalog, "f0", old, share_below=SHARE_BELOW)
    add_file(store, catalog, "f1", new, share_below=SHARE_BELOW)
    live = catalog.snapshot().files
    job = Job(tuple(JobInput(f.id, f.key, f.size) for f in live), 2, True)
    store.put("other.cf", _object(replacement, SHARE_BELOW))
    snap_before, objects_before = catalog.snapshot(), _objects(store)
    with pytest.raises(PhaseMismatch) as failure:
        run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW, phase1=phase1)
    error = failure.value
    assert (error.job_id, error.topic, error.partition) == (job.id, "t", partition)
    assert str(error).startswith(f"job {job.id}: partition t/{partition}: {reason}")
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before


def test_an_input_holding_an_unknown_topic_is_a_worker_error(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    catalog, job, victim = _job_over_two_files(store)
    data = _object({("ghost", 0): _records(1)})
    assert len(data) < store.head(victim).size
    store.put(victim, data)
    snap_before, objects_before = catalog.snapshot(), _objects(store)
    with pytest.raises(WorkerError) as failure:
        run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW)
    assert failure.value.job_id == job.id
    assert str(failure.value).startswith(f"job {job.id}: an input holds a section of topic 'ghost'")
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before


def test_phase_2_alone_names_neither_job_nor_partition() -> None:
    """worker.partition sees one partition's records only: the runner locates the error."""
    policy = PartitionPolicy.for_partition(
        TopicConfig.parse({"cleanup.policy": "compact"}),
        deduplicate=True,
        now_ms=NOW,
        includes_oldest=True,
        includes_newest=True,
    )
    batches = [records_to_batch(_records(5))]
    windows = list(phase1_windows(batches, policy, KeyBuffer(1 << 20)))
    with pytest.raises(PhaseMismatch) as failure:
        list(phase2_windows(batches[:0], windows, policy, CompactionStats()))
    assert str(failure.value) == "phase 2's pointer ended before phase 1's"
    failure.value.locate("j1", "t", 3)
    assert str(failure.value) == "job j1: partition t/3: phase 2's pointer ended before phase 1's"


@pytest.mark.parametrize(
    "error",
    [
        WorkerError("the planner proposed this job twice; stopping", job_id="j1"),
        WorkerError("no job yet"),
        PhaseMismatch("phase 2's pointer is at t/2", job_id="j1", topic="t", partition=1),
    ],
)
def test_worker_errors_pickle(error: WorkerError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.__dict__ == error.__dict__
