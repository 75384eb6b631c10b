"""The codec trade below the top level, measured on one of bench.shapes' shapes: its
workload written in zstd and in lz4, compacted in alternation.

    .venv/bin/python -m bench.codec_trade --shape ingest-64p --pairs 3

Two comparisons, each run ``--pairs`` times in turn on fresh hard-linked clones of the
stores (this machine's speed drifts within the hour: only alternating runs compare):

- ``compact --full`` of the workload written in zstd and in lz4: what reading the levels
  below the top in lz4 costs or saves (the output, at L4, is zstd either way);
- for shapes of L0 files, one ``compact --once`` of the lz4 workload, an L0 -> L1 job (its
  trigger lowered to the workload's file count when it has fewer than 32 files), with
  ``--compression-below-top zstd`` and ``lz4``: what writing L1 in lz4 saves.

The workloads are bench.shapes' own (``bench/out/shape-<shape>`` in the default codec,
``shape-<shape>-zstd`` as ``bench.shapes --compression zstd`` names it), made if missing.
Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compactor.planner.config import PlannerConfig

from . import workload
from .ab import ROOT, alternate
from .shapes import SHAPES, Shape

COMPARED = ("zstd", "lz4")


def _workload(shape: Shape, codec: str) -> workload.Workload:
    ap = argparse.ArgumentParser()
    workload.add_arguments(ap)
    params = workload.params_from(ap.parse_args([*shape.argv(1.0), "--compression", codec]))
    return workload.ensure(params, shape.workdir(1.0, codec))


def _compare(
    title: str, stores: dict[str, tuple[Path, list[str]]], now_ms: int, pairs: int
) -> None:
    """``compact`` of this checkout on each of ``stores`` (a store, the arguments), in turn."""
    print(f"\n== {title}", flush=True)
    alternate({name: (ROOT, *run) for name, run in stores.items()}, now_ms, pairs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.codec_trade",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--shape", choices=[s.name for s in SHAPES], required=True)
    ap.add_argument("--pairs", type=int, default=3, help="runs of each, alternating")
    args = ap.parse_args(argv)
    shape = next(s for s in SHAPES if s.name == args.shape)
    made = {codec: _workload(shape, codec) for codec in COMPARED}
    for codec, w in made.items():
        print(f"{codec}: {w.workdir}, {w.files} files, {w.store_bytes / 1e6:,.0f} MB in the store")
    now_ms = made["lz4"].params.compaction_now_ms
    stores = {codec: (w.workdir / "store").resolve() for codec, w in made.items()}
    _compare(
        "compact --full, the workload in each codec (output at L4: zstd)",
        {codec: (stores[codec], ["--full"]) for codec in COMPARED},
        now_ms,
        args.pairs,
    )
    if shape.level != 0:
        return
    trigger = min(PlannerConfig().level_trigger_files, made["lz4"].files)
    once = ["--once", "--set", f"level.trigger.files={trigger}", "--compression-below-top"]
    _compare(
        "compact --once, one L0 -> L1 job of the lz4 workload, its output in each codec",
        {codec: (stores["lz4"], [*once, codec]) for codec in COMPARED},
        now_ms,
        args.pairs,
    )


if __name__ == "__main__":
    main()
