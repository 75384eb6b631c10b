"""Writes the golden files of this folder (see README.md); not part of the test suite.

Usage, from the repository root, with the project's Python::

    python tests/golden/make_goldens.py v2 v2-lz4-as-is         # the current tree
    PYTHONPATH=/tmp/v1 python tests/golden/make_goldens.py v1   # a checkout of c57a7dd
    GOLDEN_PACKAGE=fileformat PYTHONPATH=/tmp/v1a \
        python tests/golden/make_goldens.py v1-5col v1-5col-zstd  # a checkout of 06b6775

(``git worktree add /tmp/v1 c57a7dd`` makes a checkout; at 06b6775 the package imported as
``fileformat``, not ``compactor.fileformat``, hence GOLDEN_PACKAGE.) Each golden needs a
writer of a given format version and record schema; the script refuses to run with another
one. The inputs are written out here and, independently, as expectations in
tests/test_format_spec.py.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

PACKAGE = os.environ.get("GOLDEN_PACKAGE", "compactor.fileformat")
framing, records, writer = (
    importlib.import_module(f"{PACKAGE}.{m}") for m in ("framing", "records", "writer")
)

T = 1_700_000_000_000
DAY = 86_400_000
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int | None]

# (topic, partition, input batches); a row is (offset, timestamp, key, value, headers,
# delete_horizon).
BASIC: list[tuple[str, int, list[list[Row]]]] = [
    (
        "orders",
        0,
        [
            [
                (3, T, b"alice", b"v1", (), None),
                (4, T + 1, b"bob", b"v2", (("trace", b"abc"),), None),
                (6, T + 5, b"carol", None, (), T + 5 + DAY),
            ],
            [
                (7, T + 6, b"dave", None, (), None),
                (9, T + 2, b"erin", b"v5", (), None),
                (10, T + 9, b"alice", None, (), T + 3 + DAY),
            ],
        ],
    ),
    (
        "orders",
        1,
        [
            [
                (0, T + 10, None, b"hello", (("h", b"x"),), None),
                (1, T + 11, b"k", b"", (), None),
                (2, T + 12, b"", b"v", (), None),
                (3, T + 13, b"k", b"w", (("\u00e9", None), ("h", b"")), None),
                (4, T + 14, b"k", None, (), None),
            ]
        ],
    ),
    (
        "payments-\u20ac",
        2,
        [
            [
                (100, T + 20, b"p1", b"paid", (), T + 99),
                (2**32 + 105, T + 21, b"p2", None, (), None),
            ]
        ],
    ),
]
BASIC_MAX_BATCH_BYTES = 80

ZSTD: list[tuple[str, int, list[list[Row]]]] = [
    (
        "orders",
        0,
        [
            [
                (i, T + i, b"key-%d" % (i % 3), None if i == 4 else b"value " * 40, (), h)
                for i, h in zip(range(6), (None, None, None, None, T + DAY, None), strict=True)
            ]
        ],
    )
]

# name: (format version, record columns, inputs, write_file keyword arguments)
GOLDENS: dict[str, tuple[int, int, list[tuple[str, int, list[list[Row]]]], dict[str, Any]]] = {
    "v2": (2, 6, BASIC, {"compression": None, "max_batch_bytes": BASIC_MAX_BATCH_BYTES}),
    "v2-zstd": (2, 6, ZSTD, {"compression": "zstd", "min_compress_bytes": 0}),
    "v2-lz4-as-is": (2, 6, ZSTD, {"compression": "lz4", "min_compress_bytes": 0}),
    "v1": (1, 6, BASIC, {"compression": None, "max_batch_bytes": BASIC_MAX_BATCH_BYTES}),
    "v1-5col": (1, 5, BASIC, {"compression": None, "max_batch_bytes": BASIC_MAX_BATCH_BYTES}),
    "v1-5col-zstd": (1, 5, ZSTD, {"compression": "zstd", "min_compress_bytes": 0}),
}


def to_batch(schema: pa.Schema, rows: list[Row]) -> pa.RecordBatch:
    """A batch of the tree's record schema; a 5-column schema drops the horizons."""
    columns: dict[str, list[Any]] = {
        "offset": [r[0] for r in rows],
        "timestamp": [r[1] for r in rows],
        "key": [r[2] for r in rows],
        "value": [r[3] for r in rows],
        "headers": [[{"key": k, "value": v} for k, v in r[4]] for r in rows],
        "delete_horizon": [r[5] for r in rows],
    }
    arrays = [pa.array(columns[f.name], f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def main(names: list[str]) -> None:
    schema = records.RECORD_SCHEMA
    for name in names:
        version, columns, inputs, kwargs = GOLDENS[name]
        if (framing.FORMAT_VERSION, len(schema)) != (version, columns):
            sys.exit(
                f"{name} needs a writer of version {version} with {columns} columns; this "
                f"tree writes version {framing.FORMAT_VERSION} with {len(schema)}"
            )
        sink = io.BytesIO()
        sections = [
            (t, p, [to_batch(schema, rows) for rows in batches]) for t, p, batches in inputs
        ]
        writer.write_file(sink, sections, object_name=name, **kwargs)
        path = Path(__file__).with_name(f"{name}.kcf")
        path.write_bytes(sink.getvalue())
        print(f"{path}: {len(sink.getvalue())} bytes, written by {writer.__file__}")


if __name__ == "__main__":
    main(sys.argv[1:])
