"""``replay --verify`` against the worker's own property scenarios: a compaction re-run
from what its commit recorded writes the very same bytes, whatever the strategy, the
time rules, the key buffer (down to one entry: many windows) or the thread phase 1 ran
on, and even after later commits moved the catalog on."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from test_worker_model import NOW, Scenario, _buffer, scenarios, set_up
from worker_scenarios import add_file

from compactor.catalog import Catalog
from compactor.objectstore import LocalStore
from compactor.replay.verify import SCRATCH_PREFIX, verify_commit
from compactor.worker.runner import run_job


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_verified_re_run_writes_the_committed_bytes(sc: Scenario) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(root)
        catalog = Catalog(store)
        chunked, _, job = set_up(store, catalog, sc)
        buffer = _buffer(sc.buffer_entries)
        report = run_job(store, catalog, job, buffer, now_ms=NOW, phase1=sc.phase1)
        assert report.committed
        version = catalog.snapshot().version
        # A later file holding the same partitions: the newest holder is no longer in the
        # job, which the re-run must not see (it reads the state the job read).
        add_file(store, catalog, "later", {tp: chunks[-1][-1:] for tp, chunks in chunked.items()})
        objects = {info.key for info in store.list("")}

        verified = verify_commit(catalog, version)

        assert verified.ok, verified.differences
        assert verified.outputs == report.outputs
        assert verified.records == report.stats.records_out
        assert verified.run.key_buffer_bytes == buffer.capacity_bytes
        assert {info.key for info in store.list("")} == objects  # scratch objects deleted
        assert not any(k.startswith(SCRATCH_PREFIX) for k in objects)
