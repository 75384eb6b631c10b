"""The workload shapes that decide this product's speed, in one run, with their baselines.

    .venv/bin/python -m bench.shapes
    .venv/bin/python -m bench.shapes --only ingest-10kp --scale 0.1     # a quick look

Runs ``bench.run`` (DuckDB's ``QUALIFY row_number()`` dedup at 2 threads, ``compactor
compact --full``, and the copy floor: reader plus writer, no deduplication) on each shape
below, one after the other, and writes one Markdown table, stamped with the commit it
measured and the machine (its CPUs, memory and the key kernel's SHA-512/256 pass: tables
of different machines do not compare), to stdout and to
``bench/out/shapes-<commit>-<time>.md`` (the JSON of every run sits next to it). The
README's table is this output.

On a shared machine one run of a contender can be 20-40% off the next. ``--repeat N``
runs each shape's three contenders N times, one after the other in turn (so a slow spell
falls on all of them), and each time cell is then the median of the N runs with their
range; the ratio is of the medians, the peak RSS the largest seen. The CPU cells are the
median CPU time (user + system) of each contender's process and its children: a
compactor's phase-1 helper, DuckDB's two threads.

The shapes:

- ``ingest-64p``: 4 M records of 100-byte values over 64 partitions in level-0 files of
  8 MiB, the files ``compactor ingest`` cuts (``--max-file-bytes`` default): every file
  holds every partition, about 850 records per section.
- ``bench-100p``: 4 M records over 100 partitions in 64 MiB level-1 files.
- ``bench-10kp``: 2 M records over 10,000 partitions in 64 MiB level-1 files, about 40
  records per section.
- ``ingest-10kp``: 1 M records over 10,000 partitions in 8 MiB level-0 files, about 5
  records per section: WarpStream's L0 shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactor.planner.codecs import CODECS, codec_named

from . import workload
from .run import add_output_codecs, output_codec_args

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    records: int
    partitions: int
    file_mb: int
    level: int
    what: str

    def workdir(self, scale: float, compression: str | None = None) -> Path:
        """Its workload's workdir, at ``scale``, its files in ``compression`` (a codec's name;
        None: their level's)."""
        suffix = "" if scale == 1.0 else f"-x{scale:g}"
        if compression is not None:
            suffix += workload.codec_suffix(codec_named(compression))
        return OUT / f"shape-{self.name}{suffix}"

    def argv(self, scale: float) -> list[str]:
        records = max(self.partitions, int(self.records * scale))
        return [
            "--records", str(records),
            "--value-bytes", "100",
            "--partitions", str(self.partitions),
            "--file-mb", str(self.file_mb),
            "--level", str(self.level),
        ]  # fmt: skip


SHAPES = (
    Shape("ingest-64p", 4_000_000, 64, 8, 0, "L0 files as `compactor ingest` cuts them"),
    Shape("bench-100p", 4_000_000, 100, 64, 1, "64 MiB L1 files"),
    Shape("bench-10kp", 2_000_000, 10_000, 64, 1, "64 MiB L1 files"),
    Shape("ingest-10kp", 1_000_000, 10_000, 8, 0, "L0 files as `compactor ingest` cuts them"),
)


def commit() -> str:
    """The commit measured, with ``+dirty`` if the work tree differs from it."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (rev or "unknown") + ("+dirty" if dirty else "")


def _row(shape: Shape, reports: list[dict[str, Any]]) -> str:
    """One shape's row, from one or more runs of ``bench.run`` on it (medians over runs)."""
    runs = [{r["name"]: r for r in report["results"]} for report in reports]
    w = reports[0]["workload"]
    records = w["params"]["records"]
    sections = w["files"] * shape.partitions
    per_section = records / max(1, sections)

    def seen(name: str) -> list[dict[str, Any]]:
        return [run[name] for run in runs if name in run]

    def median(name: str) -> float | None:
        ok = [r["seconds"] for r in seen(name) if r["ok"]]
        return statistics.median(ok) if ok and len(ok) == len(seen(name)) else None

    def cell(name: str) -> str:
        results, middle = seen(name), median(name)
        if middle is None:
            return "FAILED" if results else "n/a"
        times = [r["seconds"] for r in results]
        spread = f" ({min(times):.2f}-{max(times):.2f})" if len(times) > 1 else ""
        return f"{middle:.2f} s{spread}"

    def cpu(name: str) -> str:
        used = [r["cpu_s"] for r in seen(name) if r["ok"] and r.get("cpu_s") is not None]
        return f"{statistics.median(used):.2f}" if used else "n/a"

    comp_s, duck_s = median("compactor"), median("duckdb")
    ratio = f"{duck_s / comp_s:.2f}x" if comp_s and duck_s else "n/a"
    comps = seen("compactor")
    gets = "n/a"
    if comps:
        per_file = {
            i["gets"] for c in comps for j in c["detail"]["report"]["jobs"] for i in j["inputs"]
        }
        gets = ",".join(str(g) for g in sorted(per_file)) if per_file else "n/a"
    rss = f"{max(c['peak_rss_mib'] for c in comps):,.0f}" if comps else "n/a"
    rate = f"{records / comp_s:,.0f}" if comp_s else "n/a"
    return (
        f"| {shape.name} | {records:,} | {w['files']} | {per_section:,.0f} | "
        f"{cell('compactor')} | {rate} | {cell('duckdb')} | {ratio} | "
        f"{cpu('compactor')} / {cpu('duckdb')} | {cell('copy')} | {rss} | {gets} | "
        f"{_output_mb(comps, 'compactor')} / {_output_mb(seen('duckdb'), 'duckdb')} |"
    )


