"""What a compiled decode of phase 2's batches would save, measured before building one.

    .venv/bin/python -m bench.decode_probe --shape ingest-64p [--repeat 7]

docs/COMPILED_PATH.md planned phase 2's read as compiled calls a batch event: Arrow C++
decodes and validates the batch and hands Python one pyarrow batch through the C data
interface. This times that call's core against today's decode on every compressed batch
message of the shape's live files (``bench.ipc_decode.collect``), on this thread:

- **today's decode:** ``ipc._decoded``, what ``decode_measured`` runs before its checks:
  the message checked (``_sections.usual_message``), the kept zstd context where the
  codec is zstd, the thread's kept stream reader, Arrow's full validation, the horizons;
- **today's decode and checks:** the same and ``batches.checked_stats`` (the compiled
  pass over the buffers, through ``__arrow_c_array__``; unordered, as a shared block's
  batch of many partitions is): all ``decode_measured`` does for a payload no memo holds;
- **compiled decode, the batch imported:** ``bench/decode_probe.cpp`` (built here on
  demand into bench/out/ against pyarrow's Arrow C++, as setup.py builds ``_encoder``):
  the kept zstd context where the codec is zstd, as today, then one call that reads the
  message (``arrow::ipc::ReadRecordBatch``, Arrow's threads off) and runs
  ``ValidateFull``, and the batch imported with the schema Python holds;
- **Arrow's full validation alone**, of the batches already decoded: the part of both
  decodes that a compiled call cannot take away;
- **the checks alone** (``checked_stats`` of the decoded batches) and **their export
  alone** (``__arrow_c_array__``, which the checks begin with): a call that decoded and
  checked a batch would not export it for its checks, and no more of the checks is Python.

The line to read is the difference of the first and third, in µs a batch: what moving a
batch's decode into one compiled call saves, before anything else of its unit moves.
Each figure is this process's CPU time, the least of ``--repeat`` runs, the ways run in
turn (a round of each, ``--repeat`` rounds). Not a test: the timings depend on the
machine.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pyarrow as pa

from compactor.fileformat import RECORD_SCHEMA, _sections, ipc
from compactor.fileformat.batches import checked_stats
from compactor.fileformat.framing import MAX_DECODED_BATCH

from .codecs import least_of
from .ipc_decode import Payload, collect
from .walk import shape_files

SOURCE = Path(__file__).with_name("decode_probe.cpp")
BUILT = Path(__file__).with_name("out") / f"decode_probe{sysconfig.get_config_var('EXT_SUFFIX')}"


def probe() -> ModuleType:
    """``decode_probe.cpp`` built (when older than its source) and imported."""
    if not BUILT.exists() or BUILT.stat().st_mtime < SOURCE.stat().st_mtime:
        found = [p for d in pa.get_library_dirs() for p in Path(d).glob("libarrow.so.*")]
        if not found:
            raise SystemExit(f"no libarrow.so.* in {pa.get_library_dirs()} (pyarrow's)")
        lib = min(found, key=lambda p: len(p.name))
        BUILT.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            os.environ.get("CXX", "c++"), "-O2", "-std=c++20", "-shared", "-fPIC",
            f"-I{sysconfig.get_paths()['include']}", f"-I{pa.get_include()}",
            "-o", str(BUILT), str(SOURCE),
            f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}",
        ]  # fmt: skip
        built = subprocess.run(cmd, capture_output=True, text=True)
        if built.returncode:
            raise SystemExit(f"cannot build {SOURCE.name}: {built.stderr.strip()[:500]}")
    loader = importlib.machinery.ExtensionFileLoader("decode_probe", str(BUILT))
    spec = importlib.util.spec_from_loader("decode_probe", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.schema(RECORD_SCHEMA.__arrow_c_schema__())
    return module


_WANTED = ipc.wanted_buffers(RECORD_SCHEMA, None)


def _stored(payload: bytes, codec: str | None) -> bytes:
    """The payload as today's read hands it to Arrow: a zstd message's buffers
    decompressed by the kept context, where it can."""
    if codec != "zstd":
        return payload
    stored = _sections.zstd_stored_as_is(payload, _WANTED, MAX_DECODED_BATCH)
    return payload if stored is None else stored


def todays(payloads: list[Payload]) -> None:
    for payload, _, _ in payloads:
        ipc._decoded(payload, 0, "probe", 3)


def todays_checked(payloads: list[Payload]) -> None:
    for payload, _, _ in payloads:
        batch, _ = ipc._decoded(payload, 0, "probe", 3)
        if isinstance(checked_stats(batch, ordered=False), str):
            raise SystemExit("a live file's batch fails checked_stats")


Decoded = tuple[pa.RecordBatch, bytes]
"""A batch the probe decoded and the bytes it decoded it from: the probe's batches may
point into those bytes (a buffer stored as it is) without holding them."""


def compiled(
    module: ModuleType, payloads: list[Payload], kept: list[Decoded] | None = None
) -> None:
    """Every payload decoded by the probe; each batch and its bytes added to ``kept`` if
    given (timed, each is let go before the next, as today's way lets go of its own)."""
    imported = pa.RecordBatch._import_from_c
    for payload, _, codec in payloads:
        source = _stored(payload, codec)
        address = module.decode(source)
        try:
            batch = imported(address, RECORD_SCHEMA)
        finally:
            module.release(address)
        if kept is not None:
            kept.append((batch, source))


def each(
    batches: list[pa.RecordBatch], step: Callable[[pa.RecordBatch], object]
) -> Callable[[], None]:
    """``step`` of every batch, each result let go before the next."""

    def run() -> None:
        for batch in batches:
            step(batch)

    return run


def _exported(batch: pa.RecordBatch) -> object:
    return batch.__arrow_c_array__()


def main(argv: list[str] | None = None) -> int:
    shape, repeat, store, _, _ = shape_files("python -m bench.decode_probe", __doc__, argv)
    module = probe()
    payloads = [p for p in collect(store) if len(p[1]) == len(RECORD_SCHEMA)]
    if not payloads:
        raise SystemExit(f"{shape}: no compressed batch message of the record schema")
    kept: list[Decoded] = []  # held to the end: the batches may point into their bytes
    compiled(module, payloads, kept)
    decoded = [batch for batch, _ in kept]
    for (payload, _, _), batch in zip(payloads, decoded, strict=True):
        if not batch.equals(ipc._decoded(payload, 0, "probe", 3)[0]):
            raise SystemExit("the compiled decode and today's differ")
    ways: list[tuple[str, Callable[[], object]]] = [
        ("today's decode (ipc._decoded)", lambda: todays(payloads)),
        ("today's decode and checks (+ checked_stats)", lambda: todays_checked(payloads)),
        ("compiled decode, the batch imported", lambda: compiled(module, payloads)),
        ("Arrow's full validation alone", each(decoded, lambda b: b.validate(full=True))),
        ("the checks alone (checked_stats)", each(decoded, lambda b: checked_stats(b, False))),
        ("their export alone (__arrow_c_array__)", each(decoded, _exported)),
    ]
    codecs = sorted({str(codec) for _, _, codec in payloads})
    print(f"{shape}: {len(payloads):,} compressed batch messages ({', '.join(codecs)}); "
          f"CPU, least of {repeat} rounds of the ways in turn")  # fmt: skip
    print()
    print("| way | CPU ms | µs a batch |")
    print("|---|---:|---:|")
    least = dict.fromkeys((name for name, _ in ways), float("inf"))
    for _ in range(repeat):  # the ways in turn, so that a slow spell does not fall on one
        for name, step in ways:
            least[name] = min(least[name], least_of(step, 1)[0])
    per_batch = {}
    for name, cpu in least.items():
        per_batch[name] = cpu * 1e6 / len(payloads)
        print(f"| {name} | {cpu * 1e3:,.1f} | {per_batch[name]:.1f} |")
    saved = per_batch[ways[0][0]] - per_batch[ways[2][0]]
    print()
    print(f"A compiled decode saves {saved:.1f} µs a batch against today's "
          f"({saved * len(payloads) / 1e3:,.1f} ms over the shape's batches).")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
