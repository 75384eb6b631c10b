"""Job leases: pure changes that claim, renew and release a job's inputs (CATALOG.md §8).

A lease belongs to a job (its id, derived from its inputs and output), not to a process:
whoever holds the job may renew it, and the owner field only says who did last.
Invariant, checked by every change here and by ``replace_files``: no input file is held
by two unexpired leases, and no job replaces an input that another job's unexpired lease
holds. Leases run on the wall clock; an expired one no longer claims anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compactor.catalog.changes import check_unleased, live_run_start
from compactor.catalog.errors import CatalogError, CommitConflict
from compactor.catalog.snapshot import Lease, Snapshot


def take_lease(
    s: Snapshot, job_id: str, owner: str, inputs: Sequence[str], now_ms: int, ttl_ms: int
) -> Snapshot:
    """Claim ``inputs`` (live, contiguous, in order) for ``job_id`` until now + ttl. Taking
    a job's lease again renews it."""
    if ttl_ms <= 0:
        raise CatalogError(f"a lease needs a positive duration, got {ttl_ms} ms")
    live_run_start(s, inputs)
    check_unleased(s, inputs, job_id, now_ms)
    lease = Lease(job_id, owner, tuple(inputs), now_ms, now_ms + ttl_ms)
    return dataclasses.replace(s, leases={**_without_expired(s, now_ms), job_id: lease})


def renew_lease(s: Snapshot, job_id: str, owner: str, now_ms: int, ttl_ms: int) -> Snapshot:
    """Extend ``job_id``'s lease to now + ttl. CommitConflict if the job holds none any more
    (it was released or replaced), if its inputs are gone, or if it expired and another
    job leased an input since."""
    lease = s.leases.get(job_id)
    if lease is None:
        raise CommitConflict(f"job {job_id} holds no lease")
    return take_lease(s, job_id, owner, lease.inputs, now_ms, ttl_ms)


def release_lease(s: Snapshot, job_id: str) -> Snapshot:
    """Drop ``job_id``'s lease, if any (a job that gave up)."""
    return dataclasses.replace(s, leases={j: x for j, x in s.leases.items() if j != job_id})


def drop_expired_leases(s: Snapshot, now_ms: int) -> Snapshot:
    return dataclasses.replace(s, leases=_without_expired(s, now_ms))


def _without_expired(s: Snapshot, now_ms: int) -> dict[str, Lease]:
    return {j: x for j, x in s.leases.items() if x.active(now_ms)}
