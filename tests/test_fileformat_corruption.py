"""Bad bytes: every truncation, bit flips, crafted frames. Always FormatError, bounded memory."""

from __future__ import annotations

import contextlib
import io
import json
import random
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from compactor.fileformat import (
    FileMeta,
    FileWriter,
    FormatError,
    Record,
    StreamReader,
    batch_to_records,
    read_footer,
    read_section,
    records_to_batch,
    verify_stream,
)
from compactor.fileformat.batches import BatchStats
from compactor.fileformat.bitmap import OffsetSet
from compactor.fileformat.framing import FRAME_HEADER, MAX_FRAME_PAYLOAD, frame_crc
from compactor.fileformat.section import encode_trailer, parse_trailer

NAME = "bucket/data/f.cf"
# lz4: Arrow opens a codec context per compressed buffer, and zstd's is expensive (~100 us),
# which would dominate these byte-by-byte loops. zstd gets its own crafted-frame test below.
COMPRESSION = "lz4"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def build(compression: str = COMPRESSION) -> tuple[bytes, FileMeta]:
    """A small file: three sections, compressed and plain batches mixed."""

    def recs(base: int, n: int, repeat: int = 12) -> list[Record]:
        return [
            Record(
                base + i * 3 + i % 2,
                1_700_000_000_000 + i,
                None if i == 1 else b"key-%d" % i,
                None if i == 2 else (b"value-%d-" % i) * repeat,
                (("trace", b"abc"), ("empty", None)) if i % 2 == 0 else (),
            )
            for i in range(n)
        ]

    sink = io.BytesIO()
    w = FileWriter(
        sink, object_name=NAME, compression=compression, max_batch_bytes=300, min_compress_bytes=150
    )
    w.write_section("a", 0, [records_to_batch(recs(0, 3))])  # a zstd batch, a plain one
    w.write_section("a", 3, [records_to_batch(recs(100, 2))])  # one zstd batch
    w.write_section("ü", 1, [records_to_batch(recs(7, 1, repeat=2))])  # one plain batch
    meta = w.finish()
    return sink.getvalue(), meta


DATA, META = build()
EXPECTED = {
    (s.topic, s.partition): [
        r
        for b in read_section(lambda a, b: DATA[a:b], s, object_name=NAME)
        for r in batch_to_records(b)
    ]
    for s in META.sections
}
FOOTER_AT = META.sections[-1].position + META.sections[-1].length


def frames(data: bytes) -> list[tuple[int, bytes, int]]:
    """(position, tag, payload length) of every frame in a valid file."""
    out = []
    pos = 16
    while True:
        tag, length, _ = FRAME_HEADER.unpack_from(data, pos)
        out.append((pos, tag, length))
        pos += FRAME_HEADER.size + length
        if tag == b"STRL":
            pos += 8
        if tag == b"FOOT":
            return out


def with_payload(data: bytes, frame_at: int, payload: bytes) -> bytes:
    """``data`` with the frame at ``frame_at`` given a new payload and a matching CRC.

    The frame keeps its length (the caller's payload must have it), so this simulates a
    corruption that the CRC does not catch.
    """
    tag, length, _ = FRAME_HEADER.unpack_from(data, frame_at)
    assert len(payload) == length
    header = FRAME_HEADER.pack(tag, length, frame_crc(tag, length, payload))
    out = bytearray(data)
    out[frame_at : frame_at + FRAME_HEADER.size + length] = header + payload
    if tag == b"FOOT":
        struct.pack_into("<I", out, len(out) - 16, frame_crc(tag, length, payload))
    return bytes(out)


def payload_of(data: bytes, frame_at: int) -> bytes:
    _, length, _ = FRAME_HEADER.unpack_from(data, frame_at)
    return data[frame_at + FRAME_HEADER.size : frame_at + FRAME_HEADER.size + length]


def stream_all(data: bytes, size: int | None) -> FileMeta:
    reader = StreamReader(io.BytesIO(data), object_name=NAME, size=size)
    for section in reader.sections():
        for _ in section.batches():
            pass
    assert reader.footer is not None
    return reader.footer


def section_records(data: bytes, index: int) -> list[Record]:
    s = META.sections[index]
    rr = lambda a, b: data[a:b]  # noqa: E731
    return [r for b in read_section(rr, s, object_name=NAME) for r in batch_to_records(b)]


