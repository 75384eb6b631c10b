"""``fileformat.compute``: Arrow's compute functions called through the registry give what
``pyarrow.compute`` gives, and a compaction never imports ``pyarrow.compute`` (whose
import is 27 ms of every command's start, before phase 1's helper is forked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from worker_scenarios import add_file, make_topics

from compactor.catalog import Catalog
from compactor.fileformat import Record, compute
from compactor.objectstore import LocalStore

NOW = 1_700_000_000_000
INTS = pa.array([3, None, -7, 12, 0, 12], pa.int64())
BOOLS = pa.array([True, None, False, True, False, None])
BATCH = pa.record_batch({"a": INTS, "b": pa.array(["x", "y", None, "", "zz", "x"])})


def test_each_function_gives_what_pyarrow_compute_gives() -> None:
    idx = pa.array([5, 0, 3], pa.int32())
    mask = pa.array([True, False, True, None, False, True])
    lists = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64()))
    keys = pa.array([b"a", None, b"ccc"], pa.binary())
    pairs = [
        (compute.take(BATCH, idx), pc.take(BATCH, idx)),
        (compute.take(INTS, idx), INTS.take(idx)),
        (compute.filter(BATCH, mask), BATCH.filter(mask)),
        (compute.filter(INTS, mask), pc.filter(INTS, mask)),
        (compute.cast(INTS, pa.int32()), INTS.cast(pa.int32())),
        (
            compute.cumulative_sum(INTS.fill_null(1), pa.scalar(-1, pa.int64())),
            pc.cumulative_sum(INTS.fill_null(1), start=pa.scalar(-1, pa.int64())),
        ),
        (compute.cumulative_sum(INTS), pc.cumulative_sum(INTS)),
        (compute.is_in(INTS, pa.array([12, 0])), pc.is_in(INTS, value_set=pa.array([12, 0]))),
        (compute.fill_null(INTS, 0), pc.fill_null(INTS, 0)),
        (compute.fill_null(BOOLS, False), pc.fill_null(BOOLS, False)),
        (compute.if_else(BOOLS, 5, INTS), pc.if_else(BOOLS, 5, INTS)),
        (compute.and_(BOOLS, mask), pc.and_(BOOLS, mask)),
        (compute.invert(BOOLS), pc.invert(BOOLS)),
        (compute.is_valid(INTS), pc.is_valid(INTS)),
        (compute.equal(INTS, 12), pc.equal(INTS, 12)),
        (compute.less_equal(INTS, 3), pc.less_equal(INTS, 3)),
        (compute.greater_equal(INTS, 3), pc.greater_equal(INTS, 3)),
        (compute.add(INTS, 2), pc.add(INTS, 2)),
        (compute.multiply(INTS, 8), pc.multiply(INTS, 8)),
        (compute.max(INTS), pc.max(INTS)),
        (compute.max(pa.array([], pa.int64())), pc.max(pa.array([], pa.int64()))),
        (compute.binary_length(keys), pc.binary_length(keys)),
        (compute.list_value_length(lists), pc.list_value_length(lists)),
        (compute.list_flatten(lists), pc.list_flatten(lists)),
        (compute.list_parent_indices(lists), pc.list_parent_indices(lists)),
    ]
    for ours, theirs in pairs:
        assert ours.equals(theirs), (ours, theirs)
        assert getattr(ours, "type", None) == getattr(theirs, "type", None)
    assert compute.index(INTS, 12) == pc.index(INTS, 12).as_py() == 3
    assert compute.index(INTS, 99) == pc.index(INTS, 99).as_py() == -1
    assert compute.index(BOOLS, True) == 0
    for arr in (BOOLS, pa.array([True, None]), pa.array([], pa.bool_())):
        assert compute.any(arr) == bool(pc.any(arr).as_py())
        assert compute.all(arr) == bool(pc.all(arr).as_py())


def _store_of_every_rule(root: Path) -> None:
    """Topics whose compaction takes every path that calls Arrow: small partitions
    grouped, a large one alone, tombstones, timestamp and header strategies, young keys
    (min.compaction.lag.ms) and retention."""
    store = LocalStore(root)
    catalog = Catalog(store)
    make_topics(
        catalog,
        {
            "small": (40, {"cleanup.policy": "compact"}),
            "big": (1, {"cleanup.policy": "compact"}),
            "stamp": (2, {"cleanup.policy": "compact", "compaction.strategy": "timestamp"}),
            "hdr": (
                2,
                {
                    "cleanup.policy": "compact",
                    "compaction.strategy": "header",
                    "compaction.strategy.header": "v",
                },
            ),
            "young": (2, {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"}),
            "kept": (2, {"cleanup.policy": "compact,delete", "retention.ms": "60000"}),
        },
    )

    def records(f: int, n: int, base_ms: int) -> list[Record]:
        return [
            Record(
                f * n + j,
                base_ms + j,
                b"k%d" % (j % 9),
                None if j % 11 == 5 else b"v%d-%d" % (f, j),
                (("v", (f * n + j).to_bytes(8, "big")),) if j % 3 else (),
            )
            for j in range(n)
        ]

    for f in range(3):
        sections = {("small", p): records(f, 6, NOW - 7_200_000) for p in range(40)}
        sections[("big", 0)] = records(f, 3000, NOW - 7_200_000)
        for topic in ("stamp", "hdr", "kept"):
            sections |= {(topic, p): records(f, 40, NOW - 7_200_000 + f * 60_000) for p in (0, 1)}
        sections |= {("young", p): records(f, 40, NOW - 1000) for p in (0, 1)}
        add_file(store, catalog, f"f{f}", sections, share_below=4096)
    store.close()


def test_a_compaction_never_imports_pyarrow_compute(tmp_path: Path) -> None:
    """``compactor compact --full``, its helper (forked or spawned) included, under
    ``PYTHONPROFILEIMPORTTIME``: every module either process imports is named on stderr."""
    _store_of_every_rule(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-m", "compactor", "--store", str(tmp_path / "store")]
        + ["--now-ms", str(NOW), "compact", "--full", "--json"],
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["jobs"] and all(job["committed"] for job in report["jobs"])
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "pyarrow" in imported and "compactor.fileformat.compute" in imported
    assert "pyarrow.compute" not in imported and "dateutil" not in imported
