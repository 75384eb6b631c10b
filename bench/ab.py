"""Before and after, alternating: ``compact --full`` of this checkout and of another one on
the same workload, in turn.

    .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-10kp --against /tmp/old
    .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-64p --against /tmp/old --once
    .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-64p --against /tmp/old \
        --against-workdir bench/out/v5-shape-ingest-64p
    .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-10kp --against . \
        --against-python /tmp/debian-venv/bin/python
    .venv/bin/python -m bench.ab --workdir bench/out/shape-bench-100p --against . \
        --against-args='--compression-top lz4'
    .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-64p --against . \
        --against-env COMPACTOR_COMPILED_PATH=0

This machine's speed drifts by 20-40% within the hour, so two ``bench.shapes`` tables run
a quarter of an hour apart do not compare. This runs the two checkouts' ``python -m
compactor compact --full`` (the entry point users run, ``cli.launch``) one after the
other, each first in every other pair, ``--pairs`` times, each on a fresh hard-linked
clone of the workload's store with its files in the page cache, and prints every wall
and CPU time and the medians. The other checkout is imported through ``PYTHONPATH`` (its
``compactor`` package, and its compiled key buffer: copy ``worker/kernel/_keybuffer*.so``
into it, or build it there). ``--against-workdir`` gives the other checkout a workload
of its own: the same records as its writer wrote them (a change of what the writer
writes is measured with each checkout reading its own files). ``--against-args`` gives the
other side more ``compact`` options, and ``--against-env`` more environment (with
``--against .``, two settings of one checkout).
Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from .bytecode import compile_checkout
from .run import clone_store
from .workload import MANIFEST, Params

ROOT = Path(__file__).resolve().parent.parent
_T = TypeVar("_T")
PUT_OFF_MS = 10 * 365 * 86_400_000
"""``--once``: full.compaction.interval.ms, ten years, so that the daily compaction,
due at once on a fresh workload, leaves the level rules to plan."""


@dataclass(frozen=True, slots=True)
class Timed:
    wall_s: float
    cpu_s: float
    """CPU seconds of the compactor process (``bench.run`` measures peak RSS)."""
    output: dict[str, Any]
    """What ``compact --json`` printed."""


def compact_clone(
    checkout: Path,
    store: Path,
    now_ms: int,
    args: list[str],
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> Timed:
    """One ``compact <args> --json`` of ``checkout`` run by ``python`` (with ``env`` added
    to the environment) on a fresh hard-linked clone of ``store``, timed."""
    with tempfile.TemporaryDirectory(prefix="bench-ab-", dir=store.parent) as tmp:
        clone = Path(tmp) / "store"
        clone_store(store, clone)
        cmd = [python, "-m", "compactor", "--store", str(clone)]
        cmd += ["--now-ms", str(now_ms), "compact", *args, "--json"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = run_in(checkout, cmd, env)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{checkout}: compact {' '.join(args)} exited {done.returncode}: "
                             f"{done.stderr.strip().splitlines()[-1:]}")  # fmt: skip
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return Timed(wall, cpu, json.loads(done.stdout))


def alternate(
    runs: dict[str, tuple[Path, Path, list[str]]],
    now_ms: int,
    pairs: int,
    pythons: dict[str, str] | None = None,
    envs: dict[str, dict[str, str]] | None = None,
) -> dict[str, list[Timed]]:
    """``compact <args>`` of each of ``runs`` (a checkout, a store, the arguments) in turn,
    ``pairs`` times, each on a fresh clone, the order reversed every other pair (the run
    that comes first in a pair was measured up to 15% slower, whichever it was); prints
    every run, then each one's medians. ``pythons``: the interpreter of a run, where it is
    not this one; ``envs``: a run's added environment."""
    width = max(len(name) for name in runs)
    for checkout, _, _ in runs.values():
        compile_checkout(checkout)
    seen: dict[str, list[Timed]] = {name: [] for name in runs}
    for pair in range(1, pairs + 1):
        order = list(runs.items())
        for name, (checkout, store, args) in order if pair % 2 else reversed(order):
            python = (pythons or {}).get(name, sys.executable)
            t = compact_clone(checkout, store, now_ms, args, python, (envs or {}).get(name))
            seen[name].append(t)
            jobs = t.output["jobs"]
            out_mb = sum(int(j["bytes_out"]) for j in jobs) / 1e6
            print(
                f"pair {pair} {name:{width}}: {t.wall_s:6.2f} s wall {t.cpu_s:6.2f} s CPU; "
                f"{len(jobs)} job(s), {sum(len(j['inputs']) for j in jobs)} inputs, "
                f"{out_mb:,.0f} MB out, jobs {sum(float(j['duration_s']) for j in jobs):.2f} s",
                flush=True,
            )
    for name, timed in seen.items():
        walls = ", ".join(f"{t.wall_s:.2f}" for t in timed)
        print(
            f"{name:{width}}: median {statistics.median(t.wall_s for t in timed):.2f} s wall "
            f"({walls}), {statistics.median(t.cpu_s for t in timed):.2f} s CPU"
        )
    if len(seen) == 2:
        print(pair_count(*seen.items()))
    return seen


