"""Job leases: pure changes that claim, renew and release a job's inputs (CATALOG.md §8).

A lease belongs to a job (its id, derived from its inputs and output), not to a process:
whoever holds the job may renew it, and the owner field only says who did last.
Invariant, checked by every change here and by ``replace_files``: no input file is held
by two unexpired leases, and no job replaces an input that another job's unexpired lease
holds. Leases run on the wall clock; an expired one no longer claims anything.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

from compactor.catalog.catalog import Catalog
from compactor.catalog.changes import Leased, check_unleased, live_run_start
from compactor.catalog.config import add_ms
from compactor.catalog.errors import CatalogError, CommitConflict
from compactor.catalog.log import CommitRecord
from compactor.catalog.snapshot import Lease, Snapshot


def take_lease(
    s: Snapshot,
    job_id: str,
    owner: str,
    inputs: Sequence[str],
    now_ms: int,
    ttl_ms: int,
    fresh: bool = False,
    *,
    unread: bool = False,
) -> Snapshot:
    """Claim ``inputs`` (live, contiguous, in order) for ``job_id`` until now + ttl,
    saturated at ``MAX_MS``: a catalog's integers are 64-bit (CATALOG.md §1), so a lease of
    2^63 - 1 ms is one that never expires, not a time past the range. Taking a job's lease
    again renews it, unless ``fresh`` (a scheduler about to publish the job): then an
    unexpired lease of the same job is a Leased conflict. A quarantined input is refused
    unless the job leaves its inputs ``unread`` (a retention drop)."""
    if ttl_ms <= 0:
        raise CatalogError(f"a lease needs a positive duration, got {ttl_ms} ms")
    held = s.leases.get(job_id)
    if fresh and held is not None and held.active(now_ms):
        raise Leased(f"job {job_id} is already leased until {held.expires_ms}")
    live_run_start(s, inputs, unread=unread)
    check_unleased(s, inputs, job_id, now_ms)
    lease = Lease(job_id, owner, tuple(inputs), now_ms, add_ms(now_ms, ttl_ms))
    return dataclasses.replace(s, leases={**_without_expired(s, now_ms), job_id: lease})


def renew_lease(
    s: Snapshot, job_id: str, owner: str, now_ms: int, ttl_ms: int, *, unread: bool = False
) -> Snapshot:
    """Extend ``job_id``'s lease to now + ttl. CommitConflict if the job holds none any more
    (it was released or replaced), if its inputs are gone, if one was quarantined since
    (unless the job leaves them ``unread``), or if it expired and another job leased an
    input since."""
    lease = s.leases.get(job_id)
    if lease is None:
        raise CommitConflict(f"job {job_id} holds no lease")
    return take_lease(s, job_id, owner, lease.inputs, now_ms, ttl_ms, unread=unread)


def release_lease(s: Snapshot, job_id: str) -> Snapshot:
    """Drop ``job_id``'s lease, if any (a job that gave up)."""
    return dataclasses.replace(s, leases={j: x for j, x in s.leases.items() if j != job_id})


def drop_expired_leases(s: Snapshot, now_ms: int) -> Snapshot:
    return dataclasses.replace(s, leases=_without_expired(s, now_ms))


def _without_expired(s: Snapshot, now_ms: int) -> dict[str, Lease]:
    return {j: x for j, x in s.leases.items() if x.active(now_ms)}


class JobLeases:
    """Leases committed to a catalog, each commit recorded in its history (kind
    ``lease``). The clock is the catalog's: the wall clock."""

    def __init__(self, catalog: Catalog, owner: str) -> None:
        self.catalog, self.owner = catalog, owner

    def take(
        self,
        job_id: str,
        inputs: Sequence[str],
        ttl_ms: int,
        *,
        fresh: bool = False,
        unread: bool = False,
        refresh: bool = True,
    ) -> Lease:
        """Commits ``job_id``'s lease on ``inputs`` for ``ttl_ms``; CommitConflict (Leased)
        if another job's lease holds one. ``refresh`` False: on the state the caller has
        just read through the catalog reader (``Catalog.commit``)."""
        now = self.catalog.clock()
        snap = self.catalog.commit(
            functools.partial(
                take_lease,
                job_id=job_id,
                owner=self.owner,
                inputs=inputs,
                now_ms=now,
                ttl_ms=ttl_ms,
                fresh=fresh,
                unread=unread,
            ),
            self._record("taken", job_id, now, add_ms(now, ttl_ms)),
            refresh=refresh,
        )
        return snap.leases[job_id]

    def renew(self, job_id: str, ttl_ms: int, *, unread: bool = False) -> Lease:
        now = self.catalog.clock()
        snap = self.catalog.commit(
            functools.partial(
                renew_lease,
                job_id=job_id,
                owner=self.owner,
                now_ms=now,
                ttl_ms=ttl_ms,
                unread=unread,
            ),
            self._record("renewed", job_id, now, add_ms(now, ttl_ms)),
        )
        return snap.leases[job_id]

    def release(self, job_id: str) -> None:
        self.catalog.commit(
            functools.partial(release_lease, job_id=job_id),
            self._record("released", job_id, None, None),
        )

    def expire(self) -> list[str]:
        """Drop every expired lease (their inputs are plannable again); returns their jobs.
        Reads the catalog once; the state it leaves read is the newest."""
        now = self.catalog.clock()
        expired = self._expired(now)
        if expired:
            self.catalog.commit(
                functools.partial(drop_expired_leases, now_ms=now),
                self._record("expired", None, now, None),
                refresh=False,
            )
        return expired

    def _expired(self, now: int) -> list[str]:
        return _expired_in(self.catalog.snapshot(), now)

    def _record(
        self, action: str, job_id: str | None, now: int | None, expires_ms: int | None
    ) -> Callable[[Snapshot], CommitRecord]:
        """The commit's record, made from the state its change is applied to, so that the
        leases it names as expired are those the change drops (``now``: none if None)
        without a read of the catalog of its own."""
        details: dict[str, object] = {"action": action, "owner": self.owner}
        if job_id is not None:
            details["job_id"] = job_id
        if expires_ms is not None:
            details["expires_ms"] = expires_ms

        def record(s: Snapshot) -> CommitRecord:
            expired = [] if now is None else _expired_in(s, now)
            return CommitRecord("lease", {**details, "expired": expired} if expired else details)

        return record


def _expired_in(s: Snapshot, now: int) -> list[str]:
    return sorted(j for j, x in s.leases.items() if not x.active(now))


class LeaseKeeper:
    """A running job's guard (``worker.runner.run_job``): renews the job's lease once a
    third of its duration has passed since the last renewal. A renewal that fails
    (CommitConflict: the lease was lost) stops the job. ``unread``: the job leaves its
    inputs unread (a retention drop), which may hold a quarantined file."""

    def __init__(
        self, leases: JobLeases, job_id: str, ttl_ms: int, *, unread: bool = False
    ) -> None:
        self.leases, self.job_id, self.ttl_ms = leases, job_id, ttl_ms
        self.unread = unread
        self._renewed = time.monotonic()

    def __call__(self) -> None:
        if (time.monotonic() - self._renewed) * 1000 >= self.ttl_ms / 3:
            self.leases.renew(self.job_id, self.ttl_ms, unread=self.unread)
            self._renewed = time.monotonic()
