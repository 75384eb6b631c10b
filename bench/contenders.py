"""The baselines ``bench.run`` measures, each run as its own process.

    python -m bench.contenders twopass --store DIR --out FILE [--max-files N] [--compression C]
    python -m bench.contenders copy    --store DIR --out FILE [--max-files N] [--compression C]
    python -m bench.contenders duckdb  --parquet FILE --out FILE [--threads 2] [--compression C]

Each prints one JSON object on stdout (what it did, and ``work_s``: the time of the work
itself, without interpreter start-up). The compactor is not here: ``bench.run`` runs the
real command line (``compactor compact --full --json``), and the key kernel has its own
benchmark (``bench.kernel_bench``); ``raw_sha_c`` here gives it a per-key C reference.

- ``twopass``: the seed blog's algorithm in pure Python. Per partition, pass 1 reads every
  record (same ``StreamReader``, same two GET streams per file and section merge as the
  worker) and keeps a dict MD5(key) -> latest offset; pass 2 re-reads the partition, hashes
  every key again and writes the records whose offset is their key's latest through the
  same ``FileWriter``.
- ``copy``: the same input through the same reader and writer, one stream per file, with
  no deduplication: the floor any reader + writer pipeline pays.
- ``duckdb``: ``COPY (SELECT * FROM read_parquet(..) QUALIFY row_number() OVER (PARTITION BY
  topic, partition, key ORDER BY offset DESC) = 1) TO out.parquet`` at ``SET threads``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compactor.catalog import Catalog, LiveFile
from compactor.fileformat import FileWriter, SectionReader, StreamReader
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import LocalStore
from compactor.planner.codecs import codec_named
from compactor.worker.gather import gathered, section_batches
from compactor.worker.merge import SectionMerge

_OFFSET, _KEY = 0, 2


def live_files(store: LocalStore, max_files: int | None) -> list[LiveFile]:
    files = list(Catalog(store).snapshot().files)
    return files if max_files is None else files[:max_files]


def merged_pointer(store: LocalStore, files: list[LiveFile], stack: ExitStack) -> SectionMerge:
    readers = []
    for f in files:
        stream = stack.enter_context(store.open_stream(f.key))
        readers.append(StreamReader(stream, object_name=f.key, size=f.size))
    return SectionMerge(readers)


def _batches(sections: Iterator[SectionReader]) -> Iterator[pa.RecordBatch]:
    """A partition's batches gathered as the worker's phase 2 gathers them."""
    return gathered(section_batches(sections))


class _Output:
    """A ``FileWriter`` on a local file, set up as the worker's (encoding ahead on its own
    thread); a partition's section opens at its first record."""

    def __init__(self, path: Path, compression: str | None = "zstd") -> None:
        self.file: BinaryIO = open(path, "wb", buffering=1 << 20)  # noqa: SIM115
        self.writer = FileWriter(
            self.file,
            object_name=path.name,
            compression=compression,
            encode_ahead=True,
            share_below=SHARE_BELOW,
        )
        self.records = 0

    def partition(self, topic: str, partition: int, batches: Iterator[pa.RecordBatch]) -> None:
        started = False
        for batch in batches:
            if not batch.num_rows:
                continue
            if not started:
                self.writer.begin_section(topic, partition)
                started = True
            self.writer.write_batch(batch)
            self.records += batch.num_rows
        if started:
            self.writer.end_section()

    def finish(self) -> int:
        meta = self.writer.finish()
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return meta.size


