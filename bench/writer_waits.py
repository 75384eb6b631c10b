"""How long a job's thread waits for its writer's encoder, by what it waits at.

    .venv/bin/python -m bench.writer_waits --store bench/out/shape-bench-100p/store --repeat 3

Runs ``bench.profile_job --plain`` (warm jobs, phase 1 in its helper) with
``fileformat.writer._ready`` timed: the writer calls it where it waits for a batch or
block being encoded, with the bound it waits down to (0: every encode before it must be
done, as ``finish`` and a block after framed sections wait; ``ENCODE_AHEAD``: only past
that many in flight). Prints the wall time spent waiting, by bound, over all the jobs.
Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from compactor.fileformat import writer
from compactor.fileformat.ipc import Pending

from . import profile_job


def main(argv: list[str] | None = None) -> None:
    waits: defaultdict[int, list[float]] = defaultdict(lambda: [0.0, 0])
    ready = writer._ready

    def timed(payload: Pending, waiting: int, bound: int) -> bytes | None:
        start = time.perf_counter()
        try:
            return ready(payload, waiting, bound)
        finally:
            entry = waits[bound]
            entry[0] += time.perf_counter() - start
            entry[1] += 1

    writer._ready = timed
    try:
        profile_job.main(["--plain", *(sys.argv[1:] if argv is None else argv)])
    finally:
        writer._ready = ready
    for bound, (seconds, calls) in sorted(waits.items()):
        print(f"waits down to {bound} in flight: {seconds * 1e3:.0f} ms in {calls:,} calls")


if __name__ == "__main__":
    main()
