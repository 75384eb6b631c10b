"""The CPU that a full compaction's fixed steps take on a shape's records, against what
a run at 3x DuckDB's speed may spend.

    .venv/bin/python -m bench.floor --shape ingest-64p [--repeat 3] [--codec lz4]

What every full compaction of a store does, whatever its code:
- reads every input file twice (docs/ARCHITECTURE.md: two GET streams per input, one a pointer);
- checks every frame's CRC on both reads (FORMAT.md 5: a reader verifies a frame's CRC
  before it interprets its payload; 9.1: both streams of a compaction check every CRC);
- decodes every batch twice, phase 1 its offsets and keys, phase 2 whole records (each
  pointer reads what it uses; the key buffer holds hashes, not records);
- hashes every key with SHA-512/256 (docs/ARCHITECTURE.md);
- encodes the survivors in the output's codec (zstd at the top level by default).

This times each step alone, on the shape's own files, with the least machinery this
system has for it. There is no merge, no format check and no Python per section.
- **Reads and CRCs:** each file mapped whole off its stream, as the stream reader takes
  a local file's long payloads (``LocalObjectStream.read_mapped``), and ISA-L's CRC-32
  over the map: the first touch of every byte, which a job's reader makes in its frames'
  CRCs. (Before the reader mapped long payloads, it copied every file out of the page
  cache, and so did this step.)
- **Decodes:** Arrow's, with the kept reader (``ipc.read_compressed``), applied to every
  compressed batch message of the live files. Uncompressed batches are left out.
- **Hashes:** the key kernel's SHA-512/256 (``hash_keys``, one thread, the machine's best
  implementation) over every decoded key column.
- **Encodes:** the writer's encoder (``ipc.BatchEncoder``: Arrow's IPC writer for zstd)
  applied to the batches that a real ``compact --full`` of a hard-linked clone compresses
  (``bench.zstd_buffers``). ``--codec lz4`` encodes them in lz4 instead: the floor under
  the operator's trade ``--compression-top lz4``.

Each step's figure is this process's CPU time (every step runs on this thread), the least
of ``--repeat`` runs. Their
sum is the floor of this design's two pointers on these records on this machine. It
leaves out much that a job must do (Arrow's validation of each batch, the key buffer's
inserts, the survivors' take, the output's frames and writes). It also counts a little
that a job may skip: phase 2 need not decode a batch without survivors, and a batch that
survives whole may be written in the frame it was read in, without an encode
(``fileformat/read_frames.py``). On these shapes' full compactions, every block keeps
survivors and no frame is reused (lz4 in, zstd out). Spread perfectly over two cores, a
job takes at least half the floor in wall time.

In the same run, DuckDB's ``QUALIFY row_number()`` dedup of the shape's Parquet copy (2
threads) and ``compact --full --compression-top <--codec>`` of a clone of the store run
``--repeat`` times each, in turn, timed as ``bench.shapes`` times them (``bench.run``'s
child processes). A run at 3x DuckDB has a third of DuckDB's median wall time, which is
two thirds of it in CPU time on two cores. The last lines say how much of that budget
the floor takes, what it leaves for everything else, and how much of the compactor's
CPU is above the floor.

The shape's workdir must exist (``python -m bench.shapes --only <shape>`` makes it). The
store is not changed; clones and outputs go to temporary directories inside the
workdir. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
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
from .codecs import least_of
from .contenders import live_files
from .ipc_decode import PHASE1_FIELDS, Payload, collect
from .profile_job import cloned
from .run import (
    clone_store,
    compact_full_command,
    duckdb_command,
    last_json,
    run_child,
    warm,
)
from .shapes import ROOT, SHAPES
from .workload import MANIFEST, Params
from .zstd_buffers import CODEC, kept_batches

PHASE1: pa.ipc.IpcReadOptions = pa.ipc.IpcReadOptions(
    included_fields=list(field_indices(PHASE1_FIELDS)), use_threads=False
)
WHOLE: pa.ipc.IpcReadOptions = pa.ipc.IpcReadOptions(use_threads=False)

Batches = list[tuple[pa.RecordBatch, int]]
"""Batches with their logical bytes, as a writer's encoder takes them."""


