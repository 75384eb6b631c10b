"""compactor ingest FILE|-"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from compactor.cli.codec_options import add_codec_option
from compactor.cli.context import Context, UsageError, positive_int
from compactor.cli.progress import Progress
from compactor.ingest.agent import DEFAULT_MAX_FILE_BYTES, L0Ingest, UnknownPartition
from compactor.ingest.jsonl import InputError, parse_line
from compactor.planner.codecs import DEFAULT_CODECS


@contextmanager
def _open_input(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    with f:
        yield f


def run(ctx: Context, args: argparse.Namespace) -> int:
    name = "stdin" if args.file == "-" else args.file
    ingest = L0Ingest(
        ctx.store,
        ctx.catalog,
        now_ms=ctx.now_ms,
        max_file_bytes=args.max_file_bytes,
        max_file_records=args.max_file_records,
        compression=args.compression,
    )
    progress = Progress()
    try:
        with _open_input(args.file) as source:
            for line_no, line in enumerate(source, start=1):
                if not line.strip():
                    continue
                try:
                    ingest.add(parse_line(line))
                except (InputError, UnknownPartition) as exc:
                    raise UsageError(
                        f"{name} line {line_no}: {exc}; nothing was ingested"
                    ) from None
                if line_no % 10_000 == 0:
                    progress.update(f"read {ingest.records:,} records, {len(ingest.files)} files")
        progress.update(f"committing {ingest.records:,} records", force=True)
        result = ingest.commit()
    except BaseException:
        ingest.abandon()
        raise
    finally:
        progress.done()
    print(
        json.dumps(
            {
                "records": result.records,
                "files": [f.key for f in result.files],
                "catalog_version": result.snapshot.version,
                "rebases": result.rebases,
            }
        )
    )
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("ingest", help="write JSON Lines records into L0 files", parents=[common])
    p.add_argument("file", help="a JSON Lines file, or - for stdin")
    p.add_argument(
        "--max-file-bytes",
        type=positive_int,
        default=DEFAULT_MAX_FILE_BYTES,
        help=f"cut an L0 file once its records reach this many bytes (default "
        f"{DEFAULT_MAX_FILE_BYTES:,})",
    )
    p.add_argument(
        "--max-file-records",
        type=positive_int,
        default=None,
        help="also cut an L0 file at this many records (default: no limit)",
    )
    add_codec_option(
        p, "--compression", DEFAULT_CODECS.for_level(0), "its L0 files, below the top level"
    )
    p.set_defaults(run=run)
