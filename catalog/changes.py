"""Pure changes to a snapshot: each takes a snapshot and returns the next one.

A change checks its own preconditions against the snapshot it is applied to and
raises ``CommitConflict`` when they fail. ``Catalog.commit`` re-applies a change to
the newest snapshot whenever a concurrent commit won the race, so these checks are
what make concurrent ingesters and compactors safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from compactor.catalog.config import TopicConfig
from compactor.catalog.errors import CatalogError, CommitConflict
from compactor.catalog.snapshot import (
    Garbage,
    LiveFile,
    Quarantine,
    Snapshot,
    Topic,
    TopicPartition,
)

MAX_PARTITIONS = 100_000


class OffsetsMoved(CommitConflict):
    """Another ingest advanced a partition this one assigned offsets in."""

    def __init__(self, moved: Mapping[TopicPartition, int]) -> None:
        self.moved = dict(moved)
        tp = ", ".join(f"{t}/{p}" for t, p in sorted(moved))
        super().__init__(f"offsets moved under this ingest in {tp}")


def create_topic(s: Snapshot, name: str, partitions: int, config: TopicConfig) -> Snapshot:
    if not name or "/" in name or name.strip() != name:
        raise CatalogError(f"invalid topic name {name!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise CatalogError(f"--partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    if name in s.topics:
        raise CatalogError(f"topic {name!r} already exists")
    topics = {**s.topics, name: Topic(name, partitions, config)}
    next_offsets = {**s.next_offsets, **{(name, p): 0 for p in range(partitions)}}
    return dataclasses.replace(s, topics=topics, next_offsets=next_offsets)


def append_files(
    s: Snapshot,
    files: Sequence[LiveFile],
    expected_next: Mapping[TopicPartition, int],
    new_next: Mapping[TopicPartition, int],
) -> Snapshot:
    """Add newly ingested files at the young end of the live sequence.

    ``expected_next`` holds each touched partition's next offset as the files were
    written; if any moved since, the files' offsets would overlap another ingest's, so
    the change is refused with ``OffsetsMoved``.
    """
    moved = {
        tp: s.next_offsets.get(tp, 0)
        for tp, nxt in expected_next.items()
        if s.next_offsets.get(tp, 0) != nxt
    }
    if moved:
        raise OffsetsMoved(moved)
    for tp in new_next:
        if tp[0] not in s.topics or not 0 <= tp[1] < s.topics[tp[0]].partitions:
            raise CommitConflict(f"partition {tp[0]}/{tp[1]} no longer exists")
    live_ids = {f.id for f in s.files}
    if any(f.id in live_ids for f in files):
        raise CommitConflict("a file of this ingest is already live")
    last_full = s.last_full_compaction_ms
    if last_full is None and files:
        last_full = min(f.created_ms for f in files)
    return dataclasses.replace(
        s,
        files=s.files + tuple(files),
        next_offsets={**s.next_offsets, **new_next},
        last_full_compaction_ms=last_full,
    )


def live_run_start(s: Snapshot, file_ids: Sequence[str], *, unread: bool = False) -> int:
    """Where ``file_ids`` stand, in this order and contiguous, in the live sequence;
    CommitConflict if they no longer do, and ``Quarantined`` if one is set aside: no job
    leases, runs or commits a run that holds a quarantined file, unless the job leaves
    the run ``unread`` (retention's drop, whose premise is the catalog's summaries, not
    the objects)."""
    if not file_ids:
        raise CatalogError("a replacement needs at least one input file")
    ids = [f.id for f in s.files]
    try:
        start = ids.index(file_ids[0])
    except ValueError:
        raise CommitConflict(f"input file {file_ids[0]} is no longer live") from None
    if ids[start : start + len(file_ids)] != list(file_ids):
        raise CommitConflict("input files are no longer live and contiguous")
    if not unread:
        check_not_quarantined(s, file_ids)
    return start


def replace_files(
    s: Snapshot,
    input_ids: Sequence[str],
    outputs: Sequence[LiveFile],
    now_ms: int,
    *,
    full: bool = False,
    job_id: str | None = None,
    wall_ms: int | None = None,
    unread: bool = False,
) -> Snapshot:
    """Swap a contiguous run of live files for the files compacted from them.

    The inputs must still be live, contiguous and in the given order: otherwise another
    compaction replaced some of them first, and this one must not be applied twice. No
    other job's unexpired lease may hold one (``job_id``'s own may; leases run on
    ``wall_ms``, default ``now_ms``). The outputs take the run's place in the sequence;
    the inputs become garbage, and the leases on them end. ``full`` marks a full
    compaction, which restarts the daily compaction's clock. None may be quarantined,
    unless the run leaves the catalog ``unread`` (a retention drop, which also ends the
    quarantines of the files it drops: every quarantined file is live).
    """
    start = live_run_start(s, input_ids, unread=unread)
    check_unleased(s, input_ids, job_id, now_ms if wall_ms is None else wall_ms)
    replaced = s.files[start : start + len(input_ids)]
    garbage = s.garbage + tuple(Garbage(f.key, now_ms, f.id) for f in replaced)
    files = s.files[:start] + tuple(outputs) + s.files[start + len(input_ids) :]
    last_full = now_ms if full else s.last_full_compaction_ms
    gone = set(input_ids)
    leases = {j: x for j, x in s.leases.items() if j != job_id and gone.isdisjoint(x.inputs)}
    quarantined = {i: q for i, q in s.quarantined.items() if i not in gone}
    return dataclasses.replace(
        s,
        files=files,
        garbage=garbage,
        leases=leases,
        last_full_compaction_ms=last_full,
        quarantined=quarantined,
    )


class Leased(CommitConflict):
    """An input is held by another job's unexpired lease."""


