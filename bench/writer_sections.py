"""The writer's cost per small section, less the encoding of its records.

    .venv/bin/python -m bench.writer_sections --repeat 5

Writes the survivors of a 10,000-partition job as a compaction writes them
(``FileWriter.write_rows`` of each group's batch, shared blocks, zstd, the offset index
collected as it goes) into memory: ``--groups`` batches of ``--partitions`` sections of
``--rows`` records each (by default about ingest-10kp's output: 72 groups of 139
partitions, 35 records each). Prints, per run, the CPU time of the writes, of ``finish``
and of the index's encoding, the time the encoder took (``BatchEncoder.encode``), and
what is left per section: the writer's own work on each small section. No store, no
reading. Not a test.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from compactor.fileformat.offset_index import IndexBuilder
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.writer import SHARE_BELOW, FileWriter


def group_batch(group: int, partitions: int, rows: int, value_bytes: int) -> pa.RecordBatch:
    """A group's survivors: ``partitions`` runs of ``rows`` records, offsets strictly
    increasing within each run."""
    n = partitions * rows
    columns: dict[str, pa.Array] = {
        "offset": pa.array([3 * r + group for _ in range(partitions) for r in range(rows)]),
        "timestamp": pa.array(range(1_700_000_000_000, 1_700_000_000_000 + n), pa.int64()),
        "key": pa.array([b"key-%06d" % (i % 5000) for i in range(n)], pa.binary()),
        "value": pa.array([b"v" * value_bytes] * n, pa.binary()),
        "headers": pa.array([[]] * n, RECORD_SCHEMA.field("headers").type),
    }
    arrays = [columns.get(f.name, pa.nulls(n, f.type)) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


def one_run(batches: list[pa.RecordBatch], partitions: int, rows: int) -> dict[str, Any]:
    sink, index = io.BytesIO(), IndexBuilder()
    writer = FileWriter(
        sink,
        object_name="bench",
        compression="zstd",
        encode_ahead=True,
        index=index,
        share_below=SHARE_BELOW,
    )
    encoding = [0.0]
    encode: Callable[..., bytes] = writer._encoder.encode

    def timed(*args: Any) -> bytes:
        start = time.process_time()
        try:
            return encode(*args)
        finally:
            encoding[0] += time.process_time() - start

    setattr(writer._encoder, "encode", timed)  # noqa: B010 (this writer's encoder, timed)
    start = time.process_time()
    for g, batch in enumerate(batches):
        sections = [("topic", g * partitions + p, p * rows, rows) for p in range(partitions)]
        writer.write_rows(batch, sections)
    written = time.process_time()
    meta = writer.finish()
    finished = time.process_time()
    assert writer.footer_crc is not None
    encoded = index.encode(meta, writer.footer_crc)
    indexed = time.process_time()
    total = indexed - start
    return {
        "write_rows": written - start,
        "finish": finished - written,
        "index": indexed - finished,
        "encode": encoding[0],
        "sections": len(meta.sections),
        "bytes": meta.size,
        "index_bytes": len(encoded),
        "us_per_section": (total - encoding[0]) / len(meta.sections) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.writer_sections", description=__doc__)
    ap.add_argument("--groups", type=int, default=72)
    ap.add_argument("--partitions", type=int, default=139, help="sections per group")
    ap.add_argument("--rows", type=int, default=35, help="records per section")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if min(args.groups, args.partitions, args.rows, args.repeat) < 1:
        ap.error("--groups, --partitions, --rows and --repeat must be at least 1")
    batches = [
        group_batch(g, args.partitions, args.rows, args.value_bytes) for g in range(args.groups)
    ]
    one_run(batches, args.partitions, args.rows)  # warm-up
    per_section = []
    for _ in range(args.repeat):
        r = one_run(batches, args.partitions, args.rows)
        per_section.append(r["us_per_section"])
        print(
            f"{r['sections']:,} sections: write_rows {r['write_rows']:.3f} s, finish "
            f"{r['finish']:.3f} s, index {r['index']:.3f} s, of which encoding "
            f"{r['encode']:.3f} s; {r['us_per_section']:.1f} us a section less encoding "
            f"({r['bytes']:,} bytes, index {r['index_bytes']:,})"
        )
    print(f"median: {sorted(per_section)[len(per_section) // 2]:.1f} us a section less encoding")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