def twopass(
    store_dir: Path, out: Path, max_files: int | None, compression: str | None = "zstd"
) -> dict[str, Any]:
    store = LocalStore(store_dir)
    files = live_files(store, max_files)
    started = time.perf_counter()
    records_in = 0
    output = _Output(out, compression)
    md5 = hashlib.md5
    with ExitStack() as stack:
        phase1 = merged_pointer(store, files, stack)
        phase2 = merged_pointer(store, files, stack)
        while (tp := phase1.next_partition()) is not None:
            assert phase2.next_partition() == tp
            latest: dict[bytes, int] = {}
            for batch in _batches(phase1.take(*tp)):
                records_in += batch.num_rows
                keys = batch.column(_KEY).to_pylist()
                offsets = batch.column(_OFFSET).to_pylist()
                for key, offset in zip(keys, offsets, strict=True):
                    if key is not None:
                        latest[md5(key).digest()] = offset

            def survivors(
                sections: Iterator[SectionReader], latest: dict[bytes, int]
            ) -> Iterator[pa.RecordBatch]:
                for batch in _batches(sections):
                    keys = batch.column(_KEY).to_pylist()
                    offsets = batch.column(_OFFSET).to_pylist()
                    keep = [
                        key is None or latest[md5(key).digest()] == offset
                        for key, offset in zip(keys, offsets, strict=True)
                    ]
                    yield batch.filter(pa.array(keep, pa.bool_()))

            output.partition(tp[0], tp[1], survivors(phase2.take(*tp), latest))
        assert phase2.next_partition() is None
    bytes_out = output.finish()
    return {
        "work_s": time.perf_counter() - started,
        "files": len(files),
        "records_in": records_in,
        "records_out": output.records,
        "logical_bytes_in": sum(f.uncompressed_bytes for f in files),
        "bytes_in": sum(f.size for f in files),
        "bytes_out": bytes_out,
        "gets": store.gets.total,
    }


def copy(
    store_dir: Path, out: Path, max_files: int | None, compression: str | None = "zstd"
) -> dict[str, Any]:
    store = LocalStore(store_dir)
    files = live_files(store, max_files)
    started = time.perf_counter()
    output = _Output(out, compression)
    with ExitStack() as stack:
        pointer = merged_pointer(store, files, stack)
        while (tp := pointer.next_partition()) is not None:
            output.partition(tp[0], tp[1], _batches(pointer.take(*tp)))
    bytes_out = output.finish()
    return {
        "work_s": time.perf_counter() - started,
        "files": len(files),
        "records_in": output.records,
        "records_out": output.records,
        "logical_bytes_in": sum(f.uncompressed_bytes for f in files),
        "bytes_in": sum(f.size for f in files),
        "bytes_out": bytes_out,
        "gets": store.gets.total,
    }


DUCKDB_QUERY = (
    "COPY (SELECT * FROM read_parquet('{src}') "
    'QUALIFY row_number() OVER (PARTITION BY topic, "partition", key '
    'ORDER BY "offset" DESC) = 1) '
    "TO '{out}' (FORMAT parquet{options})"
)
DUCKDB_CODECS = ("snappy", "zstd", "lz4", "uncompressed")
"""The codecs DuckDB's Parquet writer takes (``COMPRESSION``); its default is snappy."""


def duckdb_dedup(
    parquet: Path, out: Path, threads: int, temp: Path, compression: str | None = None
) -> dict[str, Any]:
    import duckdb

    started = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads={int(threads)}")
    con.execute(f"SET temp_directory='{temp}'")
    options = f", COMPRESSION {compression}" if compression else ""
    query = DUCKDB_QUERY.format(src=parquet, out=out, options=options)
    row = con.execute(query).fetchone()
    con.close()
    work_s = time.perf_counter() - started
    records_in = pq.ParquetFile(parquet).metadata.num_rows
    return {
        "work_s": work_s,
        "threads": threads,
        "query": query,
        "records_in": records_in,
        "records_out": int(row[0]) if row else pq.ParquetFile(out).metadata.num_rows,
        "bytes_in": parquet.stat().st_size,
        "bytes_out": out.stat().st_size,
        "duckdb_version": duckdb.__version__,
    }


RAW_SHA_SOURCE = Path(__file__).with_name("raw_sha512_256.c")
RAW_SHA_BINARY = Path(__file__).with_name("out") / "raw_sha512_256"


