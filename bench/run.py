"""Runs every contender on the same records, each in its own process, and reports.

    .venv/bin/python -m bench.run --records 10000000 --value-bytes 100

Generates (or reuses, if the parameters match) the workload under ``--workdir``, then for
each contender: reads its input once so every contender starts from a warm page cache,
starts it as a child process through ``bench.measure``, which reaps it with
``os.wait4`` (so peak RSS and CPU time are that child's alone), checks its output
against the expected survivors, deletes the output. Prints a Markdown table and writes
the results as JSON to ``bench/out/``.

Seconds are the child's wall time from spawn to exit (interpreter start-up included, the
same for all); ``work_s`` in the JSON is the contender's own timing of the work. MB/s is
logical input (offset + timestamp + key + value bytes) per second; records/s counts input
records.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import workload
from bench.bytecode import compile_checkout
from bench.contenders import DUCKDB_CODECS, digest_cf, digest_parquet, raw_sha_c
from bench.kernel_table import kernel_rows
from bench.workload import Workload
from compactor.planner.codecs import CODECS

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
CONTENDERS = ("duckdb", "compactor", "twopass", "copy", "kernel")
DEDUP = ("compactor", "twopass", "duckdb")
DEFAULT_KEY_BUFFER_BYTES = 128 << 20


@dataclass
class Measured:
    """One child process: its wall time and what the kernel says it used."""

    returncode: int
    wall_s: float
    max_rss_kib: int
    user_s: float
    sys_s: float
    stdout: str
    stderr: str


def run_child(cmd: list[str], log_dir: Path, name: str, timeout_s: float | None) -> Measured:
    """Runs ``cmd`` from the project root under ``bench.measure`` (see there why), so peak
    RSS and CPU time are the child's own. Past ``timeout_s`` its process group is killed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"
    usage_path = log_dir / f"{name}.rusage.json"
    usage_path.unlink(missing_ok=True)
    launcher = [sys.executable, "-m", "bench.measure", str(usage_path)]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            launcher + cmd, cwd=ROOT, stdout=out, stderr=err, start_new_session=True
        )
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the contender it started
            proc.wait()
            err.write(f"\nkilled after the {timeout_s:.0f} s timeout\n".encode())
            returncode = -signal.SIGKILL
    stdout, stderr = out_path.read_text(), err_path.read_text()
    try:
        usage = json.loads(usage_path.read_text())
    except (OSError, ValueError):
        return Measured(returncode or 1, timeout_s or 0.0, 0, 0.0, 0.0, stdout, stderr)
    return Measured(
        returncode=int(usage["returncode"]),
        wall_s=float(usage["wall_s"]),
        max_rss_kib=int(usage["max_rss_kib"]),  # KiB on Linux
        user_s=float(usage["user_s"]),
        sys_s=float(usage["sys_s"]),
        stdout=stdout,
        stderr=stderr,
    )


def clone_store(store: Path, clone: Path) -> None:
    """A hard-linked copy of ``store`` at ``clone`` (objects are immutable and every store
    write makes a new inode, so ``store`` stays as it is), its files in the page cache."""
    shutil.copytree(store, clone, copy_function=os.link)
    warm(sorted((clone / "data").rglob("*.cf")))


def warm(paths: list[Path]) -> None:
    """Read files once so each contender starts with its input in the page cache."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


def last_json(text: str) -> dict[str, Any]:
    """The last JSON object a contender printed on a line of its own."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            parsed: dict[str, Any] = json.loads(line)
            return parsed
    raise ValueError("no JSON object in the output")


@dataclass
class Result:
    name: str
    records_in: int = 0
    records_out: int = 0
    logical_bytes_in: int = 0
    seconds: float = 0.0
    max_rss_kib: int = 0
    cpu_s: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    skipped: str = ""
    ok: bool = True

    @property
    def records_per_s(self) -> float:
        return self.records_in / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.logical_bytes_in / self.seconds / 1e6 if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "logical_bytes_in": self.logical_bytes_in,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records_per_s),
            "mb_per_s": round(self.mb_per_s, 1),
            "peak_rss_mib": round(self.max_rss_kib / 1024, 1),
            "cpu_s": round(self.cpu_s, 2),
            "ok": self.ok,
            "note": self.note,
            "skipped": self.skipped,
            "detail": self.detail,
        }