def format_error(fn: Callable[[], object], data_len: int) -> FormatError:
    """Runs ``fn``, which must raise FormatError (and nothing else) naming the object."""
    try:
        fn()
    except FormatError as e:
        assert e.object_name == NAME
        assert 0 <= e.position <= max(data_len, len(DATA))
        assert str(e) == f"{NAME}: byte {e.position}: {e.reason}"
        return e
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{type(e).__name__} instead of FormatError: {e}")
    pytest.fail("no FormatError")


def test_fixture_file_has_what_the_tests_need() -> None:
    tags = [t for _, t, _ in frames(DATA)]
    assert tags.count(b"SHDR") == 3
    assert tags.count(b"BTCH") == 4
    batch_payloads = [payload_of(DATA, p) for p, t, _ in frames(DATA) if t == b"BTCH"]
    assert any(LZ4_MAGIC in p for p in batch_payloads)
    assert any(LZ4_MAGIC not in p for p in batch_payloads)
    assert stream_all(DATA, len(DATA)) == META


def test_every_truncation_is_a_format_error() -> None:
    full = len(DATA)
    for n in range(full):
        cut = DATA[:n]
        format_error(lambda: stream_all(cut, None), n)  # noqa: B023
        format_error(lambda: stream_all(cut, n), n)  # noqa: B023
        format_error(lambda: read_footer(lambda a, b: cut[a:b], n, object_name=NAME), n)  # noqa: B023
        if n % 4 == 0:  # the same code paths as above, with other checks on top
            format_error(lambda: stream_all(cut, full), n)  # noqa: B023
            format_error(lambda: verify_stream(io.BytesIO(cut), object_name=NAME), n)  # noqa: B023
        for i, s in enumerate(META.sections):
            if s.position + s.length <= n:
                assert section_records(cut, i) == EXPECTED[(s.topic, s.partition)]
            else:
                format_error(lambda: section_records(cut, i), n)  # noqa: B023


def check_corrupt(bad: bytes, changed: range, verify: bool = True) -> None:
    """Every reader rejects ``bad``; ranged readers exactly when they read a changed byte."""
    n = len(bad)
    format_error(lambda: stream_all(bad, n), n)
    if verify:
        format_error(lambda: verify_stream(io.BytesIO(bad), object_name=NAME), n)
    in_footer = changed.start < 16 or changed.stop > FOOTER_AT
    if in_footer:
        format_error(lambda: read_footer(lambda a, b: bad[a:b], n, object_name=NAME), n)
    else:
        assert read_footer(lambda a, b: bad[a:b], n, object_name=NAME) == META
    for i, s in enumerate(META.sections):
        if changed.start < s.position + s.length and s.position < changed.stop:
            format_error(lambda: section_records(bad, i), n)  # noqa: B023
        else:
            assert section_records(bad, i) == EXPECTED[(s.topic, s.partition)]


def test_every_single_bit_flip_is_a_format_error() -> None:
    for pos in range(len(DATA)):
        bad = bytearray(DATA)
        bad[pos] ^= 1 << (pos % 8)
        check_corrupt(bytes(bad), range(pos, pos + 1), verify=pos % 3 == 0)


def test_random_corruptions_are_format_errors() -> None:
    rnd = random.Random(20240611)
    for _ in range(400):
        pos = rnd.randrange(len(DATA))
        length = rnd.randint(1, 16)
        bad = bytearray(DATA)
        for i in range(pos, min(pos + length, len(DATA))):
            bad[i] = rnd.choice([b for b in range(256) if b != DATA[i]])
        check_corrupt(bytes(bad), range(pos, min(pos + length, len(DATA))))


def test_inserted_or_deleted_bytes_are_format_errors() -> None:
    rnd = random.Random(7)
    for _ in range(150):
        pos = rnd.randrange(len(DATA))
        for bad in (DATA[:pos] + DATA[pos + 1 :], DATA[:pos] + b"\x00" + DATA[pos:]):
            format_error(lambda: stream_all(bad, None), len(bad))  # noqa: B023
            format_error(lambda: verify_stream(io.BytesIO(bad), object_name=NAME), len(bad))  # noqa: B023
            format_error(
                lambda: read_footer(lambda a, b: bad[a:b], len(bad), object_name=NAME),  # noqa: B023
                len(bad),
            )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated file header"),
        (b"PAR1" + bytes(100), "bad magic"),
        (DATA[:8] + (4).to_bytes(4, "little") + DATA[12:], "unsupported format version 4"),
        (DATA[:12] + b"\x01\0\0\0" + DATA[16:], "unknown header flags"),
        (DATA[:-8] + b"NOTMAGIC", "bad tail magic"),
        (DATA + b"x", "bytes after the file tail"),
    ],
)
def test_not_a_file(data: bytes, reason: str) -> None:
    e = format_error(lambda: stream_all(data, None), len(data))
    assert reason in e.reason
    format_error(
        lambda: read_footer(lambda a, b: data[a:b], len(data), object_name=NAME), len(data)
    )


