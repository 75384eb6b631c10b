"""The worker process's compactor: one key buffer, allocated once, reused by every job."""

from __future__ import annotations

from catalog import Catalog
from catalog.garbage import DEFAULT_GRACE_MS, collect_garbage
from objectstore import ObjectStore
from planner.job import Job
from worker.kernel import KeyBuffer
from worker.runner import run_job
from worker.stats import JobReport

DEFAULT_KEY_BUFFER_BYTES = 128 << 20


class Compactor:
    def __init__(
        self,
        store: ObjectStore,
        *,
        key_buffer_bytes: int = DEFAULT_KEY_BUFFER_BYTES,
        compression: str | None = "zstd",
        grace_ms: int = DEFAULT_GRACE_MS,
    ) -> None:
        self.store = store
        self.catalog = Catalog(store)
        self.buffer = KeyBuffer(key_buffer_bytes)
        self.compression = compression
        self.grace_ms = grace_ms

    def run(self, job: Job, now_ms: int) -> JobReport:
        return run_job(
            self.store, self.catalog, job, self.buffer, now_ms=now_ms, compression=self.compression
        )

    def collect_garbage(self, now_ms: int) -> list[str]:
        return collect_garbage(self.catalog, now_ms, self.grace_ms)
