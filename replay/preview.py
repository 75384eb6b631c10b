"""What running a job document would do, decided without changing anything: the dry run
of ``compactor replay``.

A preview reads the catalog (its newest snapshot, and one manifest per live input for
the partitions touched) and nothing else: no lease, no GET of a data file, no commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.catalog import Catalog, CommitConflict, LiveFile, Snapshot
from compactor.catalog.changes import check_unleased
from compactor.fileformat import SectionMeta
from compactor.planner.job import Job
from compactor.worker.errors import InputMismatch
from compactor.worker.runner import check_job

READY, STALE, LEASED, COMMITTED, MISMATCH = "ready", "stale", "leased", "committed", "mismatch"
"""A preview's status: the job would run now; its inputs are no longer a live run
(another job replaced them); another job's lease holds one of them; (a job from the
history) its own commit replaced them; it names a live input's id with another key or
size than the catalog's (``worker.errors.InputMismatch``: it would never run)."""


@dataclass(frozen=True, slots=True)
class InputPreview:
    id: str
    key: str
    size: int
    level: int | None
    """None once the file has left the catalog."""
    records: int | None


@dataclass(frozen=True, slots=True)
class JobPreview:
    job: Job
    status: str
    why: str
    """Why the job would not run; empty when ``status`` is READY."""
    inputs: tuple[InputPreview, ...]
    topics: dict[str, list[int]]
    """The topics and partitions the inputs hold (only inputs still live are known)."""

    @property
    def expected_gets(self) -> int:
        """Two GET streams per input file (phase 1 and phase 2); none for a drop job."""
        return 0 if self.job.drop else 2 * len(self.job.inputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job.to_json(),
            "status": self.status,
            "why": self.why,
            "inputs": [
                {"id": i.id, "key": i.key, "size": i.size, "level": i.level, "records": i.records}
                for i in self.inputs
            ],
            "output_level": None if self.job.drop else self.job.output_level,
            "deduplicate": self.job.deduplicate,
            "drop": self.job.drop,
            "expected_gets": self.expected_gets,
            "topics": self.topics,
        }


def preview_job(
    catalog: Catalog, job: Job, now_ms: int, *, committed_by: int | None = None
) -> JobPreview:
    """The dry run of ``job`` against the catalog's newest state, at ``now_ms`` (the
    catalog's clock, which leases run on). ``committed_by``: the version of the commit
    that ran this job (a job from the history), which then reads as COMMITTED, not
    STALE."""
    snap = catalog.snapshot()
    status, why = _status(snap, job, now_ms)
    if status == STALE and committed_by is not None:
        status, why = COMMITTED, f"commit {committed_by} ran this job"
    live = {f.id: f for f in snap.files}
    inputs = tuple(_input(i.id, i.key, i.size, live.get(i.id)) for i in job.inputs)
    held = [live[i.id] for i in job.inputs if i.id in live]
    return JobPreview(job, status, why, inputs, touched_partitions(held, catalog.sections))


def _status(snap: Snapshot, job: Job, now_ms: int) -> tuple[str, str]:
    try:
        check_job(snap, job)
    except CommitConflict as stale:
        return STALE, str(stale).removeprefix(f"job {job.id}: ")
    except InputMismatch as mismatch:
        return MISMATCH, mismatch.reason
    try:
        check_unleased(snap, [i.id for i in job.inputs], job.id, now_ms)
    except CommitConflict as leased:
        return LEASED, str(leased)
    return READY, ""


def _input(file_id: str, key: str, size: int, live: LiveFile | None) -> InputPreview:
    if live is None:
        return InputPreview(file_id, key, size, None, None)
    return InputPreview(file_id, key, size, live.level, live.record_count)


def touched_partitions(
    files: Sequence[LiveFile], sections: Callable[[LiveFile], Sequence[SectionMeta]]
) -> dict[str, list[int]]:
    """Topic -> its partitions, sorted, that ``files`` hold (``sections``: a file's
    sections, from its manifest)."""
    touched: dict[str, set[int]] = {}
    for f in files:
        for s in sections(f):
            touched.setdefault(s.topic, set()).add(s.partition)
    return {t: sorted(ps) for t, ps in sorted(touched.items())}
