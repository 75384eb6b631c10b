"""compactor replay JOB.json | --from-queue URL [--max N] | --from-history COMMIT_ID
[--execute] [--verify] [--json]

Without ``--execute`` nothing changes, in the store or in the queue: each job document
is validated and previewed (``replay.preview``). ``--execute`` runs each job as a worker
does (``replay.execute``, ``replay.fromqueue``). ``--verify`` re-runs a committed
compaction into a scratch prefix and compares (``replay.verify``).

Exit status: 0 when every previewed job would run (or, from the history, ran), every
executed job committed or proved stale (a no-op), and a verify found no difference;
otherwise the status of what went wrong, with one line on stderr: 1 a verify found a
difference, 2 a document is not a job document, 4 a job would not run (stale or leased),
7 a job from the queue failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compactor.catalog import CatalogError
from compactor.catalog.numbers import shown
from compactor.cli.codec_options import add_codec_options, level_codecs
from compactor.cli.compact import job_summary, progress_line
from compactor.cli.context import Context, UsageError, positive_int
from compactor.cli.exit_codes import ExitCode
from compactor.cli.key_buffer import add_key_buffer_option
from compactor.cli.progress import Progress
from compactor.jobqueue.consumer import QueueWorker, WorkerSettings
from compactor.jobqueue.events import FORMATS, EventLog
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.jobqueue.sqs import JobQueue
from compactor.planner.job import Job, JobDocumentError
from compactor.replay import fromqueue
from compactor.replay.execute import DEFAULT_LEASE_MS, execute_job
from compactor.replay.preview import COMMITTED, READY, JobPreview, preview_job
from compactor.replay.verify import VerifyReport, recorded_job, verify_commit
from compactor.worker.compactor import DEFAULT_KEY_BUFFER_BYTES, Compactor
from compactor.worker.runner import StaleJob
from compactor.worker.stats import JobReport


def run(ctx: Context, args: argparse.Namespace) -> int:
    _check_args(args)
    if args.from_queue is not None:
        return _from_queue(ctx, args)
    if args.from_history is not None:
        job, _ = recorded_job(ctx.catalog, args.from_history)
        if args.verify:
            return _verify(ctx, args)
        committed_by: int | None = args.from_history
    else:
        job = _load(args.job)
        committed_by = None
    if args.execute:
        return _execute(ctx, args, job)
    preview = preview_job(ctx.catalog, job, ctx.catalog.clock(), committed_by=committed_by)
    _print_previews(ctx, args, [(preview, None)])
    if preview.status not in (READY, COMMITTED):
        raise CatalogError(f"job {job.id} would not run: {preview.status}: {preview.why}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    sources = [args.job is not None, args.from_queue is not None, args.from_history is not None]
    if sum(sources) != 1:
        raise UsageError("replay: give one of JOB.json, --from-queue URL, --from-history ID")
    if args.max is not None and args.from_queue is None:
        raise UsageError("replay: --max goes with --from-queue")
    if args.verify and (args.from_history is None or args.execute):
        raise UsageError("replay: --verify goes with --from-history, without --execute")


def _load(path: str) -> Job:
    name = "stdin" if path == "-" else path
    try:
        text = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror or e}") from None
    try:
        return Job.loads(text)
    except JobDocumentError as e:
        raise UsageError(f"{name}: {e}") from None


# --- one job -----------------------------------------------------------------------------


def _execute(ctx: Context, args: argparse.Namespace, job: Job) -> int:
    compactor = Compactor(
        ctx.store,
        key_buffer_bytes=args.key_buffer_bytes or DEFAULT_KEY_BUFFER_BYTES,
        codecs=level_codecs(args),
    )
    progress = Progress()
    try:
        report = execute_job(
            compactor,
            job,
            ctx.time_rules_now_ms(),
            lease_ms=args.lease_ms,
            on_progress=lambda p: progress.update(progress_line(p)),
        )
    except StaleJob as stale:
        _print_outcome(ctx, args, job, "stale", str(stale))
        return 0
    finally:
        progress.done()
    outcome = "committed" if report.committed else "stale"
    _print_outcome(ctx, args, job, outcome, report.note, report)
    return 0


def _print_outcome(
    ctx: Context,
    args: argparse.Namespace,
    job: Job,
    outcome: str,
    note: str,
    report: JobReport | None = None,
) -> None:
    if args.json:
        doc: dict[str, Any] = {"job": job.id, "outcome": outcome, "note": note}
        if report is not None:
            doc["report"] = report.to_json()
        print(json.dumps({"jobs": [doc], "requests": ctx.requests_sent()}))
    elif report is not None and report.committed:
        print(job_summary(report))
    else:
        print(f"stale: job {job.id} is a no-op: {note.removeprefix(f'job {job.id}: ')}")


def _verify(ctx: Context, args: argparse.Namespace) -> int:
    progress = Progress()
    try:
        report = verify_commit(
            ctx.catalog,
            args.from_history,
            key_buffer_bytes=args.key_buffer_bytes,
            on_progress=lambda p: progress.update(progress_line(p)),
        )
    finally:
        progress.done()
    if args.json:
        print(json.dumps({**report.to_json(), "requests": ctx.requests_sent()}))
    else:
        print(_verify_text(report))
    if report.ok:
        return 0
    more = len(report.differences) - 1
    also = f" (and {more} more difference{'s' * (more > 1)})" if more else ""
    print(
        f"compactor: replay --verify: commit {report.version}: {report.differences[0]}{also}",
        file=sys.stderr,
    )
    return int(ExitCode.VERIFY_FAILED)


def _verify_text(r: VerifyReport) -> str:
    verdict = "OK" if r.ok else f"FAILED ({len(r.differences)} differences)"
    lines = [
        f"{verdict}: commit {r.version} (job {r.job.id}, {r.job.rule}) re-run from its "
        f"{len(r.job.inputs)} inputs: {r.records:,} records; outputs compared: "
        + (", ".join(r.outputs) or "none (a drop job: its retention premise re-checked)")
    ]
    lines += [f"  difference: {d}" for d in r.differences]
    return "\n".join(lines)


# --- a queue -----------------------------------------------------------------------------


def _from_queue(ctx: Context, args: argparse.Namespace) -> int:
    catalog = ctx.catalog  # a store that is not there fails before a message is received
    queue = JobQueue(args.from_queue)
    try:
        if args.execute:
            return _drain(ctx, args, queue)
        messages = fromqueue.peek(queue, args.max)
    finally:
        queue.close()
    previews: list[tuple[JobPreview | str, str]] = []
    now = catalog.clock()
    for m in messages:
        try:
            previews.append((preview_job(catalog, Job.loads(m.body), now), m.message_id))
        except Exception as e:  # noqa: BLE001 (a worker would call it poison too)
            previews.append((f"poison: {type(e).__name__}: {e}", m.message_id))
    _print_previews(ctx, args, previews)
    return 0


def _drain(ctx: Context, args: argparse.Namespace, queue: JobQueue) -> int:
    timeout_s = queue.visibility_timeout_s()
    compactor = Compactor(
        ctx.store,
        key_buffer_bytes=args.key_buffer_bytes or DEFAULT_KEY_BUFFER_BYTES,
        codecs=level_codecs(args),
    )
    worker = QueueWorker(
        compactor,
        queue,
        WorkerSettings(visibility_timeout_s=timeout_s),
        metrics=WorkerMetrics(),
        log=EventLog(args.log_format, source="replay"),
        now_ms=ctx.time_rules_now_ms,
    )
    done = fromqueue.drain(worker, args.max)
    rows = [{"message_id": m.message_id, "outcome": outcome} for m, outcome in done]
    if args.json:
        print(json.dumps({"messages": rows, "requests": ctx.requests_sent()}))
    else:
        for row in rows:
            print(f"{row['message_id']}: {row['outcome']}")
        counts = {o: sum(r["outcome"] == o for r in rows) for o in sorted(worker.outcomes)}
        print(f"{len(rows)} messages: " + (", ".join(f"{n} {o}" for o, n in counts.items())))
    failed = sum(outcome in ("failed", "aborted") for _, outcome in done)
    if failed:
        print(
            f"compactor: replay: {failed} of {len(done)} jobs failed; their messages stay "
            "in the queue (the log above names each error)",
            file=sys.stderr,
        )
        return int(ExitCode.WORKER)
    return 0


# --- printing previews -------------------------------------------------------------------


def _print_previews(
    ctx: Context,
    args: argparse.Namespace,
    previews: Sequence[tuple[JobPreview | str, str | None]],
) -> None:
    if args.json:
        docs = []
        for p, message_id in previews:
            doc: dict[str, Any] = (
                {"status": "poison", "why": p} if isinstance(p, str) else p.to_json()
            )
            if message_id is not None:
                doc["message_id"] = message_id
            docs.append(doc)
        print(json.dumps({"jobs": docs, "requests": ctx.requests_sent()}))
        return
    if not previews:
        print("no messages")
    for p, message_id in previews:
        prefix = f"message {message_id}: " if message_id is not None else ""
        print(prefix + (p if isinstance(p, str) else _preview_text(p)))


def _preview_text(p: JobPreview) -> str:
    job = p.job
    status = p.status if not p.why else f"{p.status} ({p.why})"
    target = "dropped unread" if job.drop else f"L{job.output_level}"
    lines = [
        f"job {job.id}: {status}",
        f"  rule {job.rule}: {job.reason}" if job.reason else f"  rule {job.rule}",
        f"  {len(job.inputs)} inputs -> {target}; deduplicates: "
        f"{'yes' if job.deduplicate else 'no'}; expected GETs: {p.expected_gets}",
        f"  {'level':>5} {'bytes':>14} {'records':>12}  key",
    ]
    for i in p.inputs:
        level = "gone" if i.level is None else f"L{i.level}"
        records = "?" if i.records is None else f"{i.records:,}"
        lines.append(f"  {level:>5} {i.size:>14,} {records:>12}  {i.key}")
    partitions = sum(len(ps) for ps in p.topics.values())
    lines.append(f"  touches {len(p.topics)} topics, {partitions} partitions")
    lines += [f"    {t}: {_ranges(ps)}" for t, ps in p.topics.items()]
    return "\n".join(lines)


def _ranges(ps: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[str] = []
    start = prev = ps[0]
    for p in [*ps[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if p is not None:
            start = prev = p
    return ", ".join(out)


def _commit_id(text: str) -> int:
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"a commit id is a positive integer (compactor history shows them), got {shown(text)!r}"
        ) from None


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "replay",
        help="preview, run or verify job documents (a file, a queue, the history)",
        parents=[common],
    )
    p.add_argument("job", nargs="?", metavar="JOB.json", help="a job document, - for stdin")
    p.add_argument("--from-queue", metavar="URL", help="the job documents on this SQS queue")
    p.add_argument(
        "--max", type=positive_int, default=None, help="at most N messages from the queue"
    )
    p.add_argument(
        "--from-history",
        type=_commit_id,
        metavar="COMMIT_ID",
        help="the job document of this compaction commit (compactor history shows ids)",
    )
    p.add_argument("--execute", action="store_true", help="run the job(s) and commit")
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-run the commit's job into a scratch prefix and compare with its outputs",
    )
    p.add_argument("--json", action="store_true", help="previews and reports as JSON")
    add_key_buffer_option(
        p,
        default=None,
        help="the key buffer (default 128 MiB; --verify: the size the commit recorded)",
    )
    p.add_argument(
        "--lease-ms",
        type=positive_int,
        default=DEFAULT_LEASE_MS,
        help="--execute of a file or commit: the job lease's duration, renewed at a third",
    )
    add_codec_options(p)  # --execute; --verify writes in the codec the commit recorded
    p.add_argument("--log-format", choices=FORMATS, default="text", help="--from-queue --execute")
    p.set_defaults(run=run, existing_store=True)
