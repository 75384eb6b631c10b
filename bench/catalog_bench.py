"""What the catalog costs at scale: 10,000 partitions x 200 live L0 files.

    .venv/bin/python -m bench.catalog_bench [--partitions 10000] [--files 200] [--seconds 60]

Builds the catalog of such a store (every file holds one record of every partition) by
committing its manifests and summaries through ``Catalog`` (the data files themselves are
not written: neither an ingest's commit nor ``plan`` reads them), then measures, as a
user would run them:

- ``compactor ingest`` of 10 records: wall time including interpreter start, and bytes
  written under ``_catalog/`` (outside data/);
- ``compactor plan``: wall time;
- what a job's catalog read costs: GETs and bytes of one ``Catalog.snapshot()``;
- 4 ingesters and 4 compactors (disjoint inputs) committing at once for ``--seconds``:
  commits/s, p50 and p99 commit latency, and a check that nothing was lost.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from compactor.catalog import Catalog, CommitConflict, CommitRecord, LiveFile, TopicConfig
from compactor.catalog.changes import append_files, create_topic, replace_files
from compactor.fileformat import SectionMeta
from compactor.objectstore import LocalStore

TOPIC = "t"
T0 = 1_700_000_000_000


def _file(
    file_id: str, partitions: range, first: int, level: int = 0
) -> tuple[LiveFile, tuple[SectionMeta, ...]]:
    sections = tuple(
        SectionMeta(TOPIC, p, first, first, 1, 116, T0 + first, T0 + first, 0, 16 + 120 * i, 120)
        for i, p in enumerate(partitions)
    )
    size = 16 + 120 * len(sections) + 64
    return LiveFile.of_sections(
        file_id, f"data/L{level}/{file_id}.cf", level, size, T0, sections
    ), sections


def build(root: Path, partitions: int, files: int) -> None:
    c = Catalog(LocalStore(root))
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    c.commit(lambda s: create_topic(s, TOPIC, partitions, config), CommitRecord("topic"))
    for i in range(files):
        live, sections = _file(f"{i:032x}", range(partitions), i)
        expected = {(TOPIC, p): i for p in range(partitions)}
        new = {(TOPIC, p): i + 1 for p in range(partitions)}
        c.commit(
            functools.partial(append_files, files=[live], expected_next=expected, new_next=new),
            CommitRecord("ingest", {"files": [live.id]}),
            new_files={live.id: (live, sections)},
        )
        print(f"\rbuilding: {i + 1}/{files} files", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)


def _catalog_bytes(root: Path) -> dict[str, int]:
    base = root / "_catalog"
    return {str(p.relative_to(root)): p.stat().st_size for p in base.rglob("*") if p.is_file()}


def _cli(root: Path, *args: str, stdin: bytes | None = None) -> float:
    # ``python -m compactor`` from the repository root: the tree being measured, with
    # the same interpreter start as the console script.
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "compactor", "--store", str(root), *args],
        input=stdin,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def measure_cli(root: Path) -> dict[str, float]:
    records = "".join(
        json.dumps({"topic": TOPIC, "partition": p, "key": f"k{p}", "value": "v"}) + "\n"
        for p in range(10)
    ).encode()
    before = _catalog_bytes(root)
    ingest_s = _cli(root, "ingest", "-", stdin=records)
    after = _catalog_bytes(root)
    written = sum(n for k, n in after.items() if before.get(k) != n)
    plan_s = _cli(root, "plan", "--json")
    store = LocalStore(root)
    store.gets.reset()  # count every key's GETs
    Catalog(store).snapshot()
    gets = store.gets.total
    read_bytes = sum(
        (root / k).stat().st_size for k in store.gets.snapshot() if (root / k).exists()
    )
    return {
        "ingest_s": ingest_s,
        "ingest_catalog_bytes_written": written,
        "plan_s": plan_s,
        "snapshot_gets": gets,
        "snapshot_bytes": read_bytes,
    }


def measure_concurrency(root: Path, partitions: int, seconds: float) -> dict[str, float]:
    """4 ingesters (each its own partitions) and 4 compactors (each its own quarter of
    the live files, two at a time) for ``seconds``."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    ingested: list[int] = [0] * 4
    compacted: list[int] = [0] * 4
    snap0 = Catalog(LocalStore(root)).snapshot()
    q = len(snap0.files) // 4
    quarters = [list(snap0.files[k * q : (k + 1) * q]) for k in range(4)]

    def timed(c: Catalog, *args: object, **kw: object) -> None:
        started = time.monotonic()
        c.commit(*args, **kw)  # type: ignore[arg-type]
        with lock:
            latencies.append(time.monotonic() - started)

    def ingester(k: int) -> None:
        c = Catalog(LocalStore(root))
        j = 0
        while time.monotonic() < stop:
            p = k + 4 * (j % (partitions // 4))
            n = c.snapshot().next_offsets[(TOPIC, p)]
            live, sections = _file(f"i{k}-{j}", range(p, p + 1), n)
            try:
                timed(
                    c,
                    functools.partial(
                        append_files,
                        files=[live],
                        expected_next={(TOPIC, p): n},
                        new_next={(TOPIC, p): n + 1},
                    ),
                    CommitRecord("ingest", {"files": [live.id]}),
                    new_files={live.id: (live, sections)},
                )
                ingested[k] += 1
            except CommitConflict:
                pass
            j += 1

    def compactor(k: int) -> None:
        c = Catalog(LocalStore(root))
        files = quarters[k]
        j = 0
        while time.monotonic() < stop and len(files) >= 2:
            live = c.snapshot()
            ids = [f.id for f in live.files]
            pair = [f for f in files[:2]]
            # inputs must be contiguous: take two that are adjacent in the live sequence
            start = ids.index(pair[0].id)
            if ids[start + 1] != pair[1].id:
                files = files[1:]
                continue
            out, sections = _file(f"c{k}-{j}", range(0), 0, level=1)
            out = LiveFile.of_sections(out.id, out.key, 1, 100, T0, ())
            timed(
                c,
                functools.partial(
                    replace_files, input_ids=[f.id for f in pair], outputs=[out], now_ms=T0
                ),
                CommitRecord("compaction", {"inputs": [f.id for f in pair]}),
                new_files={out.id: (out, ())},
            )
            compacted[k] += 1
            files = files[2:]
            j += 1

    threads = [threading.Thread(target=ingester, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=compactor, args=(k,)) for k in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    final = Catalog(LocalStore(root)).snapshot()
    lost = sum(ingested) - sum(1 for f in final.files if f.id.startswith("i"))
    latencies.sort()
    return {
        "seconds": elapsed,
        "commits": len(latencies),
        "commits_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "ingests": sum(ingested),
        "compactions": sum(compacted),
        "ingests_lost": lost,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="catalog-bench-"))
    root = workdir / "store"
    if root.exists():
        shutil.rmtree(root)
    build(root, args.partitions, args.files)
    cli = measure_cli(root)
    conc = measure_concurrency(root, args.partitions, args.seconds)
    out = {
        "partitions": args.partitions,
        "files": args.files,
        "cpus": os.cpu_count(),
        **cli,
        **conc,
    }
    print(json.dumps(out, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
