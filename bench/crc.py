"""What the frame CRC costs: zlib's CRC-32 against ISA-L's, on a store's own frames.

    .venv/bin/python -m bench.crc --store bench/out/shape-ingest-64p/store

Walks every frame of the store's live files (section headers, batches, trailers, blocks,
footers), checks that both functions give each frame's stored CRC, then times each over
all the frames, best of three, on this thread. A job computes this CRC over every byte
it reads, once per pointer, and over every byte it writes (``fileformat.framing``). Not a
test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from isal import isal_zlib

from compactor.fileformat.framing import (
    BLOCK_END_MAGIC,
    FILE_HEADER,
    FILE_TAIL,
    FRAME_HEADER,
    SECTION_END,
    SECTION_END_MAGIC,
)
from compactor.objectstore import LocalStore

from .contenders import live_files

Crc = Callable[[bytes, int], int]


def frames(data: bytes) -> list[tuple[bytes, int]]:
    """Each frame of a file as (tag + length + payload, stored CRC)."""
    out = []
    pos, end = FILE_HEADER.size, len(data) - FILE_TAIL.size
    while pos < end:
        if data[pos + 4 : pos + 8] in (SECTION_END_MAGIC, BLOCK_END_MAGIC):
            pos += SECTION_END.size
            continue
        tag, length, crc = FRAME_HEADER.unpack_from(data, pos)
        start = pos + FRAME_HEADER.size
        out.append((tag + length.to_bytes(4, "little") + data[start : start + length], crc))
        pos = start + length
    return out


def _best(crc: Crc, payloads: list[bytes]) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        for p in payloads:
            crc(p, 0)
        best = min(best, time.process_time() - t)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.crc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--store", type=Path, required=True, help="a bench.workload store")
    args = ap.parse_args(argv)
    store = LocalStore(args.store)
    checked: list[tuple[bytes, int]] = []
    for live in live_files(store, None):
        with store.open_stream(live.key) as stream:
            checked += frames(stream.read(live.size))
    functions: dict[str, Crc] = {"zlib.crc32": zlib.crc32, "isal_zlib.crc32": isal_zlib.crc32}
    for name, crc in functions.items():
        wrong = sum(crc(p, 0) != stored for p, stored in checked)
        if wrong:
            raise SystemExit(f"{name} differs from the stored CRC on {wrong} frames")
    payloads = [p for p, _ in checked]
    mb = sum(map(len, payloads)) / 1e6
    print(f"{len(payloads):,} frames, {mb:,.1f} MB, every stored CRC matched by both")
    print("| CRC | CPU s | MB/s |")
    print("|---|---:|---:|")
    for name, crc in functions.items():
        cpu = _best(crc, payloads)
        print(f"| {name} | {cpu:.3f} | {mb / cpu:,.0f} |")


if __name__ == "__main__":
    main()
