"""Benchmark workload: one compacted topic, written the fast way.

The same records go to two places:

- a local directory store (``<workdir>/store``): files of many partitions each, in the
  project's file format (``FileWriter``), made live with one catalog ``append_files``
  commit, exactly as an agent's ingest (L0) or an L0 -> L1 copy (L1) would leave them;
- one Parquet file (``<workdir>/records.parquet``) with columns topic, partition, offset,
  timestamp, key, value, for DuckDB.

Records are built column-wise in Arrow (no per-record Python objects, no JSON). The
record stream is cut into files of about ``file_mb`` MiB of logical data; inside a file
the records of every partition form one section, so each file holds (nearly) every
partition, and a partition's sections along the file sequence have increasing offsets.

Keys are UUID-shaped 36-byte strings. Each partition has its own key space of
``keys_per_partition`` keys; key index = floor(K * u ** skew) for uniform u, so a few keys
are updated very often and most rarely (``ingest.workload`` draws keys the same way).
Values are hex text (random bytes, so zstd halves them); ``tombstone_ratio`` of them are
null (tombstones). Records carry no headers. Everything is seeded: the same parameters
give the same records.

    python -m bench.workload --records 1000000 --value-bytes 100 --workdir /tmp/w
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compactor.catalog import Catalog, CommitRecord, LiveFile, TopicConfig
from compactor.catalog.changes import append_files, create_topic
from compactor.fileformat import RECORD_SCHEMA, FileWriter, SectionMeta
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import LocalStore
from compactor.planner.codecs import CODECS, DEFAULT_CODECS, codec_name, codec_named

TOPIC = "bench"
KEY_BYTES = 36
RECORD_OVERHEAD = 16
"""Offset and timestamp: counted in a record's logical size, as the file format does."""
MANIFEST = "manifest.json"
WORKLOAD_VERSION = 7
"""Bump when the generator changes what it writes, so cached workdirs are regenerated
(4: format version 3 with footer_version, sections under 128 KiB in 256 KiB blocks;
5: lz4, the codec below the top level, by default; 6: a compressed batch's buffers
stored as they are where the codec shrinks them by less than ``ipc.MIN_SAVINGS``; 7: that
share 0.6 for the data of int64 columns in lz4 (ipc.MIN_SAVINGS_INTEGERS), so offsets and
timestamps are stored as they are)."""

_HEADERS_TYPE = RECORD_SCHEMA.field("headers").type
_PARQUET_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)


