"""What a job pays for its inputs' section tables, step by step: each shared block's
table parsed, checked and read as a job's pointers read it, then freed.

    .venv/bin/python -m bench.table_parse --store bench/out/shape-ingest-10kp/store

Reads every level's files of ``--store`` (a local store, not changed) once, keeps each
shared block's table payload, then, ``--repeat`` times, under the collector's settings of
a job (``worker.collector.rare_collections``), times each step over all tables
(``process_time``):

- ``parse``: ``block.parse_section_table``, what every pointer does with a block's table;
- ``bitmaps``: ``SectionTable.check_bitmaps``, phase 1's pointer's check of them;
- ``footer entries``: ``_sections.footer_entries``, phase 1's pointer's footer check;
- ``merge columns``: ``worker.merge._Table``, the columns a pointer's merge reads;
- ``free``: dropping all of it.

Prints each step's best time of the runs and its cost per entry. It imports the
``compactor`` package it finds, so the same command measures another checkout with
``PYTHONPATH=<its root>`` (copy this file into its ``bench/``). Not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compactor.fileformat import _sections
from compactor.fileformat.block import parse_section_table
from compactor.fileformat.reader import SharedRun, StreamReader
from compactor.worker.collector import rare_collections
from compactor.worker.merge import _Table

STEPS = ("parse", "bitmaps", "footer entries", "merge columns", "free")


def table_payloads(store: Path) -> list[tuple[bytes, int, str]]:
    """Every shared block's table payload in the store's data files, with where it
    starts and the file's name."""
    tables = []
    for path in sorted((store / "data").rglob("*.cf")):
        with path.open("rb") as f:
            reader = StreamReader(f, object_name=path.name, keep_footer=False)
            for unit in reader.units():
                if isinstance(unit, SharedRun):
                    s = unit.block.sections
                    tables.append((s._payload, s._base, path.name))
    return tables


def one_run(tables: list[tuple[bytes, int, str]]) -> tuple[dict[str, float], int]:
    """Each step's CPU seconds over all tables, and how many entries they hold."""
    spent: dict[str, float] = {}
    held: list[Any] = []

    def step(name: str, work: Callable[[], None]) -> None:
        start = time.process_time()
        work()
        spent[name] = time.process_time() - start

    parsed: list[Any] = []

    def bitmaps() -> None:
        for table in parsed:
            table.check_bitmaps()

    def free() -> None:
        parsed.clear()
        held.clear()

    with rare_collections():
        step("parse", lambda: parsed.extend(parse_section_table(*t) for t in tables))
        step("bitmaps", bitmaps)
        step(
            "footer entries",
            lambda: held.extend(_sections.footer_entries(t.entries, 0, 1) for t in parsed),
        )
        step("merge columns", lambda: held.extend(_Table(t.entries) for t in parsed))
        entries = sum(len(t.entries) for t in parsed)
        step("free", free)
    return spent, entries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True, help="a local store (not changed)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    tables = table_payloads(args.store)
    if not tables:
        p.error(f"{args.store} holds no shared blocks")
    runs = [one_run(tables) for _ in range(args.repeat)]
    entries = runs[0][1]
    print(f"{len(tables):,} tables, {entries:,} entries; best of {args.repeat} runs")
    print("| step | CPU s | ns per entry |")
    print("|---|---:|---:|")
    for name in STEPS:
        best = min(spent[name] for spent, _ in runs)
        print(f"| {name} | {best:.3f} | {1e9 * best / entries:,.0f} |")
    total = min(sum(spent.values()) for spent, _ in runs)
    print(f"| all | {total:.3f} | {1e9 * total / entries:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
