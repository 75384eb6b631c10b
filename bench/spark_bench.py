"""``compactor spark compact`` against Spark SQL's own dedup, side by side in one run.

    python -m bench.spark_bench --records 2000000 [--value-bytes 100] [--partitions 100]

On the workload of ``bench.run`` (generated or reused, the same store and Parquet copy):

- ``spark compact``: ``compactor spark compact --master local[2] --full`` on a hard-linked
  clone of the store: the driver plans the full compaction, one task runs it.
- ``spark SQL``: at ``local[2]``, read the Parquet copy, keep
  ``row_number() OVER (PARTITION BY topic, partition, key ORDER BY offset DESC) = 1``,
  write the survivors to Parquet (read, dedup, write: the same work).

Each runs in its own process tree (the driver, its JVM, the Python workers). Seconds are
wall time including the JVM's start; peak RSS is the largest sum of the tree's resident
memory, sampled every 50 ms (``ru_maxrss`` would count one process only). Both must keep
one record per (partition, key): ``bench.run``'s distinct key count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import workload
from bench.run import OUT, ROOT, last_json, warm

SAMPLE_S = 0.05


@dataclass
class Row:
    name: str
    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    records_in: int = 0
    records_out: int = 0
    note: str = ""
    ok: bool = True


def _tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, in KiB (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def measured(cmd: list[str], timeout_s: float) -> tuple[int, float, float, str, str]:
    """Runs ``cmd``; (exit status, wall seconds, peak tree RSS in MiB, stdout, stderr)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(proc.pid))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate(timeout=timeout_s)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    return proc.returncode, wall, peak / 1024, out, err


def run_spark_compact(w: workload.Workload, run_dir: Path, args: argparse.Namespace) -> Row:
    row = Row("compactor `spark compact`, local[2]")
    clone = run_dir / "spark-compact-store"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.copytree(w.store_dir, clone, copy_function=os.link)
    warm(sorted(p for p in (clone / "data").rglob("*.cf")))
    cmd = [str(Path(sys.executable).parent / "compactor"), "--store", str(clone)]
    cmd += ["--now-ms", str(w.params.compaction_now_ms), "spark", "compact"]
    cmd += ["--master", "local[2]", "--full", "--json"]
    cmd += ["--key-buffer-bytes", str(args.key_buffer_bytes)]
    code, row.seconds, row.peak_rss_mib, out, err = measured(cmd, args.timeout)
    if code != 0:
        row.ok, row.note = False, f"exit {code}: {err.strip().splitlines()[-1:]}"
        return row
    (job,) = last_json(out)["jobs"]
    row.records_in, row.records_out = job["records_in"], job["records_out"]
    gets = sorted({i["gets"] for i in job["inputs"]})
    row.note = f"GETs/file {gets}, job {job['duration_s']} s in its task"
    shutil.rmtree(clone, ignore_errors=True)
    return row


def run_spark_sql(w: workload.Workload, run_dir: Path, args: argparse.Namespace) -> Row:
    row = Row("Spark SQL `row_number()` dedup, local[2]")
    out_dir = run_dir / "spark-sql-out"
    shutil.rmtree(out_dir, ignore_errors=True)
    warm([w.parquet])
    cmd = [sys.executable, "-m", "bench.spark_bench", "sql", str(w.parquet), str(out_dir)]
    code, row.seconds, row.peak_rss_mib, out, err = measured(cmd, args.timeout)
    if code != 0:
        row.ok, row.note = False, f"exit {code}: {err.strip().splitlines()[-1:]}"
        return row
    d = last_json(out)
    row.records_in, row.records_out = d["records_in"], d["records_out"]
    row.note = f"query {d['work_s']:.1f} s after the session started, Parquet in and out"
    shutil.rmtree(out_dir, ignore_errors=True)
    return row


def spark_sql(parquet: str, out_dir: str) -> dict[str, Any]:
    """The Spark SQL contender itself (run in its own process)."""
    from compactor.spark.driver import spark_session

    spark = spark_session("local[2]")
    try:
        started = time.perf_counter()
        spark.read.parquet(parquet).createOrReplaceTempView("records")
        records_in = spark.sql("SELECT count(*) FROM records").first()[0]
        survivors = spark.sql(
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY topic, `partition`, key "
            "ORDER BY offset DESC) AS rn FROM records) WHERE rn = 1"
        ).drop("rn")
        survivors.write.mode("overwrite").parquet(out_dir)
        work_s = time.perf_counter() - started
        records_out = spark.read.parquet(out_dir).count()
    finally:
        spark.stop()
    return {"records_in": records_in, "records_out": records_out, "work_s": work_s}


def table(rows: list[Row]) -> str:
    base = next((r.seconds for r in rows if r.name.startswith("Spark SQL") and r.ok), None)
    lines = [
        "| contender | records/s | seconds | peak RSS MiB (process tree) | vs Spark SQL | note |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        rate = r.records_in / r.seconds if r.seconds and r.ok else 0
        ratio = f"{base / r.seconds:.2f}x" if base and r.ok else "-"
        lines.append(
            f"| {r.name} | {rate:,.0f} | {r.seconds:.1f} | {r.peak_rss_mib:,.0f} | {ratio} "
            f"| {r.note if r.ok else 'FAILED: ' + r.note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sql"]:
        print(json.dumps(spark_sql(argv[1], argv[2])))
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__)
    workload.add_arguments(ap)
    ap.add_argument("--key-buffer-bytes", type=int, default=128 << 20)
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args(argv)
    params = workload.params_from(args)
    workdir = OUT / f"work-{params.records}-{params.value_bytes}b-{params.partitions}p"
    w = workload.ensure(params, workdir)
    run_dir = workdir / f"spark-run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [run_spark_compact(w, run_dir, args), run_spark_sql(w, run_dir, args)]
    for r in rows:
        if r.ok and r.records_out != w.distinct_keys:
            r.ok = False
            r.note += f"; kept {r.records_out:,} records, expected {w.distinct_keys:,}"
    text = table(rows)
    print(
        f"{params.records:,} records, {params.value_bytes}-byte values, {params.partitions} "
        f"partitions, {w.files} files, {w.distinct_keys:,} distinct keys\n\n{text}"
    )
    (OUT / f"spark-{run_dir.name}.md").write_text(text + "\n")
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