def raw_sha_c(keys: int, key_bytes: int = 36) -> dict[str, Any]:
    """Per-key SHA-512/256 in C (OpenSSL), from ``raw_sha512_256.c`` compiled on demand
    into bench/out/; ``{"error": ...}`` when there is no C compiler or OpenSSL header."""
    try:
        if (
            not RAW_SHA_BINARY.exists()
            or RAW_SHA_BINARY.stat().st_mtime < RAW_SHA_SOURCE.stat().st_mtime
        ):
            RAW_SHA_BINARY.parent.mkdir(parents=True, exist_ok=True)
            cc = os.environ.get("CC", "cc")
            cmd = [cc, "-O2", "-o", str(RAW_SHA_BINARY), str(RAW_SHA_SOURCE), "-lcrypto"]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        proc = subprocess.run(
            [str(RAW_SHA_BINARY), str(keys), str(key_bytes)],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return {"error": f"cannot build or run {RAW_SHA_SOURCE.name}: {detail.strip()[:300]}"}
    result: dict[str, Any] = json.loads(proc.stdout)
    if result["abc"] != hashlib.new("sha512_256", b"abc").hexdigest():
        return {"error": "raw_sha512_256 does not compute SHA-512/256"}
    return result


# --- output digests (run by bench.run after the timed process, not timed) ---------------


def _digest_add(d: dict[str, int], partition: int | pa.Array, offsets: pa.Array) -> None:
    offsets = offsets.cast(pa.int64())
    d["records"] += len(offsets)
    d["sum_offset"] += int(pc.sum(offsets).as_py() or 0)
    d["sum_offset_sq"] += int(pc.sum(pc.multiply(offsets, offsets)).as_py() or 0)
    if isinstance(partition, int):
        weighted = partition * (int(pc.sum(offsets).as_py() or 0))
    else:
        weighted = int(pc.sum(pc.multiply(partition.cast(pa.int64()), offsets)).as_py() or 0)
    d["sum_partition_x_offset"] += weighted


def _new_digest() -> dict[str, int]:
    return {"records": 0, "sum_offset": 0, "sum_offset_sq": 0, "sum_partition_x_offset": 0}


def digest_cf(path: Path) -> dict[str, int]:
    """Which (partition, offset) pairs a file in the project's format holds, summarized."""
    d = _new_digest()
    with io.BufferedReader(io.FileIO(path), 1 << 20) as f:
        reader = StreamReader(f, object_name=str(path), size=path.stat().st_size)
        for section in reader.sections():
            for batch in section.batches():
                _digest_add(d, section.partition, batch.column(_OFFSET))
    return d


def digest_parquet(path: Path) -> dict[str, int]:
    d = _new_digest()
    pf = pq.ParquetFile(path)
    for batch in pf.iter_batches(columns=["partition", "offset"], batch_size=1 << 20):
        _digest_add(d, batch.column(0), batch.column(1))
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.contenders")
    sub = ap.add_subparsers(dest="contender", required=True)
    for name in ("twopass", "copy"):
        p = sub.add_parser(name)
        p.add_argument("--store", type=Path, required=True)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--max-files", type=int, default=None)
        p.add_argument(
            "--compression",
            type=codec_named,
            default="zstd",
            help="the output's codec (default zstd, the top level's)",
        )
    p = sub.add_parser("duckdb")
    p.add_argument("--parquet", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--temp", type=Path, default=Path("/tmp"))
    p.add_argument(
        "--compression", choices=DUCKDB_CODECS, default=None, help="default DuckDB's (snappy)"
    )
    args = ap.parse_args(argv)
    if args.contender == "twopass":
        result = twopass(args.store, args.out, args.max_files, args.compression)
    elif args.contender == "copy":
        result = copy(args.store, args.out, args.max_files, args.compression)
    else:
        result = duckdb_dedup(args.parquet, args.out, args.threads, args.temp, args.compression)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
