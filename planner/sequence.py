"""Facts about files of the live sequence that every rule reads.

Everything here is a pure function of catalog state. A job's inputs are a contiguous
slice of the live sequence, so rules work on *runs*: maximal slices of files that no
other job holds and that may be compacted at all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from compactor.catalog import LiveFile, Snapshot, Topic
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job, JobInput, Numbers

Run = Sequence[LiveFile]


def output_group(f: LiveFile, topics: Mapping[str, Topic]) -> str:
    """ "compacted" or "plain" (as the worker writes them); "mixed" for an L0 file of both."""
    kinds = {topics[t].config.compacted for t in f.topic_names if t in topics}
    if kinds == {True}:
        return "compacted"
    if kinds == {False}:
        return "plain"
    return "mixed"


def too_large(f: LiveFile, config: PlannerConfig) -> bool:
    """A file with a partition section past the cap is never compacted."""
    return f.max_section_bytes > config.max_partition_uncompressed_bytes


def too_large_ids(files: Sequence[LiveFile], config: PlannerConfig) -> set[str]:
    return {f.id for f in files if too_large(f, config)}


def unreadable_ids(snap: Snapshot, config: PlannerConfig) -> set[str]:
    """The live files no job may read: those too large to compact and those set aside
    (quarantined)."""
    return too_large_ids(snap.files, config) | set(snap.quarantined)


def unavailable_ids(snap: Snapshot, config: PlannerConfig, busy: Collection[str]) -> set[str]:
    """The live files no rule may offer a job: those running jobs hold (``busy``), and the
    unreadable ones. Each splits the runs around it (``runs``)."""
    return set(busy) | unreadable_ids(snap, config)


def droppable_ids(snap: Snapshot, config: PlannerConfig, busy: Collection[str]) -> set[str]:
    """The unavailable files retention may still drop: a drop reads nothing (its premise
    is the catalog's summary of a file, not the object), so only a running job's hold
    keeps a file that is wholly past retention.ms. Without this, a damaged or too-large
    file would never expire, and would keep every newer file of its partitions too."""
    return unreadable_ids(snap, config) - set(busy)


def runs(
    files: Sequence[LiveFile],
    unavailable: Collection[str],
    keep: Callable[[LiveFile], bool] = lambda f: True,
) -> Iterator[Run]:
    """Maximal contiguous slices of files that are available and satisfy ``keep``."""
    start = None
    for i, f in enumerate(files):
        ok = f.id not in unavailable and keep(f)
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            yield files[start:i]
            start = None
    if start is not None:
        yield files[start:]


def make_job(
    files: Run,
    level: int,
    dedup: bool,
    rule: str,
    reason: str,
    numbers: Numbers,
    *,
    drop: bool = False,
) -> Job:
    return Job(
        inputs=tuple(JobInput(f.id, f.key, f.size) for f in files),
        output_level=level,
        deduplicate=dedup,
        rule=rule,
        reason=reason,
        numbers=numbers,
        drop=drop,
    )
