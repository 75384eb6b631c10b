"""A local throughput check of the writer and readers (not a test: timings vary by machine).

    python -m fileformat.bench_decode [records] [offset step]

Writes ``records`` records (16-byte keys, random 100-byte values, no headers) into four
sections, once per compression, then times the plain streaming read (decode every batch)
and ``verify_stream``, best of three. An offset step above 1 leaves holes, so the verifier
builds bitmaps from scattered offsets. Pin it to one core with ``taskset -c 0``.
"""

from __future__ import annotations

import io
import random
import sys
import time

import pyarrow as pa

from compactor.fileformat.reader import StreamReader, verify_stream
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.writer import write_file


def make_batch(n: int, step: int) -> pa.RecordBatch:
    rnd = random.Random(0)
    blob = rnd.randbytes(n * 100)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(0, n * step, step), pa.int64()),
            pa.array(range(1_700_000_000_000, 1_700_000_000_000 + n), pa.int64()),
            pa.array([b"key-%012d" % rnd.randrange(n) for _ in range(n)], pa.binary()),
            pa.array([blob[i * 100 : (i + 1) * 100] for i in range(n)], pa.binary()),
            pa.array([[]] * n, RECORD_SCHEMA.field("headers").type),
            pa.nulls(n, pa.int64()),
        ],
        schema=RECORD_SCHEMA,
    )


def stream_read(data: bytes) -> int:
    rows = 0
    reader = StreamReader(io.BytesIO(data), object_name="bench", size=len(data))
    for section in reader.sections():
        for batch in section.batches():
            rows += batch.num_rows
    return rows


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 2_000_000
    step = int(argv[1]) if len(argv) > 1 else 1
    batch = make_batch(n, step)
    quarter = n // 4
    for compression in (None, "zstd", "lz4"):
        sink = io.BytesIO()
        start = time.perf_counter()
        write_file(
            sink,
            [("t", p, [batch.slice(p * quarter, quarter)]) for p in range(4)],
            compression=compression,
        )
        write_s = time.perf_counter() - start
        data = sink.getvalue()
        read_s = verify_s = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            assert stream_read(data) == quarter * 4
            read_s = min(read_s, time.perf_counter() - start)
            start = time.perf_counter()
            verify_stream(io.BytesIO(data), object_name="bench", size=len(data))
            verify_s = min(verify_s, time.perf_counter() - start)
        rows = quarter * 4
        print(
            f"{compression or 'none':5} {len(data) / 1e6:7.1f} MB  "
            f"write {rows / write_s / 1e6:5.2f}  stream read {rows / read_s / 1e6:5.2f}  "
            f"verify {rows / verify_s / 1e6:5.2f}  (M records/s)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