@dataclass(frozen=True, slots=True)
class Params:
    records: int = 10_000_000
    value_bytes: int = 100
    partitions: int = 100
    keys_per_partition: int = 0
    """Key space per partition; 0 means half the records per partition."""
    skew: float = 3.0
    unique_keys: bool = False
    """Every record a key of its own (an append-only keyed topic: inserts, events with
    ids), so deduplication drops nothing; ``keys_per_partition`` and ``skew`` unused."""
    tombstone_ratio: float = 0.01
    file_mb: int = 64
    """Logical MiB of records per file."""
    level: int = 1
    """The level the files are registered at (0: as an agent's ingest leaves them)."""
    start_ms: int = 1_700_000_000_000
    seed: int = 0
    compression: str | None = DEFAULT_CODECS.below_top
    """The files' codec: by default their level's (``planner.codecs``; a workload's levels
    are all below the top), ``--compression`` to weigh another."""
    version: int = WORKLOAD_VERSION

    @property
    def key_space(self) -> int:
        if self.keys_per_partition > 0:
            return self.keys_per_partition
        return max(1, self.records // self.partitions // 2)

    @property
    def records_per_file(self) -> int:
        per_record = RECORD_OVERHEAD + KEY_BYTES + self.value_bytes
        return max(1, (self.file_mb << 20) // per_record)

    @property
    def end_ms(self) -> int:
        """One past the last record's timestamp (one record per millisecond)."""
        return self.start_ms + self.records

    @property
    def compaction_now_ms(self) -> int:
        """The clock a benchmark's compaction runs at: an hour past the last record."""
        return self.end_ms + 3_600_000

    def check(self) -> None:
        if self.records < 1 or self.partitions < 1 or self.value_bytes < 0:
            raise ValueError("records and partitions must be >= 1, value bytes >= 0")
        if self.value_bytes * self.records_per_file >= 1 << 31:
            raise ValueError("files this large overflow 32-bit binary offsets: lower file_mb")
        if not 0 <= self.tombstone_ratio <= 1:
            raise ValueError("tombstone ratio must be in [0, 1]")
        if not self.unique_keys and self.partitions * self.key_space > MAX_KEYS:
            raise ValueError(
                f"{self.partitions:,} partitions of {self.key_space:,} keys are more than the "
                f"{MAX_KEYS:,} keys a key dictionary holds: fewer, or --unique-keys"
            )


@dataclass(frozen=True, slots=True)
class Workload:
    """A generated workload on disk (what ``manifest.json`` records)."""

    params: Params
    workdir: Path
    files: int
    logical_bytes: int
    """Sum over records of offset + timestamp (16) + key + value bytes."""
    store_bytes: int
    parquet_bytes: int
    distinct_keys: int
    """Distinct (partition, key) pairs: the records a deduplication keeps."""
    generate_s: float

    @property
    def store_dir(self) -> Path:
        return self.workdir / "store"

    @property
    def parquet(self) -> Path:
        return self.workdir / "records.parquet"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["workdir"] = str(self.workdir)
        out["key_space"] = self.params.key_space
        return out


MAX_KEYS = (1 << 31) // 36 - 1
"""The most keys a key dictionary holds: its 36-byte keys in one binary array (32-bit
offsets)."""
_RANDOM_CHUNK = 1 << 24
"""Bytes per ``randbytes`` call: one call takes at most 2^31 - 1 bits. Chunks of a multiple
of 4 bytes give the same bytes as one call, so a seed's keys do not depend on it."""


def _key_dictionary(partitions: int, key_space: int, seed: int) -> pa.Array:
    """partitions * key_space UUID-shaped keys; key (p, i) is entry p * key_space + i."""
    n = partitions * key_space  # at most MAX_KEYS (Params.check)
    rng = random.Random(seed ^ 0x5EED)
    hex32 = b"".join(
        rng.randbytes(min(_RANDOM_CHUNK, 16 * n - at)).hex().encode()
        for at in range(0, 16 * n, _RANDOM_CHUNK)
    )
    text = pa.Array.from_buffers(pa.utf8(), n, [None, _fixed_offsets(n, 32), pa.py_buffer(hex32)])
    cuts = ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
    parts = [pc.utf8_slice_codeunits(text, a, b) for a, b in cuts]
    return pc.binary_join_element_wise(*parts, "-").cast(pa.binary())


def _fixed_offsets(n: int, width: int) -> pa.Buffer:
    return pa.array(range(0, (n + 1) * width, width), pa.int32()).buffers()[1]


def _values(n: int, width: int, rng: random.Random) -> pa.Array:
    """n hex-text values of ``width`` bytes (random, so they compress about 2:1)."""
    data = rng.randbytes((n * width + 1) // 2).hex().encode()[: n * width]
    return pa.Array.from_buffers(
        pa.binary(), n, [None, _fixed_offsets(n, width), pa.py_buffer(data)]
    )


@dataclass(slots=True)
class _Chunk:
    """One file's records, sorted by partition (stable: stream order within a partition)."""

    partition: pa.Array  # int32
    timestamp: pa.Array  # int64
    key: pa.Array
    value: pa.Array
    counts: list[int]  # records per partition
    key_ids: pa.Array  # partition * key_space + key index, per record


def _chunk(p: Params, keys: pa.Array, first: int, n: int, index: int) -> _Chunk:
    seed = p.seed * 1_000_003 + index
    rng = random.Random(seed)
    part = pc.cast(pc.floor(pc.multiply(pc.random(n, initializer=seed), p.partitions)), pa.int32())
    order = pc.sort_indices(part)  # stable
    part = pc.take(part, order)
    timestamp = pc.add(pc.cast(order, pa.int64()), p.start_ms + first)
    if p.unique_keys:  # the record's place in the stream, as 36 digits
        gid = pc.add(pc.cast(order, pa.int64()), first)
        key = pc.utf8_lpad(pc.cast(gid, pa.string()), width=KEY_BYTES, padding="0")
        key = key.cast(pa.binary())
    else:
        u = pc.random(n, initializer=seed + 7_777_777)
        idx = pc.cast(pc.floor(pc.multiply(pc.power(u, p.skew), p.key_space)), pa.int64())
        gid = pc.add(pc.multiply(pc.cast(part, pa.int64()), p.key_space), idx)
        key = pc.take(keys, gid)
    value = _values(n, p.value_bytes, rng)
    if p.tombstone_ratio > 0:
        dead = pc.less(pc.random(n, initializer=seed + 3_333_333), p.tombstone_ratio)
        value = pc.if_else(dead, pa.scalar(None, pa.binary()), value)
    counts = [0] * p.partitions
    vc = pc.value_counts(part)
    for v, c in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True):
        counts[v] = c
    return _Chunk(part, timestamp, key, value, counts, gid)


def _empty_headers(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(
        pa.array([0] * (n + 1), pa.int32()),
        pa.array([], _HEADERS_TYPE.value_type),
        type=_HEADERS_TYPE,
    )


def generate(p: Params, workdir: Path, *, progress: bool | None = None) -> Workload:
    """Write the store and the Parquet file under ``workdir`` (replacing what is there)."""
    p.check()
    if progress is None:
        progress = sys.stdout.isatty()
    started = time.monotonic()
    for old in ("store", "records.parquet", MANIFEST):
        path = workdir / old
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    store = LocalStore(workdir / "store")
    catalog = Catalog(store)
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    catalog.commit(lambda s: create_topic(s, TOPIC, p.partitions, config))
    keys = (
        pa.array([], pa.binary())
        if p.unique_keys
        else _key_dictionary(p.partitions, p.key_space, p.seed)
    )
    headers = _empty_headers(p.records_per_file)
    next_offset = [0] * p.partitions
    files: list[LiveFile] = []
    sections: dict[str, tuple[SectionMeta, ...]] = {}
    logical = 0
    key_ids: list[pa.Array] = []
    pq_writer = pq.ParquetWriter(workdir / "records.parquet", _PARQUET_SCHEMA)
    try:
        first = 0
        while first < p.records:
            n = min(p.records_per_file, p.records - first)
            c = _chunk(p, keys, first, n, len(files))
            file_id = uuid.UUID(int=random.Random(p.seed * 7919 + len(files)).getrandbits(128)).hex
            key = f"data/L{p.level}/{file_id}.cf"
            sink = io.BytesIO()
            writer = FileWriter(
                sink, object_name=key, share_below=SHARE_BELOW, compression=p.compression
            )
            offsets: list[pa.Array] = []
            start = 0
            for part, count in enumerate(c.counts):
                if not count:
                    continue
                off = pa.array(range(next_offset[part], next_offset[part] + count), pa.int64())
                offsets.append(off)
                next_offset[part] += count
                batch = pa.RecordBatch.from_arrays(
                    [
                        off,
                        c.timestamp.slice(start, count),
                        c.key.slice(start, count),
                        c.value.slice(start, count),
                        headers.slice(0, count),
                        pa.nulls(count, pa.int64()),
                    ],
                    schema=RECORD_SCHEMA,
                )
                writer.write_section(TOPIC, part, [batch])
                start += count
            meta = writer.finish()
            store.put(key, sink.getvalue(), if_none_match=True)
            files.append(
                LiveFile.of_sections(file_id, key, p.level, meta.size, p.end_ms, meta.sections)
            )
            sections[file_id] = meta.sections
            pq_writer.write_table(
                pa.table(
                    [
                        pa.array([TOPIC] * n, pa.string()),
                        c.partition,
                        pa.concat_arrays(offsets),
                        c.timestamp,
                        c.key,
                        c.value,
                    ],
                    schema=_PARQUET_SCHEMA,
                ),
                row_group_size=1 << 20,
            )
            key_ids.append(pc.unique(c.key_ids))
            logical += sum(s.uncompressed_bytes for s in meta.sections)
            first += n
            if progress:
                print(
                    f"\rgenerated {first:,}/{p.records:,} records, {len(files)} files",
                    end="",
                    flush=True,
                )
    finally:
        pq_writer.close()
    if progress:
        print()
    new_next = {(TOPIC, part): nxt for part, nxt in enumerate(next_offset)}
    expected = {(TOPIC, part): 0 for part in range(p.partitions)}
    catalog.commit(
        lambda s: append_files(s, files=files, expected_next=expected, new_next=new_next),
        CommitRecord("ingest", {"files": [f.id for f in files]}),
        new_files={f.id: (f, sections[f.id]) for f in files},
    )
    store.close()
    w = Workload(
        params=p,
        workdir=workdir,
        files=len(files),
        logical_bytes=logical,
        store_bytes=sum(f.size for f in files),
        parquet_bytes=(workdir / "records.parquet").stat().st_size,
        distinct_keys=pc.count_distinct(pa.chunked_array(key_ids, pa.int64())).as_py(),
        generate_s=round(time.monotonic() - started, 2),
    )
    (workdir / MANIFEST).write_text(json.dumps(w.to_json(), indent=2) + "\n")
    return w


def load(workdir: Path, want: Params) -> Workload | None:
    """The workload cached in ``workdir`` if it was made with exactly ``want``."""
    try:
        data = json.loads((workdir / MANIFEST).read_text())
        params = Params(**data["params"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if params != want:
        return None
    return Workload(
        params=params,
        workdir=workdir,
        files=int(data["files"]),
        logical_bytes=int(data["logical_bytes"]),
        store_bytes=int(data["store_bytes"]),
        parquet_bytes=int(data["parquet_bytes"]),
        distinct_keys=int(data["distinct_keys"]),
        generate_s=float(data["generate_s"]),
    )


def ensure(p: Params, workdir: Path, *, regenerate: bool = False) -> Workload:
    cached = None if regenerate else load(workdir, p)
    return cached if cached is not None else generate(p, workdir)


def codec_suffix(compression: str | None) -> str:
    """How a workdir's default name marks a workload whose files are not in the default
    codec: "" for it, else "-zstd" or "-none"."""
    return "" if compression == Params().compression else f"-{codec_name(compression)}"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    d = Params()
    ap.add_argument("--records", type=int, default=d.records)
    ap.add_argument("--value-bytes", type=int, default=d.value_bytes, help="e.g. 100 or 1024")
    ap.add_argument("--partitions", type=int, default=d.partitions)
    ap.add_argument(
        "--keys-per-partition",
        type=int,
        default=d.keys_per_partition,
        help="key space per partition (default: half the records per partition)",
    )
    ap.add_argument("--skew", type=float, default=d.skew)
    ap.add_argument(
        "--unique-keys",
        action="store_true",
        help="every record a key of its own: deduplication drops nothing",
    )
    ap.add_argument("--tombstone-ratio", type=float, default=d.tombstone_ratio)
    ap.add_argument("--file-mb", type=int, default=d.file_mb, help="logical MiB per file")
    ap.add_argument("--level", type=int, default=d.level, choices=range(0, 4))
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument(
        "--compression",
        choices=list(CODECS),
        default=codec_name(d.compression),
        help=f"the store files' codec (default {d.compression}, their level's)",
    )


def params_from(args: argparse.Namespace) -> Params:
    return Params(
        records=args.records,
        value_bytes=args.value_bytes,
        partitions=args.partitions,
        keys_per_partition=args.keys_per_partition,
        skew=args.skew,
        unique_keys=args.unique_keys,
        tombstone_ratio=args.tombstone_ratio,
        file_mb=args.file_mb,
        level=args.level,
        seed=args.seed,
        compression=codec_named(args.compression),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.workload", description=__doc__)
    add_arguments(ap)
    ap.add_argument("--workdir", type=Path, default=Path("bench/out/work"))
    ap.add_argument("--regenerate", action="store_true")
    args = ap.parse_args(argv)
    try:
        w = ensure(params_from(args), args.workdir, regenerate=args.regenerate)
    except ValueError as exc:
        ap.error(str(exc))
    print(json.dumps(w.to_json(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