class Inputs(NamedTuple):
    """A shape's live files, as the steps take them."""

    store: LocalStore
    keys: list[str]
    sizes: list[int]
    payloads: list[Payload]
    key_columns: list[pa.Array]

    @property
    def records(self) -> int:
        return sum(len(k) for k in self.key_columns)


class Step(NamedTuple):
    label: str
    run: Callable[[], object]
    times: int
    """How many times a job makes it: once for each pointer, or once."""


def load(store_dir: Path) -> Inputs:
    """The store's live files: their keys, their bytes, their compressed batch messages,
    and each message's key column."""
    store = LocalStore(str(store_dir))
    files = list(live_files(store, None))
    payloads = collect(store)
    return Inputs(
        store,
        [f.key for f in files],
        [f.size for f in files],
        payloads,
        [ipc.read_compressed(p, s, PHASE1, c).column("key") for p, s, c in payloads],
    )


def output_batches(store_dir: Path, now_ms: int) -> Batches:
    """The batches that a full compaction (at ``now_ms``) of a clone of the store
    compresses in the top level's codec, each with its logical bytes."""
    with kept_batches() as batches, cloned(store_dir, now_ms) as (compactor, *_):
        compactor.run_planned(now_ms, full=True)
    return batches


def mapped(store: LocalStore, keys: list[str], sizes: list[int]) -> Iterator[memoryview]:
    """Each file's bytes mapped whole off its stream (``read_mapped``), in turn; a map
    goes with the last view of it."""
    for key, size in zip(keys, sizes, strict=True):
        with store.open_stream(key) as stream:
            view = stream.read_mapped(size)
            if view is None:
                raise SystemExit(f"{key}: the local store gave no map of it")
            yield view


def map_and_crc_all(store: LocalStore, keys: list[str], sizes: list[int]) -> None:
    """Every file's bytes mapped off its stream, with their CRC-32."""
    for view in mapped(store, keys, sizes):
        isal_zlib.crc32(view)


def decode_all(payloads: list[Payload], options: pa.ipc.IpcReadOptions) -> None:
    """Every compressed batch message decoded, the fields of ``options``."""
    for payload, schema, codec in payloads:
        ipc.read_compressed(payload, schema, options, codec)


def hash_all(key_columns: list[pa.Array]) -> None:
    """SHA-512/256 of every key, on this thread; each column's digests dropped at once."""
    for keys in key_columns:
        hash_keys(keys, threads=1)


def encode_all(encoder: BatchEncoder, batches: Batches) -> None:
    """Every batch encoded as the writer encodes it."""
    for batch, logical in batches:
        encoder.encode(batch, logical)


def fixed_steps(inputs: Inputs, batches: Batches, codec: str) -> list[Step]:
    encoder = BatchEncoder(codec)
    return [
        Step(
            "map every input file and CRC-32 its bytes, twice (the stream's map, ISA-L)",
            lambda: map_and_crc_all(inputs.store, inputs.keys, inputs.sizes),
            2,
        ),
        Step("decode offsets and keys (phase 1)", lambda: decode_all(inputs.payloads, PHASE1), 1),
        Step("decode whole records (phase 2)", lambda: decode_all(inputs.payloads, WHOLE), 1),
        Step(
            f"SHA-512/256 of every key (the kernel's {HASH_IMPL}, one thread)",
            lambda: hash_all(inputs.key_columns),
            1,
        ),
        Step(
            f"encode the survivors ({codec}, the writer's encoder)",
            lambda: encode_all(encoder, batches),
            1,
        ),
    ]


def print_floor(steps: list[Step], repeat: int, records: int) -> float:
    """Times each step, prints them as a table, and returns their sum."""
    print("| step | CPU s | ns a record |")
    print("|---|---:|---:|")
    floor = 0.0
    for step in steps:
        cpu = step.times * least_of(step.run, repeat)[0]
        floor += cpu
        print(f"| {step.label} | {cpu:.2f} | {1e9 * cpu / records:,.0f} |")
    print(f"| **the floor (their sum)** | **{floor:.2f}** | **{1e9 * floor / records:,.0f}** |")
    return floor


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