@dataclass
class Context:
    w: Workload
    args: argparse.Namespace
    run_dir: Path
    log_dir: Path
    digests: dict[str, dict[str, int]] = field(default_factory=dict)

    def python(self) -> str:
        return sys.executable


def _fill(r: Result, m: Measured) -> None:
    r.seconds = m.wall_s
    r.max_rss_kib = m.max_rss_kib
    r.cpu_s = m.user_s + m.sys_s
    if m.returncode != 0:
        r.ok = False
        r.note = f"exit {m.returncode}: " + (m.stderr.strip().splitlines() or [""])[-1][:300]


def _check(ctx: Context, r: Result, digest: dict[str, int], subset: bool) -> None:
    """Dedup contenders must keep exactly one record per (partition, key), the same ones."""
    r.detail["digest"] = digest
    if r.name not in DEDUP or subset:
        expected = r.records_in if r.name == "copy" else None
        if expected is not None and digest["records"] != expected:
            r.ok = False
            r.note += f" output has {digest['records']:,} records, expected {expected:,}"
        return
    if digest["records"] != ctx.w.distinct_keys:
        r.ok = False
        r.note += f" kept {digest['records']:,} records, expected {ctx.w.distinct_keys:,}"
    for other, d in ctx.digests.items():
        if d != digest:
            r.ok = False
            r.note += f" survivors differ from {other}'s"
    ctx.digests[r.name] = digest


def run_duckdb(ctx: Context) -> Result:
    r = Result("duckdb")
    out = ctx.run_dir / "duckdb-out.parquet"
    temp = ctx.run_dir / "duckdb-tmp"
    temp.mkdir(exist_ok=True)
    warm([ctx.w.parquet])
    cmd = duckdb_command(ctx.w.parquet, out, ctx.args.duckdb_threads, temp)
    if ctx.args.duckdb_compression is not None:
        cmd += ["--compression", ctx.args.duckdb_compression]
    m = run_child(cmd, ctx.log_dir, r.name, ctx.args.timeout)
    _fill(r, m)
    r.logical_bytes_in = ctx.w.logical_bytes
    if r.ok:
        d = last_json(m.stdout)
        r.detail = d
        r.records_in, r.records_out = d["records_in"], d["records_out"]
        codec = ctx.args.duckdb_compression or "snappy"
        r.note = f"threads={d['threads']}, Parquet in and out ({codec} out)"
        _check(ctx, r, digest_parquet(out), subset=False)
    out.unlink(missing_ok=True)
    shutil.rmtree(temp, ignore_errors=True)
    return r