def check_unleased(s: Snapshot, inputs: Sequence[str], job_id: str | None, now_ms: int) -> None:
    """``Leased`` if another job's unexpired lease holds one of ``inputs``."""
    held = s.leased_inputs(now_ms)
    for i in inputs:
        other = held.get(i)
        if other is not None and other != job_id:
            until = s.leases[other].expires_ms
            raise Leased(f"input file {i} is leased by job {other} until {until}")


class Quarantined(CommitConflict):
    """An input was set aside by an operator (``quarantine_file``) after the job was
    planned."""


def check_not_quarantined(s: Snapshot, inputs: Sequence[str]) -> None:
    """``Quarantined`` if one of ``inputs`` is quarantined."""
    for i in inputs:
        if i in s.quarantined:
            raise Quarantined(f"input file {i} is quarantined: {s.quarantined[i].reason}")


def quarantine_file(s: Snapshot, file_id: str, reason: str, now_ms: int) -> Snapshot:
    """Sets live file ``file_id`` aside: the planner offers it to no rule that reads it,
    and no job that reads it commits, until ``release_file`` (retention's drop reads
    nothing: ``live_run_start``). Its records stay live. CatalogError if it is
    not live or is quarantined already (the first reason stays)."""
    if not any(f.id == file_id for f in s.files):
        raise CatalogError(f"file {file_id} is not live")
    if file_id in s.quarantined:
        raise CatalogError(
            f"file {file_id} is quarantined already: {s.quarantined[file_id].reason}"
        )
    entry = Quarantine(file_id, reason, now_ms)
    return dataclasses.replace(s, quarantined={**s.quarantined, file_id: entry})


def release_file(s: Snapshot, file_id: str) -> Snapshot:
    """Ends ``file_id``'s quarantine: jobs may take it again. CatalogError if it is not
    quarantined (a file no longer live is not: its quarantine ended with it)."""
    if file_id not in s.quarantined:
        raise CatalogError(f"file {file_id} is not quarantined")
    return dataclasses.replace(
        s, quarantined={i: q for i, q in s.quarantined.items() if i != file_id}
    )


def expired_garbage(s: Snapshot, now_ms: int, grace_ms: int) -> tuple[Garbage, ...]:
    return tuple(g for g in s.garbage if g.replaced_ms + grace_ms <= now_ms)


def forget_garbage(s: Snapshot, deleted: Sequence[Garbage]) -> Snapshot:
    gone = set(deleted)
    return dataclasses.replace(s, garbage=tuple(g for g in s.garbage if g not in gone))
