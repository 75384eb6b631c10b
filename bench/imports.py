"""The command line's imports, timed in alternation between checkouts.

    .venv/bin/python -m bench.imports /tmp/old .        # 30 runs of each, in turn

Each run is a fresh interpreter that imports what ``compactor compact`` imports before
its job: ``compactor.cli`` (the entry point's memory settings), then phase 1's helper's
modules and the command's. Each checkout is imported through ``PYTHONPATH``, its
bytecode compiled first (``bench.bytecode``), and the checkouts take turns, the first
one alternating. Prints each checkout's median and range. Not a test: the timings
depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from .ab import in_turn, run_in
from .bytecode import compile_checkout

TIMED = (
    "import time; t = time.perf_counter(); import compactor.cli; "
    "import compactor.worker.phase1_process, compactor.cli.main, compactor.cli.compact; "
    "print(time.perf_counter() - t)"
)


def time_once(checkout: Path) -> float:
    done = run_in(checkout, [sys.executable, "-c", TIMED])
    if done.returncode != 0:
        raise SystemExit(f"bench.imports: {checkout}: {done.stderr.strip()}")
    return float(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", type=Path, nargs="+")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    checkouts = [c.resolve() for c in args.checkouts]
    for checkout in checkouts:
        compile_checkout(checkout)
    times: dict[Path, list[float]] = {c: [] for c in checkouts}
    for checkout in in_turn(checkouts, args.runs):
        times[checkout].append(time_once(checkout))
    for checkout, values in times.items():
        ms = sorted(v * 1e3 for v in values)
        print(
            f"{checkout}: median {statistics.median(ms):.1f} ms "
            f"({ms[0]:.1f}-{ms[-1]:.1f}), {len(ms)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
