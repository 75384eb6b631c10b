"""Deleting what readers can no longer need (CATALOG.md §10).

A replaced file stays in the store for a grace period after the commit that replaced
it, since a reader may have planned its reads on an older snapshot. Objects are deleted
before the catalog forgets them: a crash in between leaves entries whose deletion is
simply repeated (deleting a missing key is not an error), never an object nobody tracks.

Multipart uploads that a dead writer left pending (kill -9 mid-job) are aborted once
begun more than the grace period ago and silent as long (no part received), unless their
key is the output of a job that holds an unexpired lease (a queue worker still running
it). A running job writes a part every few MiB, with or without a lease (``compact``
takes none), so however long it runs, its upload is not taken from under it.

Scratch objects (``_scratch/``: what ``replay --verify`` writes and deletes itself) are
deleted, and their pending uploads aborted, once older than a day: a verify killed before
its clean-up leaves them. Nothing but the verify that wrote them reads them, so deleting
one under a verify still running can only make that verify fail.

The catalog's own objects go the same way: checkpoints superseded for longer than the
grace period, log entries that a checkpoint has folded and that are older than the
history retention, and manifests of files that never became live once older than the
grace period and once the data object each describes is gone.

A manifest is written before its commit's log entry, and a writer may stall between the
two for any time (a paused process, a commit retrying its entry), then commit. Age alone
cannot tell such a writer's manifest from a dead one's: a manifest collected under a
writer that then commits leaves a live file without a manifest, which no reader can
serve. The data object can: it is written before the manifest and deleted only by
garbage collection (replaced files, whose entries name their manifests) or by hand (a
stray, once no writer that could commit it runs: README). So an uncommitted file's
manifest goes with its stray data object, never before it.
"""

from __future__ import annotations

import re

from compactor.catalog.catalog import Catalog
from compactor.catalog.changes import expired_garbage, forget_garbage
from compactor.catalog.log import (
    CHECKPOINT_PREFIX,
    LOG_PREFIX,
    CommitRecord,
    checkpoint_key,
    log_key,
    version_of,
)
from compactor.catalog.manifests import MANIFEST_PREFIX, manifest_head, manifest_key
from compactor.fileformat.offset_index import index_key
from compactor.objectstore import ObjectStore, PendingUpload

_JOB_OUTPUT = re.compile(r"(data/L\d/)?[0-9a-f]{32}-(compacted|plain)\.cf")
"""A job's output key (``Job.output_key``; a local store's pending upload knows only its
last part)."""

SCRATCH_PREFIX = "_scratch/"
"""Where a run writes objects that only it reads (``replay.verify``), never the catalog."""
SCRATCH_MAX_AGE_MS = 24 * 60 * 60 * 1000
"""Scratch older than this (its object's write time, its upload's start, on the store's
clock) is a killed run's: a verify re-runs one job, which takes minutes."""

DEFAULT_GRACE_MS = 10 * 60 * 1000
DEFAULT_HISTORY_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
"""``catalog.history.retention.ms``: how long a commit stays in ``compactor history``."""


def collect_all_garbage(
    catalog: Catalog,
    now_ms: int,
    grace_ms: int = DEFAULT_GRACE_MS,
    history_retention_ms: int = DEFAULT_HISTORY_RETENTION_MS,
) -> list[str]:
    """Replaced files past the grace period (``now_ms``), uploads abandoned for longer,
    a killed run's scratch, then the catalog's own superseded objects; returns the keys
    deleted."""
    deleted = collect_garbage(catalog, now_ms, grace_ms)
    deleted += collect_abandoned_uploads(catalog, grace_ms)
    deleted += collect_scratch(catalog)
    return deleted + collect_catalog_garbage(catalog, grace_ms, history_retention_ms)


def collect_garbage(catalog: Catalog, now_ms: int, grace_ms: int = DEFAULT_GRACE_MS) -> list[str]:
    """Delete every replaced file (and its manifest) whose grace period has passed;
    returns their keys."""
    due = expired_garbage(catalog.snapshot(), now_ms, grace_ms)
    if not due:
        return []
    for g in due:
        catalog.store.delete(g.key)
        catalog.store.delete(index_key(g.key))
        if g.file_id is not None:
            catalog.store.delete(manifest_key(g.file_id))
    catalog.commit(
        lambda s: forget_garbage(s, due), CommitRecord("garbage", {"deleted": [g.key for g in due]})
    )
    return [g.key for g in due]


