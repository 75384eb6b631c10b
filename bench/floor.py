"""The CPU that the design's fixed steps take on a shape's records, against what a run at
3x DuckDB's speed may spend.

    .venv/bin/python -m bench.floor --shape ingest-64p [--repeat 3]

DESIGN.md fixes what any full compaction of a store must do:
- read every input file twice (two GET streams, one for each pointer);
- check every frame's CRC on both reads;
- decode every batch twice (phase 1 decodes offsets and keys, phase 2 whole records);
- hash every key with SHA-512/256;
- encode the survivors in the output's codec (zstd at the top level).

This times each of those steps alone, on the shape's own files, with the least machinery
this system has for it. There is no merge, no format check and no Python per section.
- **Reads:** the store's streams, each file into one reused buffer.
- **CRCs:** ISA-L's CRC-32 over each file's bytes.
- **Decodes:** Arrow's, with the kept reader (``ipc.read_compressed``), applied to every
  compressed batch message of the live files. Uncompressed batches are left out.
- **Hashes:** the key kernel's SHA-512/256 (``hash_keys``, one thread, the machine's best
  implementation) over every decoded key column.
- **Encodes:** the writer's encoder (``ipc.BatchEncoder``: Arrow's IPC writer for zstd)
  applied to the batches that a real ``compact --full`` of a hard-linked clone compresses
  (``bench.zstd_buffers``). ``--codec lz4`` encodes them in lz4 instead: the floor under
  the operator's trade ``--compression-top lz4``.

Each step's figure is the CPU time of this thread, the least of ``--repeat`` runs. Their
sum is a floor: no implementation of this design spends less CPU on these records on
this machine, because it leaves out everything else a job does. Spread perfectly over two
cores, a job takes at least half of it in wall time.

In the same run, DuckDB's ``QUALIFY row_number()`` dedup of the shape's Parquet copy (2
threads) and ``compact --full --compression-top <--codec>`` of a clone of the store run
``--repeat`` times each, in turn, timed as ``bench.shapes`` times them (``bench.run``'s
child processes). A run at 3x DuckDB has a third of DuckDB's median wall time, which is
two thirds of it in CPU time on two cores. The last lines say how much of that budget
the floor already takes, and how much of the compactor's CPU is above the floor.

The shape's workdir must exist (``python -m bench.shapes --only <shape>`` makes it). The
store is not changed. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from isal import isal_zlib

from compactor.fileformat import ipc
from compactor.fileformat.field_decode import field_indices
from compactor.fileformat.ipc import COMPRESSIONS, BatchEncoder
from compactor.objectstore import LocalStore
from compactor.worker.kernel import HASH_IMPL, hash_keys

from .bytecode import compile_checkout
from .contenders import live_files
from .ipc_decode import PHASE1_FIELDS, Payload, collect
from .profile_job import cloned
from .run import clone_store, compactor_command, run_child, warm
from .shapes import ROOT, SHAPES
from .workload import MANIFEST, Params
from .zstd_buffers import CODEC, kept_batches

READ_BUFFER = 1 << 20


def least_cpu(step: Callable[[], object], repeat: int) -> float:
    """The least CPU time of this thread that ``repeat`` runs of ``step`` took."""
    seen = []
    for _ in range(repeat):
        start = time.thread_time()
        step()
        seen.append(time.thread_time() - start)
    return min(seen)


def read_all(store: LocalStore, keys: list[str]) -> None:
    """Every file's bytes off the store's stream, into one reused buffer."""
    buffer = memoryview(bytearray(READ_BUFFER))
    for key in keys:
        with store.open_stream(key) as stream:
            while stream.readinto(buffer):
                pass


def crc_all(contents: list[bytes]) -> list[int]:
    return [isal_zlib.crc32(data) for data in contents]


def decode_all(payloads: list[Payload], options: pa.ipc.IpcReadOptions) -> None:
    for payload, schema in payloads:
        ipc.read_compressed(payload, schema, options)


def output_batches(store_dir: Path) -> list[tuple[pa.RecordBatch, int]]:
    """The batches that a full compaction of a clone of the store compresses in the top
    level's codec, each with its logical bytes."""
    with kept_batches() as batches, cloned(store_dir, None) as (compactor, *_, now_ms):
        compactor.run_planned(now_ms, full=True)
    return batches


def encode_all(encoder: BatchEncoder, batches: list[tuple[pa.RecordBatch, int]]) -> None:
    for batch, logical in batches:
        encoder.encode(batch, logical)


class Runs(NamedTuple):
    """Each contender's runs: wall and CPU seconds (user + system, its children's too)."""

    walls: list[float]
    cpus: list[float]

    def line(self, name: str) -> str:
        walls = ", ".join(f"{w:.2f}" for w in self.walls)
        return (
            f"{name}: {statistics.median(self.walls):.2f} s wall (the median of {walls}), "
            f"{statistics.median(self.cpus):.2f} s CPU"
        )