def test_impossible_lengths_are_rejected_before_reading() -> None:
    class Source:
        """A stream that records what it was asked for."""

        def __init__(self, data: bytes) -> None:
            self.inner = io.BytesIO(data)
            self.requests: list[int] = []

        def read(self, n: int) -> bytes:
            self.requests.append(n)
            return self.inner.read(n)

    first = frames(DATA)[0][0]
    for length, size in [(0xFFFFFFFF, None), (MAX_FRAME_PAYLOAD + 1, None), (10**6, len(DATA))]:
        bad = bytearray(DATA)
        struct.pack_into("<I", bad, first + 4, length)
        src = Source(bytes(bad))
        reader = StreamReader(src, object_name=NAME, size=size)
        e = format_error(lambda: next(iter(reader.sections())), len(bad))  # noqa: B023
        assert e.position == first + 4  # the length field
        assert max(src.requests) <= 4 << 20
    # A length under the cap, with the size unknown: asked for in bounded chunks only.
    bad = bytearray(DATA)
    struct.pack_into("<I", bad, first + 4, 200 << 20)
    src = Source(bytes(bad))
    format_error(lambda: stream_all_from(src), len(bad))
    assert max(src.requests) <= 4 << 20

    size = len(DATA)
    for footer_length in (0, 1, size, 2**32 - 1):
        bad = bytearray(DATA)
        struct.pack_into("<I", bad, size - 20, footer_length)
        format_error(lambda: read_footer(lambda a, b: bad[a:b], size, object_name=NAME), size)  # noqa: B023


def stream_all_from(source: object) -> None:
    reader = StreamReader(source, object_name=NAME)  # type: ignore[arg-type]
    for section in reader.sections():
        for _ in section.batches():
            pass


# --- corruptions the CRC does not catch (as if by a CRC collision, or a bad writer) ----------


def batch_frames(data: bytes) -> list[int]:
    return [p for p, t, _ in frames(data) if t == b"BTCH"]


def test_crc_valid_garbage_in_batches_never_escapes_as_another_error() -> None:
    rnd = random.Random(11)
    checked = 0
    for frame_at in batch_frames(DATA)[:2]:  # one compressed, one plain
        payload = payload_of(DATA, frame_at)
        for pos in range(0, len(payload), 2):
            bad_payload = bytearray(payload)
            bad_payload[pos] = rnd.choice([b for b in range(256) if b != payload[pos]])
            bad = with_payload(DATA, frame_at, bytes(bad_payload))
            for fn in (
                lambda: stream_all(bad, len(bad)),  # noqa: B023
                lambda: verify_stream(io.BytesIO(bad), object_name=NAME),  # noqa: B023
                lambda: [section_records(bad, i) for i in range(3)],  # noqa: B023
            ):
                with contextlib.suppress(FormatError):
                    fn()
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize(("codec", "magic"), [("zstd", ZSTD_MAGIC), ("lz4", LZ4_MAGIC)])
def test_declared_decompressed_size_is_bounded(codec: str, magic: bytes) -> None:
    data, _ = build(codec)
    for frame_at in batch_frames(data):
        payload = payload_of(data, frame_at)
        if magic in payload:
            break
    else:
        pytest.fail("no compressed batch")
    assert stream_all(data, len(data)).size == len(data)
    # The first compressed buffer's 8-byte decompressed-length prefix sits just before the
    # codec's frame magic.
    at = payload.index(magic) - 8
    for declared, reason in [(2**40, "cap"), (200 << 20, "times"), (100 * len(payload), "times")]:
        bad_payload = payload[:at] + struct.pack("<q", declared) + payload[at + 8 :]
        bad = with_payload(data, frame_at, bad_payload)
        e = format_error(lambda: stream_all(bad, len(bad)), len(bad))  # noqa: B023
        assert reason in e.reason
        assert frame_at < e.position < frame_at + len(payload) + FRAME_HEADER.size
    # Within the bounds Arrow tries, finds the data shorter than declared, and fails cleanly.
    bad_payload = payload[:at] + struct.pack("<q", 10 * len(payload)) + payload[at + 8 :]
    bad = with_payload(data, frame_at, bad_payload)
    assert "Arrow cannot decode" in format_error(lambda: stream_all(bad, None), len(bad)).reason