def contenders(workdir: Path, repeat: int, codec: str, now_ms: int) -> tuple[Runs, Runs]:
    """DuckDB's dedup of the workdir's Parquet copy and ``compact --full`` of a clone of
    its store at ``now_ms`` (its top level written in ``codec``), ``repeat`` times each in
    turn, timed as ``bench.run`` times them (a child process from spawn to exit, its input
    in the page cache). SystemExit if either fails, or if the compaction is not one
    committed job."""
    duck, ours = Runs([], []), Runs([], [])
    with tempfile.TemporaryDirectory(prefix="floor-", dir=workdir) as tmp:
        out, spill, clone = Path(tmp) / "out.parquet", Path(tmp) / "spill", Path(tmp) / "store"
        spill.mkdir()
        duckdb = duckdb_command(workdir / "records.parquet", out, 2, spill)
        compact = compact_full_command(clone, now_ms) + ["--compression-top", codec]
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
                if name == "compactor":
                    _one_job(m.stdout)
                runs = duck if name == "duckdb" else ours
                runs.walls.append(m.wall_s)
                runs.cpus.append(m.user_s + m.sys_s)
                out.unlink(missing_ok=True)
    return duck, ours


def _one_job(stdout: str) -> None:
    """SystemExit unless ``compact --json`` reported one committed job."""
    try:
        jobs = last_json(stdout).get("jobs", [])
    except ValueError:  # no report at all
        jobs = []
    if len(jobs) != 1 or not jobs[0].get("committed"):
        raise SystemExit(f"compact --full ran {len(jobs)} job(s), not one committed job")


def print_budget(duck: Runs, ours: Runs, floor: float, records: int, codec: str) -> None:
    duck_s, our_cpu = statistics.median(duck.walls), statistics.median(ours.cpus)
    budget = 2 * duck_s / 3
    left = budget - floor
    print(duck.line("DuckDB") + ".")
    command = f"compact --full --compression-top {codec}"
    print(ours.line(command) + f", {our_cpu - floor:.2f} s of it above the floor.")
    print(f"At 3x DuckDB, a job has {duck_s / 3:.2f} s of wall time, {budget:.2f} s of CPU on "
          f"two cores. The floor takes {floor:.2f} s of CPU ({floor / budget:.0%} of that), "
          f"and at least {floor / 2:.2f} s of wall time on two cores "
          f"({duck_s / (floor / 2):.2f}x DuckDB at most).")  # fmt: skip
    print(f"It leaves {left:.2f} s of CPU ({1e9 * left / records:,.0f} ns a record) for "
          f"everything else; the compactor spends {1e9 * (our_cpu - floor) / records:,.0f} "
          "ns a record above the floor.")  # fmt: skip


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
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    workdir = next(s for s in SHAPES if s.name == args.shape).workdir(1.0)
    if not (workdir / "store").is_dir():
        raise SystemExit(f"{workdir}: no workload (python -m bench.shapes --only {args.shape})")
    now_ms = Params(**json.loads((workdir / MANIFEST).read_text())["params"]).compaction_now_ms
    inputs = load(workdir / "store")
    if not inputs.records:
        raise SystemExit(f"{workdir}: no compressed batch in the live files")
    batches = output_batches(workdir / "store", now_ms)
    mb = sum(inputs.sizes) / 1e6
    print(f"{args.shape}: {len(inputs.keys)} files, {mb:,.0f} MB, {len(inputs.payloads):,} "
          f"compressed batch messages, {inputs.records:,} keys decoded, "
          f"{sum(b.num_rows for b, _ in batches):,} survivors encoded; "
          f"least of {args.repeat} runs")  # fmt: skip
    print()
    records = inputs.records
    floor = print_floor(fixed_steps(inputs, batches, args.codec), args.repeat, records)
    del inputs, batches  # a gigabyte or two, not held while the contenders run
    compile_checkout(ROOT)  # timed as an installed package runs (bench.bytecode)
    duck, ours = contenders(workdir, args.repeat, args.codec, now_ms)
    print()
    print_budget(duck, ours, floor, records, args.codec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