def contenders(workdir: Path, repeat: int, codec: str) -> tuple[Runs, Runs]:
    """DuckDB's dedup of the workdir's Parquet copy and ``compact --full`` of a clone of
    its store (its top level written in ``codec``), ``repeat`` times each in turn, timed
    as ``bench.run`` times them (a child process from spawn to exit, its input in the
    page cache)."""
    params = json.loads((workdir / MANIFEST).read_text())["params"]
    now_ms = Params(**params).compaction_now_ms
    duck, ours = Runs([], []), Runs([], [])
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        out, temp, clone = Path(tmp) / "out.parquet", Path(tmp) / "spill", Path(tmp) / "store"
        temp.mkdir()
        duckdb = [sys.executable, "-m", "bench.contenders", "duckdb", "--parquet"]
        duckdb += [str(workdir / "records.parquet"), "--out", str(out), "--threads", "2"]
        duckdb += ["--temp", str(temp)]
        compact = compactor_command() + ["--store", str(clone), "--now-ms", str(now_ms)]
        compact += ["compact", "--full", "--json", "--compression-top", codec]
        for i in range(repeat):
            for name in ("duckdb", "compactor") if i % 2 == 0 else ("compactor", "duckdb"):
                if name == "duckdb":
                    warm([workdir / "records.parquet"])
                else:
                    shutil.rmtree(clone, ignore_errors=True)
                    clone_store(workdir / "store", clone)
                m = run_child(
                    duckdb if name == "duckdb" else compact, Path(tmp), f"{name}-{i}", 3600
                )
                if m.returncode:
                    raise SystemExit(f"{name} failed: {m.stderr.strip()[-300:]}")
                runs = duck if name == "duckdb" else ours
                runs.walls.append(m.wall_s)
                runs.cpus.append(m.user_s + m.sys_s)
                out.unlink(missing_ok=True)
    return duck, ours


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = [s.name for s in SHAPES]
    ap.add_argument("--shape", required=True, choices=names, help="a bench.shapes shape")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each step and of DuckDB")
    ap.add_argument(
        "--codec",
        default=CODEC,
        choices=[c for c in COMPRESSIONS if c is not None],
        help=f"the output's codec (default {CODEC}, the top level's; lz4 is the operator's "
        "trade, --compression-top lz4)",
    )
    args = ap.parse_args(argv)
    workdir = next(s for s in SHAPES if s.name == args.shape).workdir(1.0)
    store_dir = workdir / "store"
    if not store_dir.is_dir():
        raise SystemExit(f"{workdir}: no workload (python -m bench.shapes --only {args.shape})")
    store = LocalStore(str(store_dir))
    files = live_files(store, None)
    keys = [f.key for f in files]
    paths = [store_dir / f.key for f in files]
    contents = [path.read_bytes() for path in paths]
    payloads = collect(store)
    whole = pa.ipc.IpcReadOptions(use_threads=False)
    phase1 = pa.ipc.IpcReadOptions(
        included_fields=list(field_indices(PHASE1_FIELDS)), use_threads=False
    )
    key_columns = [ipc.read_compressed(p, s, phase1).column("key") for p, s in payloads]
    records = sum(len(k) for k in key_columns)
    batches = output_batches(store_dir)
    survivors = sum(batch.num_rows for batch, _ in batches)
    encoder = BatchEncoder(args.codec)

    steps = [
        ("read every input file twice (the store's streams)", lambda: read_all(store, keys), 2),
        ("CRC-32 of every file's bytes, twice (ISA-L)", lambda: crc_all(contents), 2),
        ("decode offsets and keys (phase 1)", lambda: decode_all(payloads, phase1), 1),
        ("decode whole records (phase 2)", lambda: decode_all(payloads, whole), 1),
        (
            f"SHA-512/256 of every key (the kernel's {HASH_IMPL}, one thread)",
            lambda: [hash_keys(k, threads=1) for k in key_columns],
            1,
        ),
        (
            f"encode the survivors ({args.codec}, the writer's encoder)",
            lambda: encode_all(encoder, batches),
            1,
        ),
    ]
    mb = sum(map(len, contents)) / 1e6
    print(f"{args.shape}: {len(files)} files, {mb:,.0f} MB, {len(payloads):,} compressed "
          f"batch messages, {records:,} keys decoded, {survivors:,} survivors encoded; "
          f"least of {args.repeat} runs")  # fmt: skip
    print()
    print("| step | CPU s | ns a record |")
    print("|---|---:|---:|")
    floor = 0.0
    for label, step, times in steps:
        cpu = times * least_cpu(step, args.repeat)
        floor += cpu
        print(f"| {label} | {cpu:.2f} | {1e9 * cpu / records:,.0f} |")
    print(f"| **the floor (their sum)** | **{floor:.2f}** | **{1e9 * floor / records:,.0f}** |")
    compile_checkout(ROOT)  # timed as an installed package runs (bench.bytecode)
    duck, ours = contenders(workdir, args.repeat, args.codec)
    duck_s, our_cpu = statistics.median(duck.walls), statistics.median(ours.cpus)
    budget = 2 * duck_s / 3
    print()
    print(duck.line("DuckDB") + ".")
    command = f"compact --full --compression-top {args.codec}"
    print(ours.line(command) + f", {our_cpu - floor:.2f} s of it above the floor.")
    print(f"At 3x DuckDB, a job has {duck_s / 3:.2f} s of wall time, {budget:.2f} s of CPU on "
          f"two cores. The floor takes {floor:.2f} s of CPU ({floor / budget:.0%} of that), "
          f"and at least {floor / 2:.2f} s of wall time on two cores "
          f"({duck_s / (floor / 2):.2f}x DuckDB at most).")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
