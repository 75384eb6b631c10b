"""``compactor replay --from-history N --verify``: run a committed compaction again and
compare.

Steps: read commit N's job document and run settings; rebuild the catalog state the job
read; check its inputs are still in the store (they are for the grace period after the
commit); write the job's outputs again under a scratch prefix; compare each with the
output commit N made live, bytes first and records where the bytes differ; delete the
scratch objects. Nothing is committed, leased or deleted outside the scratch prefix.

The output is a function of the job document, the input files, the catalog state the
job read (topic configs, which files hold each partition), the time rules' clock, the key
buffer's size and the compression: commits record all but the first two in ``run``
(``worker.runner.RunSettings``). A commit made before ``run`` was recorded is re-run
against the state just before it, at its commit time, with the default settings.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.catalog import Catalog, CatalogError
from compactor.catalog.garbage import SCRATCH_PREFIX as CATALOG_SCRATCH
from compactor.catalog.log import LogEntry
from compactor.fileformat import FormatError
from compactor.fileformat.offset_index import index_key
from compactor.objectstore import ObjectNotFound
from compactor.planner.job import Job, JobDocumentError
from compactor.planner.retention import why_not_droppable
from compactor.replay.compare import first_difference
from compactor.worker.compactor import DEFAULT_KEY_BUFFER_BYTES
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import RunSettings, write_outputs
from compactor.worker.stats import JobProgress

SCRATCH_PREFIX = f"{CATALOG_SCRATCH}verify"


@dataclass
class VerifyReport:
    version: int
    job: Job
    run: RunSettings
    outputs: list[str] = field(default_factory=list)
    """The committed outputs compared."""
    records: int = 0
    """Records the re-run wrote."""
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.version,
            "job": self.job.id,
            "ok": self.ok,
            "outputs": self.outputs,
            "records": self.records,
            "run": self.run.to_json(),
            "differences": self.differences,
        }


def recorded_job(catalog: Catalog, version: int) -> tuple[Job, LogEntry]:
    """The job document commit ``version`` ran, and that commit; CatalogError if the
    commit is not a compaction, or its document is not one this version runs (a job no
    planner makes: ``planner.job``)."""
    entry = catalog.entry(version)
    if entry.record.kind != "compaction":
        raise CatalogError(f"commit {version} is a {entry.record.kind} commit, not a compaction")
    document = entry.record.details.get("job")
    if not isinstance(document, dict):
        raise CatalogError(f"commit {version} recorded no job document")
    try:
        return Job.from_json(document), entry
    except JobDocumentError as e:
        raise CatalogError(
            f"commit {version} recorded a job that cannot be replayed: {e}"
        ) from None


def verify_commit(
    catalog: Catalog,
    version: int,
    *,
    key_buffer_bytes: int | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
) -> VerifyReport:
    """Re-runs commit ``version``'s job into a scratch prefix and compares (module doc).
    ``key_buffer_bytes`` overrides the recorded size. CatalogError (naming what is
    missing) if the job can no longer be re-run."""
    job, entry = recorded_job(catalog, version)
    details = entry.record.details
    run = _run_settings(details, version, entry.time_ms, key_buffer_bytes)
    snap = catalog.snapshot_at(run.snapshot_version)
    report = VerifyReport(version, job, run)
    if job.drop:
        why = why_not_droppable(snap, run.now_ms, [i.id for i in job.inputs])
        if why is not None:
            report.differences.append(f"commit {version} dropped files it should not have: {why}")
        return report
    _check_inputs_exist(catalog, job, version)
    scratch = f"{SCRATCH_PREFIX}-{version}-{uuid.uuid4().hex[:12]}/"
    written = None
    try:
        try:
            written = write_outputs(
                catalog.store,
                snap,
                job,
                KeyBuffer(run.key_buffer_bytes),
                now_ms=run.now_ms,
                compression=run.compression,
                on_progress=on_progress,
                output_key=lambda group: scratch + job.output_key(group),
            )
        except ObjectNotFound:
            # Garbage collection may delete the inputs while the re-run reads them (their
            # grace period ran out): the same answer as when they were gone before it.
            _check_inputs_exist(catalog, job, version)
            raise
        report.records = written.stats.records_out
        committed = [str(k) for k in details.get("outputs", [])]
        rerun = [f.key.removeprefix(scratch) for f in written.produced]
        report.outputs = committed
        report.differences += _compare(catalog, version, committed, rerun, scratch)
    finally:
        if written is not None:
            for f in written.produced:
                catalog.store.delete(f.key)
                catalog.store.delete(index_key(f.key))
    return report


def _run_settings(
    details: Mapping[str, Any], version: int, time_ms: int, key_buffer_bytes: int | None
) -> RunSettings:
    run = details.get("run")
    if not isinstance(run, dict):
        run = {}
    compression = run.get("compression", "zstd")
    return RunSettings(
        snapshot_version=int(run.get("snapshot_version", version - 1)),
        now_ms=int(run.get("now_ms", time_ms)),
        key_buffer_bytes=key_buffer_bytes
        or int(run.get("key_buffer_bytes", DEFAULT_KEY_BUFFER_BYTES)),
        compression=None if compression is None else str(compression),
    )


def _check_inputs_exist(catalog: Catalog, job: Job, version: int) -> None:
    for i in job.inputs:
        if not catalog.store.exists(i.key):
            raise CatalogError(
                f"commit {version} cannot be re-run: its input {i.key} was deleted (replaced "
                "files are kept only for the grace period after the commit)"
            )


def _compare(
    catalog: Catalog, version: int, committed: list[str], rerun: list[str], scratch: str
) -> list[str]:
    differences = []
    for key in sorted(set(rerun) - set(committed)):
        differences.append(f"commit {version} made no {key}; the re-run writes one")
    for key in sorted(set(committed) - set(rerun)):
        differences.append(f"commit {version} made {key}; the re-run writes no such file")
    for key in sorted(set(committed) & set(rerun)):
        try:
            difference = first_difference(catalog.store, key, scratch + key)
        except ObjectNotFound:
            difference = f"{key}: committed by commit {version}, no longer in the store"
        except FormatError as corrupt:
            difference = f"{key}: not a valid file: {corrupt}"
        if difference is not None:
            differences.append(difference)
    return differences