def test_bad_binary_offsets_fail_validation() -> None:
    for frame_at in batch_frames(DATA):
        payload = payload_of(DATA, frame_at)
        if LZ4_MAGIC not in payload:
            break
    else:
        pytest.fail("no uncompressed batch")
    meta_len = struct.unpack_from("<i", payload, 4)[0]
    body = 8 + meta_len
    # Overwrite every 4-byte word of the body after the int64 columns with a huge offset.
    hits = 0
    for at in range(body, len(payload) - 4, 4):
        bad_payload = payload[:at] + struct.pack("<i", 10**8) + payload[at + 4 :]
        bad = with_payload(DATA, frame_at, bad_payload)
        try:
            stream_all(bad, len(bad))
        except FormatError as e:
            hits += "Arrow cannot decode" in e.reason or "invalid batch" in e.reason
    assert hits > 0


def trailer_frames(data: bytes) -> list[int]:
    return [p for p, t, _ in frames(data) if t == b"STRL"]


def reencode_trailer(data: bytes, frame_at: int, change: Callable[..., bytes]) -> bytes:
    payload = payload_of(data, frame_at)
    trailer = parse_trailer(payload, 0, NAME)
    new = change(trailer)
    assert len(new) == len(payload)
    return with_payload(data, frame_at, new)


def test_trailer_stats_that_disagree_with_records() -> None:
    frame_at = trailer_frames(DATA)[0]

    def more_tombstones(t: object) -> bytes:
        s = t.stats  # type: ignore[attr-defined]
        stats = BatchStats(
            s.first_offset,
            s.last_offset,
            s.record_count,
            s.tombstones + 1,
            s.uncompressed_bytes,
            s.min_timestamp,
            s.max_timestamp,
        )
        return encode_trailer(stats, list(t.index), t.offsets)  # type: ignore[attr-defined]

    bad = reencode_trailer(DATA, frame_at, more_tombstones)
    assert "trailer stats" in format_error(lambda: stream_all(bad, len(bad)), len(bad)).reason
    e = format_error(lambda: section_records(bad, 0), len(bad))
    assert "disagrees with the footer" in e.reason
    assert section_records(bad, 1) == EXPECTED[("a", 3)]


def test_bitmap_that_disagrees_with_records() -> None:
    frame_at = trailer_frames(DATA)[0]
    present = EXPECTED[("a", 0)]
    offsets = [r.offset for r in present]
    hole = next(o for o in range(offsets[0], offsets[-1]) if o not in offsets)
    assert len(offsets) == 3

    def move_one_offset(t: object) -> bytes:
        from pyroaring import BitMap

        moved = [o - offsets[0] for o in offsets if o != offsets[1]] + [hole - offsets[0]]
        return encode_trailer(t.stats, list(t.index), OffsetSet(offsets[0], BitMap(moved)))  # type: ignore[attr-defined]

    bad = reencode_trailer(DATA, frame_at, move_one_offset)
    e = format_error(lambda: verify_stream(io.BytesIO(bad), object_name=NAME), len(bad))
    assert "bitmap differs" in e.reason
    # A ranged read that trusts the bitmap to find its start notices the batch lacks it.
    rr = lambda a, b: bad[a:b]  # noqa: E731
    e = format_error(
        lambda: list(read_section(rr, META.sections[0], object_name=NAME, from_offset=hole)),
        len(bad),
    )
    assert "does not hold it" in e.reason


def test_malformed_bitmaps() -> None:
    frame_at = trailer_frames(DATA)[1]
    payload = payload_of(DATA, frame_at)
    original = parse_trailer(payload, 0, NAME).offsets
    bitmap_at = len(payload) - len(original.serialize())
    rnd = random.Random(5)
    rejected = 0
    for _ in range(300):
        bad_payload = bytearray(payload)
        for _ in range(rnd.randint(1, 3)):
            bad_payload[rnd.randrange(bitmap_at, len(payload))] = rnd.randrange(256)
        if bytes(bad_payload) == payload:
            continue
        bad = with_payload(DATA, frame_at, bytes(bad_payload))
        try:
            verify_stream(io.BytesIO(bad), object_name=NAME)
        except FormatError:
            rejected += 1
        else:
            # Accepted only if the bytes still mean the same offsets (the portable format's
            # container offset table is redundant; CRoaring does not read it).
            assert parse_trailer(bytes(bad_payload), 0, NAME).offsets == original
    assert rejected > 200


