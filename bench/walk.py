"""What walking a shape's inputs costs: today's stream reader against the compiled walk.

    .venv/bin/python -m bench.walk --shape ingest-64p [--repeat 5]

A job's pointers each walk every input once: frames, CRCs, tags, section order, section
and block ends, the tail (docs/COMPILED_PATH.md, ``walk``). This times that walk alone,
without decoding a batch, on the shape's live files, four ways:
- **reader, phase 1's pointer:** ``StreamReader.units`` with ``file_checks="all"`` (the
  footer against the sections, a block's bitmaps), framed sections skipped;
- **reader, phase 2's pointer:** the same with ``file_checks="elsewhere"``;
- **compiled walk:** each file mapped off its stream, as the reader maps a local file's
  long payloads, and ``fileformat._walk.walk`` over the map. It checks less than the
  reader: not a trailer's, a table's or the footer's content (``_walk.c``'s top
  comment);
- **CRC floor:** each file mapped the same way and ISA-L's CRC-32 over it
  (``bench.floor``'s first step): the first touch of every byte, which any walk makes.

The reader's two ways take the path jobs take: the compiled chunk-wise walk
(``fileformat.frame_walk``), or today's Python reader alone with
``COMPACTOR_COMPILED_PATH=0``; run it both ways to compare the two.

Each figure is this process's CPU time, the least of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from compactor.fileformat import StreamReader, _walk
from compactor.fileformat.reader import FileChecks
from compactor.objectstore import LocalStore

from .codecs import least_of
from .contenders import live_files
from .floor import map_and_crc_all, mapped
from .shapes import SHAPES


def reader_walk(store: LocalStore, keys: list[str], sizes: list[int], checks: FileChecks) -> int:
    """Today's reader over every file, nothing decoded; how many units it met."""
    units = 0
    for key, size in zip(keys, sizes, strict=True):
        with store.open_stream(key) as stream:
            reader = StreamReader(
                stream, object_name=key, size=size, keep_footer=False, file_checks=checks
            )
            units += sum(1 for _ in reader.units())
    return units


def compiled_walk(store: LocalStore, keys: list[str], sizes: list[int]) -> int:
    """The compiled walk over every file, mapped off its stream; how many units it met."""
    units = 0
    for key, view in zip(keys, mapped(store, keys, sizes), strict=True):
        found = _walk.walk(view, key)
        if found[0] != "ok":
            raise SystemExit(f"{key}: the compiled walk says {found}")
        units += len(found[1])
        del found, view
    return units


class ShapeFiles(NamedTuple):
    """A shape's live files, as a timing of its inputs takes them."""

    shape: str
    repeat: int
    store: LocalStore
    keys: list[str]
    sizes: list[int]


def shape_files(prog: str, doc: str | None, argv: list[str] | None) -> ShapeFiles:
    """The ``--shape`` and ``--repeat`` of a command that times a shape's inputs, and the
    shape's live files."""
    ap = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--shape", required=True, choices=[s.name for s in SHAPES])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each way (the least is kept)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    workdir: Path = next(s for s in SHAPES if s.name == args.shape).workdir(1.0)
    if not (workdir / "store").is_dir():
        raise SystemExit(f"{workdir}: no workload (python -m bench.shapes --only {args.shape})")
    store = LocalStore(str(workdir / "store"))
    files = list(live_files(store, None))
    return ShapeFiles(
        args.shape, args.repeat, store, [f.key for f in files], [f.size for f in files]
    )


def main(argv: list[str] | None = None) -> int:
    shape, repeat, store, keys, sizes = shape_files("python -m bench.walk", __doc__, argv)
    units = compiled_walk(store, keys, sizes)
    if units != reader_walk(store, keys, sizes, "all"):
        raise SystemExit("the compiled walk and the reader met different numbers of units")
    ways: list[tuple[str, Callable[[], object]]] = [
        ("reader, phase 1's pointer", lambda: reader_walk(store, keys, sizes, "all")),
        ("reader, phase 2's pointer", lambda: reader_walk(store, keys, sizes, "elsewhere")),
        (f"compiled walk (CRCs by {_walk.CRC})", lambda: compiled_walk(store, keys, sizes)),
        ("CRC floor (ISA-L over each map)", lambda: map_and_crc_all(store, keys, sizes)),
    ]
    print(f"{shape}: {len(keys)} files, {sum(sizes) / 1e6:,.0f} MB, {units:,} units "
          f"(framed sections and shared blocks); CPU, least of {repeat} runs")  # fmt: skip
    print()
    print("| walk | ms | µs a unit |")
    print("|---|---:|---:|")
    for label, run in ways:
        cpu = least_of(run, repeat)[0]
        print(f"| {label} | {cpu * 1e3:,.0f} | {cpu * 1e6 / units:,.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
