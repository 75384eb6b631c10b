"""What a payload read through a map costs against a read into a buffer kept for reuse.

    .venv/bin/python -m bench.map_release [--size 348160] [--reads 2000]

A local file's long payloads are mapped one by one (``objectstore/_filemap.c``), their
CRC-32 the first touch of their pages, and unmapped when their last view goes. This
times, per payload of ``--size`` bytes from a 64 MiB file in the page cache: the map and
its CRC, the unmap, and instead a ``pread`` into one reused buffer and its CRC; each
alone, beside a busy thread of the same process (as the writer's encoding thread is
beside a job's thread: an unmap then interrupts the other core to drop its TLB entries)
and beside a busy process. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from isal import isal_zlib

from compactor.objectstore import _filemap

FILE_BYTES = 64 << 20


def mapped(fd: int, size: int, reads: int) -> tuple[float, float]:
    """µs per payload: (map and CRC, unmap)."""
    touch = release = 0.0
    for i in range(reads):
        at = (i * size) % (FILE_BYTES - size)
        a = time.perf_counter()
        view = memoryview(_filemap.map_range(fd, at, size))
        isal_zlib.crc32(view)
        b = time.perf_counter()
        view.release()
        del view
        release += time.perf_counter() - b
        touch += b - a
    return touch / reads * 1e6, release / reads * 1e6


def read_into(fd: int, size: int, reads: int) -> float:
    """µs per payload: pread into one reused buffer, and its CRC."""
    buf = bytearray(size)
    start = time.perf_counter()
    for i in range(reads):
        os.preadv(fd, [buf], (i * size) % (FILE_BYTES - size))
        isal_zlib.crc32(buf)
    return (time.perf_counter() - start) / reads * 1e6


@contextmanager
def busy_thread() -> Iterator[None]:
    data, stop = os.urandom(8 << 20), threading.Event()

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(data).digest()  # releases the GIL: the thread keeps a core

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.1)
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def busy_process() -> Iterator[None]:
    spin = "import hashlib, os\nd = os.urandom(8 << 20)\nwhile True: hashlib.sha256(d).digest()"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    time.sleep(0.3)
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=340 << 10, help="payload bytes")
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args(argv)
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
        f.write(os.urandom(FILE_BYTES))
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        try:
            read_into(fd, args.size, FILE_BYTES // args.size)  # every page in the cache
            beside: list[tuple[str, Callable[[], AbstractContextManager[None]]]] = [
                ("alone", nullcontext),
                ("a busy thread", busy_thread),
                ("a busy process", busy_process),
            ]
            print(f"{args.size:,}-byte payloads, {args.reads:,} of each, µs a payload")
            print("| beside | map + CRC | unmap | map in all | pread + CRC |")
            print("|---|---:|---:|---:|---:|")
            for name, context in beside:
                with context():
                    touch, release = mapped(fd, args.size, args.reads)
                    copy = read_into(fd, args.size, args.reads)
                print(
                    f"| {name} | {touch:.1f} | {release:.1f} | {touch + release:.1f} | {copy:.1f} |"
                )
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
