"""What a pointer's reading costs, nothing decoded: every live file of a store walked by
``StreamReader`` as a job's pointer opens it, its frames read and checksummed.

    .venv/bin/python -m bench.stream_read --store bench/out/shape-ingest-64p/store

Two ways in turn, ``--repeat`` times, on this thread, CPU time:

- **size known** (what a job does: the catalog gives each input's size): a long frame
  payload that starts in the reader's read-ahead is one bytes object the stream reads
  straight into (``_sections.joined_read``);
- **size unknown**: the same reader joins the read-ahead's part and the rest of such a
  payload (``head + read(...)``), one more copy of each; how every payload was read
  before ``joined_read``.

Each stream's buffer is a job's (``worker.pointer.stream_buffer_size``). Not a test: the
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from compactor.catalog import LiveFile
from compactor.fileformat import StreamReader
from compactor.objectstore import LocalStore
from compactor.worker.pointer import stream_buffer_size

from .contenders import live_files


def walk(store: LocalStore, files: list[LiveFile], size_known: bool) -> tuple[float, int]:
    """CPU seconds to walk every section of ``files``, and the sections walked."""
    buffer_size = stream_buffer_size(len(files))
    sections = 0
    start = time.process_time()
    for f in files:
        with store.open_stream(f.key, buffer_size=buffer_size) as stream:
            size = f.size if size_known else None
            reader = StreamReader(stream, object_name=f.key, size=size, keep_footer=False)
            for _ in reader.sections():
                sections += 1
    return time.process_time() - start, sections


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.stream_read",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--store", type=Path, required=True, help="a bench.workload store")
    ap.add_argument("--repeat", type=int, default=7, help="runs of each way, in turn")
    args = ap.parse_args(argv)
    store = LocalStore(args.store)
    files = live_files(store, None)
    mb = sum(f.size for f in files) / 1e6
    times: dict[bool, list[float]] = {True: [], False: []}
    counts = set()
    for i in range(args.repeat):
        for size_known in (True, False) if i % 2 == 0 else (False, True):
            cpu, sections = walk(store, files, size_known)
            times[size_known].append(cpu)
            counts.add(sections)
    if len(counts) != 1:
        raise SystemExit(f"the two ways walked different section counts: {sorted(counts)}")
    print(f"{len(files)} files, {mb:,.1f} MB, {counts.pop():,} sections, {args.repeat} runs each")
    print("| way | median CPU s | range |")
    print("|---|---:|---:|")
    for size_known, label in ((True, "size known (in place)"), (False, "size unknown (joined)")):
        t = times[size_known]
        print(f"| {label} | {statistics.median(t):.3f} | {min(t):.3f}-{max(t):.3f} |")


if __name__ == "__main__":
    main()