def test_sections_out_of_order() -> None:
    # Swap partitions 0 and 3 of topic "a" in the section headers (CRCs fixed).
    shdr = [p for p, t, _ in frames(DATA) if t == b"SHDR"]
    bad = DATA
    for frame_at, partition in ((shdr[0], 3), (shdr[1], 0)):
        payload = payload_of(bad, frame_at)
        bad = with_payload(bad, frame_at, payload[:-4] + struct.pack("<i", partition))
    e = format_error(lambda: stream_all(bad, len(bad)), len(bad))
    assert "out of order" in e.reason
    assert e.position == shdr[1]


def test_footer_that_disagrees_with_sections() -> None:
    frame_at = frames(DATA)[-1][0]
    payload = bytearray(payload_of(DATA, frame_at))
    # The footer ends with the last section's max timestamp and min delete horizon.
    struct.pack_into("<q", payload, len(payload) - 16, 1_700_000_000_999)
    bad = with_payload(DATA, frame_at, bytes(payload))
    assert "disagrees" in format_error(lambda: stream_all(bad, len(bad)), len(bad)).reason
    footer = read_footer(lambda a, b: bad[a:b], len(bad), object_name=NAME)
    assert footer.sections[-1].max_timestamp == 1_700_000_000_999
    e = format_error(
        lambda: list(read_section(lambda a, b: bad[a:b], footer.sections[-1], object_name=NAME)),
        len(bad),
    )
    assert "disagrees with the footer" in e.reason


def test_format_error_pickles() -> None:
    import pickle

    e = FormatError("obj", 12, "bad")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.object_name, e2.position, e2.reason, str(e2)) == (
        "obj",
        12,
        "bad",
        "obj: byte 12: bad",
    )


# --- memory ---------------------------------------------------------------------------------


def corrupt_variants(step: int) -> list[bytes]:
    """Truncations, bit flips, and CRC-valid garbage in batches (which reaches Arrow)."""
    rnd = random.Random(step)
    out = [DATA[:n] for n in range(0, len(DATA), 3 * step)]
    for pos in range(0, len(DATA), 2 * step):
        bad = bytearray(DATA)
        bad[pos] ^= 1 << (pos % 8)
        out.append(bytes(bad))
    for frame_at in batch_frames(DATA):
        payload = payload_of(DATA, frame_at)
        for pos in range(0, len(payload), step):
            bad_payload = bytearray(payload)
            bad_payload[pos] = rnd.randrange(256)
            out.append(with_payload(DATA, frame_at, bytes(bad_payload)))
    first = frames(DATA)[0][0]
    for length in (200 << 20, 2**32 - 1):
        bad = bytearray(DATA)
        struct.pack_into("<I", bad, first + 4, length)
        out.append(bytes(bad))
    return out


def readers(bad: bytes) -> list[Callable[[], object]]:
    return [
        lambda: stream_all(bad, None),
        lambda: stream_all(bad, len(bad)),
        lambda: verify_stream(io.BytesIO(bad), object_name=NAME),
        lambda: [section_records(bad, i) for i in range(3)],
        lambda: read_footer(lambda a, b: bad[a:b], len(bad), object_name=NAME),
    ]


def memory_probe() -> dict[str, int]:
    """Decodes many corrupt variants of the small file; reports the worst allocations.

    Run in a fresh process, where pyarrow's pool high-water mark reflects this run only.
    Python allocations are traced (tracemalloc is slow) for a sample of the variants.
    """
    pool = pa.default_memory_pool()
    arrow_before = pool.bytes_allocated()
    cases = 0
    for bad in corrupt_variants(step=3):
        for fn in readers(bad):
            with contextlib.suppress(FormatError):
                fn()
            cases += 1
    arrow_high_water = pool.max_memory()
    tracemalloc.start()
    python_peak = 0
    for bad in corrupt_variants(step=11):
        for fn in readers(bad):
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            with contextlib.suppress(FormatError):
                fn()
            python_peak = max(python_peak, tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return {
        "file_size": len(DATA),
        "cases": cases,
        "python_peak": python_peak,
        "arrow_before": arrow_before,
        "arrow_high_water": arrow_high_water,
    }


def test_corrupt_input_allocates_a_bounded_amount() -> None:
    probe = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('probe', {str(Path(__file__))!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(json.dumps(m.memory_probe()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    size = result["file_size"]
    assert result["cases"] > 5000, result
    # Python objects: at most a few copies of the file (frames are read, then sliced).
    assert result["python_peak"] <= 4 * size + (64 << 10), result
    # Arrow buffers over the whole run, writer included: a decoded batch at a time.
    assert result["arrow_high_water"] <= result["arrow_before"] + 4 * size + (256 << 10), result