def _kernel_missing() -> str | None:
    proc = subprocess.run(
        [sys.executable, "-c", "import compactor.worker.kernel"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def duckdb_command(parquet: Path, out: Path, threads: int, temp: Path) -> list[str]:
    """DuckDB's dedup of ``parquet`` into ``out`` on ``threads`` threads, spilling to
    ``temp`` (``bench.contenders duckdb``)."""
    cmd = [sys.executable, "-m", "bench.contenders", "duckdb", "--parquet", str(parquet)]
    return cmd + ["--out", str(out), "--threads", str(threads), "--temp", str(temp)]


def compact_full_command(store: Path, now_ms: int) -> list[str]:
    """``compactor compact --full --json`` of ``store`` at ``now_ms``: the compactor's
    contender, its options but these the CLI's defaults."""
    script = Path(sys.executable).parent / "compactor"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "compactor.cli.main"]
    return cmd + ["--store", str(store), "--now-ms", str(now_ms), "compact", "--full", "--json"]


def run_compactor(ctx: Context) -> Result:
    r = Result("compactor")
    missing = _kernel_missing()
    if missing is not None:
        r.skipped = f"compactor.worker.kernel does not import ({missing})"
        return r
    # compact --full replaces the live files: run it on a hard-linked clone of the store
    # (objects are immutable and every store write makes a new inode, so the original
    # workload is untouched).
    clone = ctx.run_dir / "compactor-store"
    shutil.rmtree(clone, ignore_errors=True)
    clone_store(ctx.w.store_dir, clone)
    now_ms = ctx.w.params.compaction_now_ms
    cmd = compact_full_command(clone, now_ms)
    cmd += ["--key-buffer-bytes", str(ctx.args.key_buffer_bytes)]
    if ctx.args.compression_top is not None:
        cmd += ["--compression-top", ctx.args.compression_top]
    m = run_child(cmd, ctx.log_dir, r.name, ctx.args.timeout)
    _fill(r, m)
    r.logical_bytes_in = ctx.w.logical_bytes
    if r.ok:
        d = last_json(m.stdout)
        jobs = d.get("jobs", [])
        r.detail = {"command": " ".join(cmd), "report": d}
        if len(jobs) != 1:
            r.ok = False
            r.note = f"expected one full job, got {len(jobs)}"
        else:
            job = jobs[0]
            # Phase 1's process (worker.phase1_process) is the worker's child: wait4's peak
            # is the larger of the two, not their sum. The sum of each one's own peak
            # (the job reports both) bounds what they held together.
            both = int(job.get("peak_rss_kib", 0)) + int(job.get("phase1_peak_rss_kib", 0))
            r.max_rss_kib = max(r.max_rss_kib, both)
            r.records_in, r.records_out = job["records_in"], job["records_out"]
            gets = sorted({i["gets"] for i in job.get("inputs", [])})
            r.note = (
                f"key buffer {ctx.args.key_buffer_bytes >> 20} MiB, windows {job.get('windows')}, "
                f"GETs/file {gets}, job {job.get('duration_s')} s"
            )
            digest = _new_total()
            for key in job["outputs"]:
                _merge(digest, digest_cf(clone / key))
            _check(ctx, r, digest, subset=False)
    shutil.rmtree(clone, ignore_errors=True)
    return r


def _new_total() -> dict[str, int]:
    return {"records": 0, "sum_offset": 0, "sum_offset_sq": 0, "sum_partition_x_offset": 0}


def _merge(total: dict[str, int], d: dict[str, int]) -> None:
    for k, v in d.items():
        total[k] += v


def _run_store_contender(ctx: Context, name: str, max_files: int | None) -> Result:
    r = Result(name)
    out = ctx.run_dir / f"{name}-out.cf"
    files = sorted(p for p in (ctx.w.store_dir / "data").rglob("*.cf"))
    warm(files)
    cmd = [ctx.python(), "-m", "bench.contenders", name, "--store", str(ctx.w.store_dir)]
    cmd += ["--out", str(out)]
    subset = max_files is not None and max_files < ctx.w.files
    if subset:
        cmd += ["--max-files", str(max_files)]
    if ctx.args.compression_top is not None:
        cmd += ["--compression", ctx.args.compression_top]
    m = run_child(cmd, ctx.log_dir, name, ctx.args.timeout)
    _fill(r, m)
    if r.ok:
        d = last_json(m.stdout)
        r.detail = d
        r.records_in, r.records_out = d["records_in"], d["records_out"]
        r.logical_bytes_in = d["logical_bytes_in"]
        if subset:
            r.note = f"subset: the first {d['files']} of {ctx.w.files} files"
        _check(ctx, r, digest_cf(out), subset=subset)
    out.unlink(missing_ok=True)
    return r


def run_twopass(ctx: Context) -> Result:
    r = _run_store_contender(ctx, "twopass", ctx.args.twopass_max_files)
    r.note = ("MD5 dict, pure Python; " + r.note).strip("; ")
    return r


def run_copy(ctx: Context) -> Result:
    r = _run_store_contender(ctx, "copy", None)
    r.note = ("no dedup: reader + writer floor; " + r.note).strip("; ")
    return r


def run_kernel(ctx: Context) -> Result:
    r = Result("kernel")
    keys = [] if ctx.args.kernel_keys is None else ["--keys", str(ctx.args.kernel_keys)]
    size = ["--key-buffer-bytes", str(ctx.args.key_buffer_bytes)]
    cmd = [ctx.python(), "-m", "bench.kernel_bench", "--json", *keys, *size]
    r.note = "bench/kernel_bench.py"
    m = run_child(cmd, ctx.log_dir, r.name, ctx.args.timeout)
    _fill(r, m)
    if r.ok:
        try:
            r.detail = json.loads(m.stdout)
        except ValueError:
            r.detail = {"output": m.stdout[-4000:]}
        if "skipped" in r.detail:
            r.skipped = str(r.detail["skipped"])
        if "rows" in r.detail:
            # One more reference: SHA-512/256 per key through OpenSSL's own API, one core.
            raw = raw_sha_c(int(r.detail.get("keys", 1_000_000)) // 10 or 1)
            r.detail["openssl_per_key"] = raw
    return r


RUNNERS: dict[str, Callable[[Context], Result]] = {
    "duckdb": run_duckdb,
    "compactor": run_compactor,
    "twopass": run_twopass,
    "copy": run_copy,
    "kernel": run_kernel,
}


def table(results: list[Result]) -> str:
    duck = next((r for r in results if r.name == "duckdb" and r.ok and not r.skipped), None)
    head = (
        "| contender | records in | records out | seconds | records/s | MB/s | "
        "peak RSS MiB | CPU s | vs DuckDB | notes |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in results:
        if r.name == "kernel":
            continue
        if r.skipped:
            lines.append(f"| {r.name} | | | | | | | | | skipped: {r.skipped} |")
            continue
        ratio = f"{r.records_per_s / duck.records_per_s:.2f}x" if duck else "n/a"
        note = r.note if r.ok else f"FAILED: {r.note}"
        lines.append(
            f"| {r.name} | {r.records_in:,} | {r.records_out:,} | {r.seconds:.2f} | "
            f"{r.records_per_s:,.0f} | {r.mb_per_s:,.1f} | {r.max_rss_kib / 1024:,.0f} | "
            f"{r.cpu_s:.1f} | {ratio} | {note} |"
        )
    kernel = next((r for r in results if r.name == "kernel"), None)
    if kernel is not None:
        lines += ["", kernel_table(kernel)]
    return "\n".join(lines)


def kernel_table(r: Result) -> str:
    d = r.detail
    if not r.ok:
        return f"kernel: FAILED: {r.note}"
    if "rows" not in d:
        return "kernel (" + r.note + "):\n\n```\n" + json.dumps(d, indent=2) + "\n```"
    return external_kernel_table(d)


def external_kernel_table(d: dict[str, Any]) -> str:
    """The table of bench/kernel_bench.py's JSON, plus the per-key OpenSSL reference."""
    lines = [
        f"Kernel (bench/kernel_bench.py): {d['keys']:,} UUID keys (36 B), KeyBuffer "
        f"{d['capacity_bytes'] >> 20} MiB ({d['windows']} windows), batches of "
        f"{d['batch']:,}, default hash: {d['hash_impl']}",
        "",
        *kernel_rows(d["rows"]),
    ]
    raw = d.get("openssl_per_key", {})
    if "lowlevel_ns_per_key" in raw:
        for label, field in (("low-level", "lowlevel_ns_per_key"), ("EVP", "evp_ns_per_key")):
            ns = float(raw[field])
            lines.append(
                f"| SHA-512/256 per key, OpenSSL {label} call (bench/raw_sha512_256.c, "
                f"{raw['keys']:,} keys) | 1 | {ns:.0f} | {1e3 / ns:.2f} M | |"
            )
    elif "error" in raw:
        lines.append(f"\n(no per-key OpenSSL reference: {raw['error']})")
    return "\n".join(lines)


def _hash_impl() -> str:
    """The key kernel's SHA-512/256 on this machine (avx512, avx2, openssl, portable): the
    step whose cost differs most between machines."""
    try:
        from compactor.worker.kernel import HASH_IMPL
    except ImportError as e:
        return f"unavailable ({e})"
    return HASH_IMPL


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import duckdb
    import pyarrow

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "hash_impl": _hash_impl(),
        "loadavg_before": os.getloadavg(),
        "mem_total_mib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20,
        "python": platform.python_version(),
        "pyarrow": pyarrow.__version__,
        "duckdb": duckdb.__version__,
    }


def add_output_codecs(ap: argparse.ArgumentParser) -> None:
    """The outputs' codecs: ``--compression-top`` and ``--duckdb-compression`` (both
    default to their writer's own; ``output_codec_args`` passes them on)."""
    ap.add_argument(
        "--compression-top",
        choices=list(CODECS),
        default=None,
        help="the codec of the compactor's output and the copy floor's (default zstd, the "
        "top level's: `compact --compression-top`)",
    )
    ap.add_argument(
        "--duckdb-compression",
        choices=DUCKDB_CODECS,
        default=None,
        help="the codec of DuckDB's Parquet output (default DuckDB's, snappy)",
    )


def output_codec_args(args: argparse.Namespace) -> list[str]:
    """``add_output_codecs``'s options as given, for another ``bench.run``."""
    given = (("--compression-top", args.compression_top),
             ("--duckdb-compression", args.duckdb_compression))  # fmt: skip
    return [part for flag, codec in given if codec for part in (flag, codec)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    workload.add_arguments(ap)
    ap.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the workload and outputs go (default bench/out/work-<params>)",
    )
    ap.add_argument(
        "--only",
        default=",".join(CONTENDERS),
        help=f"comma-separated subset of {','.join(CONTENDERS)}",
    )
    ap.add_argument("--regenerate", action="store_true", help="regenerate even if cached")
    ap.add_argument("--key-buffer-bytes", type=int, default=DEFAULT_KEY_BUFFER_BYTES)
    ap.add_argument("--duckdb-threads", type=int, default=2)
    add_output_codecs(ap)
    ap.add_argument(
        "--twopass-max-files",
        type=int,
        default=None,
        help="run the pure-Python two-pass on the first N files only",
    )
    ap.add_argument("--kernel-keys", type=int, default=None, help="keys for the kernel benchmark")
    ap.add_argument(
        "--timeout", type=float, default=3600, help="seconds before a contender is killed"
    )
    ap.add_argument(
        "--delete-data", action="store_true", help="delete the generated workload when done"
    )
    ap.add_argument(
        "--results-json", type=Path, default=None, help="also write the results JSON here"
    )
    args = ap.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in CONTENDERS]
    if unknown:
        ap.error(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    params = workload.params_from(args)
    codec = workload.codec_suffix(params.compression)
    workdir = args.workdir or OUT / (
        f"work-{params.records}-{params.value_bytes}b-{params.partitions}p{codec}"
    )
    print(f"workload in {workdir}", flush=True)
    w = workload.ensure(params, workdir, regenerate=args.regenerate)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = workdir / f"run-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(w, args, run_dir, run_dir / "logs")
    info = machine()
    print(
        f"workload: {params.records:,} records, {params.value_bytes}-byte values, "
        f"{params.partitions} partitions, {w.files} files, {w.logical_bytes / 1e6:,.0f} MB "
        f"logical, {w.store_bytes / 1e6:,.0f} MB in the store, "
        f"{w.parquet_bytes / 1e6:,.0f} MB of Parquet, {w.distinct_keys:,} distinct keys",
        flush=True,
    )
    compile_checkout(ROOT)
    results: list[Result] = []
    for name in [n for n in CONTENDERS if n in only]:
        print(f"running {name} ...", end=" ", flush=True)
        load_before = os.getloadavg()[0]
        r = RUNNERS[name](ctx)
        r.detail["loadavg_1min_before_after"] = [load_before, os.getloadavg()[0]]
        results.append(r)
        print("skipped" if r.skipped and name != "kernel" else f"{r.seconds:.1f} s", flush=True)
    text = table(results)
    print()
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join([Path(sys.executable).name, "-m", "bench.run", *sys.argv[1:]]),
        "started": stamp,
        "machine": info,
        "workload": w.to_json(),
        "results": [r.to_json() for r in results],
        "table": text,
    }
    name = f"results-{params.records}-{params.value_bytes}b-{params.partitions}p-{stamp}.json"
    (OUT / name).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {OUT / name}")
    if args.results_json is not None:
        shutil.copyfile(OUT / name, args.results_json)
    if all(r.ok for r in results):
        shutil.rmtree(run_dir, ignore_errors=True)  # logs are only kept to debug a failure
    else:
        print(f"logs kept in {run_dir / 'logs'}")
    if args.delete_data:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
