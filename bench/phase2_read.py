"""What phase 2's pointer pays to read a shape's inputs, and how much of it is Python.

    .venv/bin/python -m bench.phase2_read --shape ingest-64p [--repeat 5]

The job's process, not the helper, bounds every shape's job (``bench.profile_job
--plain``: the job's thread waits at most a tenth of a second on phase 1's feed, while
the helper has spare CPU), so the compiled path's next step is the step that takes CPU
off the job's process (docs/COMPILED_PATH.md, "Which process bounds a job"). Its largest
piece is phase 2's read of the inputs. This times it on the shape's live files, on this
thread, four ways:

- **walk, nothing decoded:** ``bench.walk``'s ``reader_walk`` with ``file_checks="elsewhere"``
  (phase 2's pointer), framed sections skipped, blocks' batches not decoded: the frames,
  their CRCs, trailers and tables, as the job's path takes them (the compiled walk,
  unless ``COMPACTOR_COMPILED_PATH=0``);
- **read, every batch decoded whole:** the same, with every framed section's batches
  and every block's batch decoded and checked as phase 2 decodes them (``batches()``,
  ``Block.records()``): what phase 2's pointer does before the survivors are decided;
- **CRC floor:** each file mapped and ISA-L's CRC-32 over it (``bench.floor``'s first
  step), the first touch of every byte;
- **Arrow's decode alone:** every compressed batch message decoded whole by the kept
  reader (``ipc.read_compressed``, ``bench.floor``'s decode step), nothing checked;
- **a batch through the C data interface:** each of those batches exported and imported
  again as a pyarrow batch (``_export_to_c``, ``_import_from_c``), what a compiled reader
  that hands Python one batch a batch pays for it.

The last line is the read less its floor (CRCs and Arrow's decode): the Python glue per
unit that a compiled phase-2 reader would take away. Each figure is this process's CPU
time, the least of ``--repeat`` runs. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyarrow.cffi import ffi

from compactor.fileformat import RECORD_SCHEMA, StreamReader, ipc
from compactor.fileformat.reader import SharedRun
from compactor.objectstore import LocalStore

from .codecs import least_of
from .floor import WHOLE, decode_all, map_and_crc_all
from .ipc_decode import collect
from .walk import reader_walk, shape_files


def phase2_read(store: LocalStore, keys: list[str], sizes: list[int]) -> int:
    """Every file read as phase 2's pointer reads it, its batches decoded whole; how many
    units (framed sections and shared blocks) it met."""
    units = 0
    for key, size in zip(keys, sizes, strict=True):
        with store.open_stream(key) as stream:
            reader = StreamReader(
                stream, object_name=key, size=size, keep_footer=False, file_checks="elsewhere"
            )
            for unit in reader.units():
                units += 1
                if isinstance(unit, SharedRun):
                    unit.block.records()
                else:
                    for _ in unit.batches():
                        pass
    return units


def round_trips(batches: list[pa.RecordBatch]) -> None:
    """Each batch exported through the C data interface and imported again."""
    array = ffi.new("struct ArrowArray*")
    address = int(ffi.cast("uintptr_t", array))
    for batch in batches:
        batch._export_to_c(address)
        pa.RecordBatch._import_from_c(address, RECORD_SCHEMA)


def main(argv: list[str] | None = None) -> int:
    shape, repeat, store, keys, sizes = shape_files("python -m bench.phase2_read", __doc__, argv)
    payloads = collect(store)
    units = reader_walk(store, keys, sizes, "elsewhere")
    batches = [ipc.with_horizons(ipc.read_compressed(p, s, WHOLE, c)) for p, s, c in payloads]
    ways: list[tuple[str, Callable[[], object]]] = [
        ("walk, nothing decoded", lambda: reader_walk(store, keys, sizes, "elsewhere")),
        ("read, every batch decoded whole", lambda: phase2_read(store, keys, sizes)),
        ("CRC floor (ISA-L over each map)", lambda: map_and_crc_all(store, keys, sizes)),
        (f"Arrow's decode alone ({len(payloads):,} compressed messages)",
         lambda: decode_all(payloads, WHOLE)),
        ("a batch through the C data interface, each", lambda: round_trips(batches)),
    ]  # fmt: skip
    print(f"{shape}: {len(keys)} files, {sum(sizes) / 1e6:,.0f} MB, {units:,} units "
          f"(framed sections and shared blocks); CPU, least of {repeat} runs")  # fmt: skip
    print()
    print("| phase 2's pointer | ms | µs a unit |")
    print("|---|---:|---:|")
    cpu: dict[str, float] = {}
    for label, run in ways:
        cpu[label] = least_of(run, repeat)[0]
        print(f"| {label} | {cpu[label] * 1e3:,.0f} | {cpu[label] * 1e6 / units:,.1f} |")
    read, floor = cpu[ways[1][0]], cpu[ways[2][0]] + cpu[ways[3][0]]
    print(f"| the read above its floor (CRCs and Arrow's decode) | {(read - floor) * 1e3:,.0f} "
          f"| {(read - floor) * 1e6 / units:,.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
