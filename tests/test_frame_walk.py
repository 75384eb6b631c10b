"""The stream reader on its compiled path (``fileformat.frame_walk``) against itself on
today's Python path (``COMPACTOR_COMPILED_PATH=0``), the reference.

A version-3 file with long batch payloads (over the read-ahead, which the walk asks its
caller for and a local store maps) and small units (a shared block, a framed section of
small batches) is read whole by both paths, from a local store's stream (mapping) and
from a plain byte stream (copying), with the object's size known and unknown (then the
reader takes today's path). Both must give the same records, footer and units; and for a
sample of its faults (byte flips, cuts the catalog's size does not know of, cuts it
does), the same FormatError, position and words. tests/test_job_corruption_v3.py holds
whole jobs to the same on every fault of its corpus, and tests/test_walker_chunks.py the
walker itself to the whole-object walk under any chunking.
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.fileformat import FormatError, Record, StreamReader
from compactor.fileformat.frame_walk import COMPILED_PATH_ENV
from compactor.fileformat.framing import FRAME_HEADER
from compactor.fileformat.reader import READ_AHEAD, verify_stream
from compactor.objectstore.local import LocalStore
from tests.test_shared_blocks import Spec, frames_of, records_of, simple_records, write

NAME = "bucket/data/shared.cf"


def _build() -> bytes:
    rnd = random.Random(7)
    big = [
        Record(r.offset, r.timestamp, r.key, rnd.randbytes(150), r.headers, r.delete_horizon)
        for r in simple_records(100, 1600, value_size=1)
    ]
    specs = [
        Spec("a", 0, (tuple(simple_records(0, 2, value_size=30)),)),
        Spec("a", 1, (tuple(simple_records(10, 1, value_size=2)),)),
        Spec("b", 0, (tuple(big[:900]), tuple(big[900:]))),
        Spec("b", 1, (tuple(simple_records(50, 8, value_size=30)),)),
        Spec("c", 0, (tuple(simple_records(0, 2, value_size=3)),)),
    ]
    w = write(specs, share_below=150, block_bytes=300, max_batch_bytes=1 << 20, compression=None)
    return w.data


DATA = _build()
LONG = [at for at, tag, length in frames_of(DATA) if tag == b"BTCH" and length > READ_AHEAD]


def test_the_file_has_long_payloads_and_small_units() -> None:
    tags = [tag for _, tag, _ in frames_of(DATA)]
    assert len(LONG) == 2
    assert {b"SBLK", b"SHDR", b"STRL", b"STBL"} <= set(tags)
    assert tags.count(b"BTCH") > len(LONG)


def _read(source: io.RawIOBase | object, size: int | None) -> Iterator[object]:
    """Everything a reader of the stream gives: each section's key and records, then the
    footer; or the FormatError it ends in, as (position, reason)."""
    reader = StreamReader(source, object_name=NAME, size=size)  # type: ignore[arg-type]
    try:
        for section in reader.sections():
            yield section.key, records_of(section.batches()), section.meta
        yield reader.footer
    except FormatError as e:
        assert e.object_name == NAME
        yield ("error", e.position, e.reason)
    walked = reader._walk is not None
    yield ("walked", walked)


def _both(
    monkeypatch: pytest.MonkeyPatch, read: object, *args: object
) -> tuple[list[object], list[object]]:
    monkeypatch.setenv(COMPILED_PATH_ENV, "1")
    compiled = list(read(*args))  # type: ignore[operator]
    monkeypatch.setenv(COMPILED_PATH_ENV, "0")
    reference = list(read(*args))  # type: ignore[operator]
    return compiled, reference


def _from_store(tmp_path: Path, data: bytes, size: int | None) -> Iterator[object]:
    store = LocalStore(tmp_path)
    store.put("f.cf", data)
    try:
        with store.open_stream("f.cf") as stream:
            yield from _read(stream, size)
    finally:
        store.close()


@pytest.mark.parametrize("mapped", [True, False])
def test_a_whole_file_reads_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapped: bool
) -> None:
    def read() -> Iterator[object]:
        if mapped:
            yield from _from_store(tmp_path, DATA, len(DATA))
        else:
            yield from _read(io.BytesIO(DATA), len(DATA))

    compiled, reference = _both(monkeypatch, read)
    assert compiled[-1] == ("walked", True) and reference[-1] == ("walked", False)
    assert compiled[:-1] == reference[:-1]
    assert not any(isinstance(e, tuple) and e[0] == "error" for e in compiled)
    assert len(compiled) == 5 + 2


def test_an_unknown_size_takes_todays_path(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, reference = _both(monkeypatch, lambda: _read(io.BytesIO(DATA), None))
    assert compiled == reference and compiled[-1] == ("walked", False)


def test_verify_stream_agrees_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    def verify() -> Iterator[object]:
        yield verify_stream(io.BytesIO(DATA), object_name=NAME, size=len(DATA))

    compiled, reference = _both(monkeypatch, verify)
    assert compiled == reference


def _sample() -> list[int]:
    """Each frame's first bytes, its length's, CRC's, and its payload's first and last
    bytes, and a few bytes after it."""
    out = set()
    for at, _, length in frames_of(DATA):
        end = at + FRAME_HEADER.size + length
        out.update((at, at + 4, at + 7, at + 8, at + 12, end - 1, end, end + 3, end + 7))
    return sorted(p for p in out if 0 <= p < len(DATA))


SAMPLE = _sample()


def _outcomes(read: object) -> list[object]:
    return [list(read(pos))[-2] for pos in SAMPLE]  # type: ignore[operator]


def _flipped(pos: int) -> bytes:
    bad = bytearray(DATA)
    bad[pos] ^= 1 << (pos % 8)
    return bytes(bad)


@pytest.mark.parametrize("mapped", [True, False])
def test_each_flip_fails_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapped: bool
) -> None:
    def read(pos: int) -> Iterator[object]:
        if mapped:
            yield from _from_store(tmp_path, _flipped(pos), len(DATA))
        else:
            yield from _read(io.BytesIO(_flipped(pos)), len(DATA))

    compiled, reference = _both(monkeypatch, _outcomes, read)
    assert compiled == reference
    errors = [o for o in compiled if isinstance(o, tuple) and o[0] == "error"]
    assert len(errors) == len(SAMPLE)  # every flip is found


@pytest.mark.parametrize("size_known", ["original", "cut"])
def test_each_cut_fails_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size_known: str
) -> None:
    """A cut the catalog's size does not know of (the stream ends early), and one it does
    (the size says where the object ends)."""

    def read(pos: int) -> Iterator[object]:
        data = DATA[:pos]
        yield from _from_store(tmp_path, data, len(DATA) if size_known == "original" else pos)

    compiled, reference = _both(monkeypatch, _outcomes, read)
    assert compiled == reference
    assert all(isinstance(o, tuple) and o[0] == "error" for o in compiled)
    truncated = [o for o in compiled if "truncated" in str(o)]
    assert (len(truncated) > 0) == (size_known == "original")