def pair_count(first: tuple[str, list[Timed]], second: tuple[str, list[Timed]]) -> str:
    """How often the first run beat the second within a pair, in wall and in CPU time (to
    the hundredth of a second printed): the count that a median alone hides on a machine
    whose speed drifts."""

    def tally(of: Callable[[Timed], float]) -> str:
        diffs = [
            round(of(a), 2) - round(of(b), 2) for a, b in zip(first[1], second[1], strict=True)
        ]
        faster = sum(d < 0 for d in diffs)
        ties = sum(d == 0 for d in diffs)
        return f"faster in {faster} of {len(diffs)}" + (f" ({ties} tied)" if ties else "")

    return (
        f"{first[0]} against {second[0]}, pair by pair: wall {tally(lambda t: t.wall_s)}, "
        f"CPU {tally(lambda t: t.cpu_s)}"
    )


def in_turn(items: Sequence[_T], runs: int) -> Iterator[_T]:
    """``items`` ``runs`` times over, in turn, the order reversed every other time, so that
    neither goes first in every round of a drifting machine."""
    for i in range(runs):
        yield from items if i % 2 == 0 else items[::-1]


def run_in(
    checkout: Path, cmd: list[str], more_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``cmd`` run with ``checkout``'s compactor: on its PYTHONPATH, and from it (``python
    -m`` puts the working directory ahead of PYTHONPATH); ``more_env`` added."""
    env = dict(os.environ, **(more_env or {}), PYTHONPATH=str(checkout))
    return subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True)


def _imported(checkout: Path, python: str = sys.executable) -> str:
    """Where a run of ``python`` in ``checkout`` imports the compactor from (it must be the
    checkout)."""
    code = "import compactor.worker.runner as r; print(r.__file__)"
    done = run_in(checkout, [python, "-c", code])
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise SystemExit(f"{python} cannot import the compactor of {checkout}: {last[0]}")
    where = done.stdout.strip()
    if not where.startswith(str(checkout)):
        raise SystemExit(f"{checkout}: its runs would import the compactor from {where!r}")
    return where


def _params(workdir: Path) -> Params:
    return Params(**json.loads((workdir / MANIFEST).read_text())["params"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--workdir", type=Path, required=True, help="a bench.workload workdir")
    ap.add_argument("--against", type=Path, required=True, help="the other checkout's root")
    ap.add_argument(
        "--against-python",
        help="the other side's interpreter, if not this one: a virtualenv's python with the "
        "pinned dependencies (requirements.lock); the checkout's compactor, compiled modules "
        "included, is imported as for this side. With --against . it compares interpreters",
    )
    ap.add_argument("--pairs", type=int, default=4, help="runs of each, alternating")
    ap.add_argument(
        "--once",
        action="store_true",
        help="the first job the rules plan (compact --once, the daily compaction put off: "
        "L0 -> L1 of the first 32 L0 files), not compact --full",
    )
    ap.add_argument(
        "--against-workdir",
        type=Path,
        help="the other checkout's workload, if not --workdir: the same records as another "
        "checkout's bench.workload wrote them (its workload version may differ, nothing else)",
    )
    ap.add_argument(
        "--against-args",
        default="",
        help="more `compact` options for the other side, as one string: with --against . "
        "it compares options (--against-args='--compression-top lz4')",
    )
    ap.add_argument(
        "--against-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the other side's runs (repeatable): with "
        "--against . it compares settings (--against-env COMPACTOR_COMPILED_PATH=0)",
    )
    args = ap.parse_args(argv)
    if bad := [e for e in args.against_env if "=" not in e]:
        ap.error(f"--against-env takes NAME=VALUE, not {bad[0]!r}")
    params = _params(args.workdir)
    other_workdir = args.against_workdir or args.workdir
    if replace(_params(other_workdir), version=params.version) != params:
        raise SystemExit(f"{other_workdir}: another workload than {args.workdir}'s")
    now_ms = params.compaction_now_ms
    sides = {"this": ROOT, "other": args.against.resolve()}
    workdirs = {"this": args.workdir, "other": other_workdir}
    pythons = {"this": sys.executable, "other": args.against_python or sys.executable}
    for name, checkout in sides.items():
        python = pythons[name]
        print(
            f"{name}: {checkout} ({_imported(checkout, python)}), {python} "
            f"({_version(python)}), workload {workdirs[name]}"
        )
    job = (
        ["--once", "--set", f"full.compaction.interval.ms={PUT_OFF_MS}"]
        if args.once
        else ["--full"]
    )
    more = {"this": [], "other": shlex.split(args.against_args)}
    runs = {
        name: (checkout, (workdirs[name] / "store").resolve(), job + more[name])
        for name, checkout in sides.items()
    }
    other_env = dict(e.split("=", 1) for e in args.against_env)
    if other_env:
        print(f"other: with {' '.join(args.against_env)}")
    alternate(runs, now_ms, args.pairs, pythons, {"other": other_env})


def _version(python: str) -> str:
    """The interpreter's version, executable and whether it runs from a shared
    ``libpython`` (a ``--enable-shared`` build) or has it linked in (Debian's build)."""
    code = (
        "import os, sys; maps = open('/proc/self/maps').read(); "
        "print(sys.version.split()[0], os.path.realpath(sys.executable), "
        "'libpython shared' if 'libpython' in maps else 'libpython linked in')"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()


if __name__ == "__main__":
    main()