def collect_abandoned_uploads(catalog: Catalog, grace_ms: int = DEFAULT_GRACE_MS) -> list[str]:
    """Abort every pending multipart upload of a job's output begun more than ``grace_ms``
    ago (on the wall clock) whose key no leased job writes, and every upload under
    ``SCRATCH_PREFIX`` begun more than ``SCRATCH_MAX_AGE_MS`` ago; returns their keys."""
    now_ms = catalog.clock()
    leased_jobs = {j for j, lease in catalog.snapshot().leases.items() if lease.active(now_ms)}
    aborted: list[str] = []
    for upload in list(catalog.store.pending_uploads()):
        if upload.key.startswith(SCRATCH_PREFIX):
            abandoned = upload.initiated_ms + SCRATCH_MAX_AGE_MS <= now_ms
        elif _JOB_OUTPUT.fullmatch(upload.key):
            job_id = upload.key.rpartition("/")[2].partition("-")[0]
            abandoned = (
                upload.initiated_ms + grace_ms <= now_ms
                and job_id not in leased_jobs
                and _silent(catalog.store, upload, grace_ms, now_ms)
            )
        else:
            continue  # another writer's upload, not ours to abort
        if abandoned:
            catalog.store.abort_upload(upload)
            aborted.append(upload.key)
    return aborted


def _silent(store: ObjectStore, upload: PendingUpload, grace_ms: int, now_ms: int) -> bool:
    """Whether ``upload`` has had no part for ``grace_ms``: a running job without a lease
    (``compact``'s) sends one every few MiB of output, however long it has run."""
    written = store.upload_written_ms(upload)
    return written is not None and written + grace_ms <= now_ms


def collect_scratch(catalog: Catalog, max_age_ms: int = SCRATCH_MAX_AGE_MS) -> list[str]:
    """Delete every object under ``SCRATCH_PREFIX`` written more than ``max_age_ms`` ago
    (on the catalog's clock, the wall clock); returns their keys. An object whose store
    gives no write time stays. (Its uploads: ``collect_abandoned_uploads``.)"""
    store = catalog.store
    now_ms = catalog.clock()
    deleted: list[str] = []
    for info in list(store.list(SCRATCH_PREFIX)):
        if info.modified_ms is not None and info.modified_ms + max_age_ms <= now_ms:
            store.delete(info.key)
            deleted.append(info.key)
    return deleted


def collect_catalog_garbage(
    catalog: Catalog,
    grace_ms: int = DEFAULT_GRACE_MS,
    history_retention_ms: int = DEFAULT_HISTORY_RETENTION_MS,
) -> list[str]:
    """Delete superseded checkpoints, folded log entries past the history retention and
    orphan manifests; returns the keys deleted. Runs on the catalog's clock (the wall
    clock), which stamps log entries and manifests."""
    store = catalog.store
    now_ms = catalog.clock()
    snap = catalog.snapshot()
    deleted: list[str] = []
    deleted += _collect_log(catalog, now_ms, grace_ms, history_retention_ms)
    known = {f.id for f in snap.files} | {g.file_id for g in snap.garbage if g.file_id}
    for info in list(store.list(MANIFEST_PREFIX)):
        file_id = info.key[len(MANIFEST_PREFIX) :].removesuffix(".json")
        if file_id in known:
            continue
        head = manifest_head(store, file_id)
        if head is None or head[0] + grace_ms > now_ms or store.exists(head[1]):
            continue
        # Re-read the state: the file may have become live since the snapshot.
        if file_id not in {f.id for f in catalog.snapshot().files}:
            store.delete(info.key)
            deleted.append(info.key)
    return deleted


def _collect_log(
    catalog: Catalog, now_ms: int, grace_ms: int, history_retention_ms: int
) -> list[str]:
    """Superseded checkpoints, and log entries the newest checkpoint folded that are past
    the history retention."""
    store = catalog.store
    deleted: list[str] = []
    checkpoints = sorted(_versions(catalog, CHECKPOINT_PREFIX))
    if not checkpoints:
        return deleted
    newest = checkpoints[-1]
    newest_time = _entry_time(catalog, newest)
    if newest_time is not None and newest_time + grace_ms <= now_ms:
        for v in checkpoints[:-1]:
            store.delete(checkpoint_key(v))
            deleted.append(checkpoint_key(v))
    for v in sorted(_versions(catalog, LOG_PREFIX)):
        if v > newest:
            break
        t = _entry_time(catalog, v)
        if t is not None and t + max(history_retention_ms, grace_ms) > now_ms:
            break
        store.delete(log_key(v))
        deleted.append(log_key(v))
    return deleted


def _versions(catalog: Catalog, prefix: str) -> list[int]:
    versions = (version_of(o.key) for o in catalog.store.list(prefix))
    return [v for v in versions if v is not None]


def _entry_time(catalog: Catalog, version: int) -> int | None:
    try:
        return catalog.entry(version).time_ms
    except Exception:  # noqa: BLE001 (gone or unreadable: not for this pass to judge)
        return None