def _output_mb(results: list[dict[str, Any]], name: str) -> str:
    """The bytes a contender wrote, MB (its first run's: every run writes the same records
    with the same codec)."""
    ok = [r for r in results if r["ok"]]
    if not ok:
        return "n/a"
    detail = ok[0]["detail"]
    written = (
        sum(j["bytes_out"] for j in detail["report"]["jobs"])
        if name == "compactor"
        else detail["bytes_out"]
    )
    return f"{written / 1e6:,.0f}"


def described(machine: dict[str, Any] | None) -> str:
    """What a table was measured on, from ``bench.run``'s record of the machine: tables of
    different machines do not compare."""
    if not machine:
        return "on a machine bench.run did not describe"
    model = machine.get("cpu_model") or "an unnamed CPU"
    memory = machine.get("mem_total_mib")
    return (
        f"on {machine.get('cpus', '?')} CPUs of {model}"
        + (f", {memory / 1024:.0f} GiB" if memory else "")
        + f"; SHA-512/256 by the kernel's {machine.get('hash_impl', 'unrecorded')} pass"
    )


def interpreter() -> str:
    """The interpreter as the table's command names it: ``.venv/bin/python`` for the
    project's own (``make setup``), else its path (``bench.ab --against-python``'s other
    virtualenv, say)."""
    own = ROOT / ".venv" / "bin"
    return ".venv/bin/python" if Path(sys.executable).parent == own else sys.executable


def table(rows: list[str], stamp: str, argv: list[str], machine: dict[str, Any] | None) -> str:
    head = (
        "| shape | records | files | records/section | compactor | compactor rec/s | "
        "DuckDB | vs DuckDB | CPU s, compactor / DuckDB | copy floor | "
        "compactor peak RSS MiB | GETs per input | output MB, compactor / DuckDB |"
    )
    return "\n".join(
        [
            f"Commit {stamp}, `{interpreter()} -m bench.shapes {' '.join(argv)}`".rstrip()
            + f", {described(machine)}",
            "",
            head,
            "|" + "---|" * 13,
            *rows,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="python -m bench.shapes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--only", default=",".join(s.name for s in SHAPES), help="shapes to run")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every shape's records")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per contender")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each shape's contenders, in turn; the table gives medians and ranges",
    )
    ap.add_argument(
        "--compression",
        choices=list(CODECS),
        default=None,
        help="the workloads' codec (default: their level's, as `compactor ingest` writes them)",
    )
    add_output_codecs(ap)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {s.name for s in SHAPES})
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)}")
    stamp, started = commit(), time.strftime("%Y%m%d-%H%M%S")
    OUT.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    machine: dict[str, Any] | None = None
    for shape in (s for s in SHAPES if s.name in wanted):
        print(f"== {shape.name}: {shape.what}", flush=True)
        reports, failed = [], None
        for run in range(1, args.repeat + 1):
            results = OUT / f"shapes-{stamp}-{started}-{shape.name}-{run}.json"
            cmd = [sys.executable, "-m", "bench.run", *shape.argv(args.scale)]
            cmd += ["--only", "duckdb,compactor,copy", "--timeout", str(args.timeout)]
            cmd += ["--workdir", str(shape.workdir(args.scale, args.compression))]
            cmd += ["--compression", args.compression] if args.compression else []
            cmd += output_codec_args(args)
            cmd += ["--results-json", str(results)]
            if args.repeat > 1:
                print(f"-- run {run} of {args.repeat}", flush=True)
            done = subprocess.run(cmd, cwd=ROOT)
            ok = ok and done.returncode == 0
            if results.exists():
                reports.append(json.loads(results.read_text()))
                machine = machine or reports[-1].get("machine")
            else:
                failed = done.returncode
        if reports and failed is None:
            rows.append(_row(shape, reports))
        else:
            rows.append(f"| {shape.name} | bench.run exited {failed} |" + " |" * 10)
    text = table(rows, stamp, argv, machine)
    path = OUT / f"shapes-{stamp}-{started}.md"
    path.write_text(text + "\n")
    print()
    print(text)
    print(f"\nwrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
