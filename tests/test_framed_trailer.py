"""A framed section's trailer read by the compiled check (``_sections.framed_trailer``) and
the reader's usual end (``SectionReader._usual_end``): it accepts only what the full
parse accepts, with the same figures, and a stream reads every section alike either way.
A bitmap the usual end leaves unread (a job's phase-2 pointer, ``FileChecks``
"elsewhere") is still checked, and named as before, when its offsets are asked for."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import (
    FileWriter,
    FormatError,
    Record,
    StreamReader,
    _sections,
    records_to_batch,
)
from compactor.fileformat import reader as reader_module
from compactor.fileformat.framing import FRAME_HEADER
from compactor.fileformat.reader import FileChecks, verify_stream
from compactor.fileformat.second_read import MEMO, Role
from compactor.fileformat.section import parse_trailer, parse_trailer_head
from tests.test_fileformat_corruption import (
    DATA,
    NAME,
    format_error,
    payload_of,
    trailer_frames,
    with_payload,
)


def _dense_file() -> bytes:
    """Sections of consecutive offsets (an L0 file's: each bitmap the writer's dense
    one), one of several batches."""
    sink = io.BytesIO()
    w = FileWriter(sink, object_name=NAME, compression="lz4", max_batch_bytes=400)
    for partition, (base, n) in enumerate([(0, 5), (40, 30), (7, 1)]):
        records = [
            Record(base + i, 1_700_000_000_000 + i, b"k%d" % (i % 4), b"v" * 20, ())
            for i in range(n)
        ]
        w.write_section("t", partition, [records_to_batch(records)])
    w.finish()
    return sink.getvalue()


DENSE = _dense_file()


def _seen(data: bytes, frame_at: int) -> tuple[list[int], list[int]]:
    """The batch frames' positions (relative to the section) and first offsets that a
    reader of the section whose trailer frame is at ``frame_at`` saw: the trailer's own."""
    index = parse_trailer(payload_of(data, frame_at), 0, NAME).index
    return [p for _, p in index], [o for o, _ in index]


def _check_alike(payload: bytes, positions: list[int], firsts: list[int]) -> bool:
    """``framed_trailer``'s answer against the full parse: where it accepts, the parse
    accepts with the same figures, kind, bitmap start and index. Returns whether it
    accepted."""
    usual = _sections.framed_trailer(payload, positions, firsts)
    if usual is None:
        return False
    head = parse_trailer_head(payload, 0, NAME, 3)  # raises if the compiled check erred
    figures, kind, bitmap_at = usual
    assert figures == tuple(head.stats.figures())
    assert (kind, bitmap_at) == (head.kind, head.bitmap_at)
    assert [p for _, p in head.index] == positions
    assert [o for o, _ in head.index][: len(firsts)] == firsts
    return True


def test_every_trailer_this_system_writes_is_usual() -> None:
    for data in (DATA, DENSE):
        frames = trailer_frames(data)
        assert len(frames) == 3
        for frame_at in frames:
            positions, firsts = _seen(data, frame_at)
            payload = payload_of(data, frame_at)
            assert _check_alike(payload, positions, firsts)
            assert _check_alike(payload, positions, firsts[:1])  # fewer batches decoded
            assert _check_alike(payload, positions, [])
    assert any(len(_seen(DENSE, f)[0]) > 1 for f in trailer_frames(DENSE))


def test_every_bit_flip_of_a_trailer_head_is_refused_or_read_alike() -> None:
    """Each bit of each trailer up to its bitmap flipped, alone: the compiled check
    accepts a flip only where the full parse does, with the same figures (a flip in
    a figure may make another possible trailer). Few are accepted."""
    flips = accepted = 0
    for data in (DATA, DENSE):
        for frame_at in trailer_frames(data):
            payload = payload_of(data, frame_at)
            positions, firsts = _seen(data, frame_at)
            bitmap_at = parse_trailer_head(payload, 0, NAME, 3).bitmap_at
            for at in range(bitmap_at):
                for bit in range(8):
                    bad = bytearray(payload)
                    bad[at] ^= 1 << bit
                    flips += 1
                    accepted += _check_alike(bytes(bad), positions, firsts)
    assert flips > 4000 and accepted < flips // 2


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_framed_trailer_accepts_only_what_the_parse_accepts(data: st.DataObject) -> None:
    """Random bytes of a trailer changed, and random frames and first offsets seen: the
    compiled check never accepts a trailer the full parse refuses, or one that disagrees
    with what was seen, and gives the parse's figures for what it accepts."""
    file = data.draw(st.sampled_from([DATA, DENSE]))
    frame_at = data.draw(st.sampled_from(trailer_frames(file)))
    payload = bytearray(payload_of(file, frame_at))
    positions, firsts = _seen(file, frame_at)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        payload = payload[: data.draw(st.integers(0, len(payload)))]
    if data.draw(st.booleans()):
        positions = data.draw(st.lists(st.integers(0, 1 << 20), max_size=3))
    if data.draw(st.booleans()):
        firsts = data.draw(st.lists(st.integers(-5, 200), max_size=3))
    if _sections.framed_trailer(bytes(payload), positions, firsts) is None:
        return
    _check_alike(bytes(payload), positions, firsts)


def _stream(data: bytes, checks: FileChecks, role: Role = None) -> StreamReader:
    """A stream of ``data`` as a job's pointer reads one (no footer kept)."""
    return StreamReader(
        io.BytesIO(data), object_name=NAME, size=len(data), keep_footer=False,
        file_checks=checks, role=role,
    )  # fmt: skip


def _metas(data: bytes, checks: FileChecks) -> list[tuple[object, object]]:
    reader = _stream(data, checks)
    out: list[tuple[object, object]] = []
    for section in reader.sections():
        for _ in section.batches():
            pass
        out.append((section.meta, section.offsets))
    return out


@contextmanager
def _counted() -> Iterator[list[int]]:
    """Counts the trailers the usual end takes while inside (the rest take the full
    parse)."""
    accepted: list[int] = []
    real = reader_module.SectionReader._usual_end

    def counting(self: reader_module.SectionReader, *args: object) -> object:
        stats = real(self, *args)  # type: ignore[arg-type]
        accepted.extend([1] if stats is not None else [])
        return stats

    with pytest.MonkeyPatch.context() as m:
        m.setattr(reader_module.SectionReader, "_usual_end", counting)
        yield accepted


@pytest.mark.parametrize("checks", ["decoded", "all", "elsewhere"])
def test_a_stream_reads_every_section_alike_on_the_usual_end(checks: FileChecks) -> None:
    """Metas and offsets as the verifying reader (which takes the full parse) gives them.
    The usual end reads every dense section, and every section of a stream that leaves
    the bitmaps to another; a sparse bitmap otherwise takes the full parse."""
    # DATA's sections of several records have gaps in their offsets; its last is one record
    for data, usual in ((DENSE, 3), (DATA, 3 if checks == "elsewhere" else 1)):
        expected = verify_stream(io.BytesIO(data), object_name=NAME)
        with _counted() as accepted:
            seen = _metas(data, checks)
        assert len(accepted) == usual
        assert [m for m, _ in seen] == list(expected.sections)
        assert all(o is not None for _, o in seen)
        full = [parse_trailer(payload_of(data, f), 0, NAME).offsets for f in trailer_frames(data)]
        assert [o for _, o in seen] == full


def _bad_bitmap(data: bytes) -> tuple[bytes, str]:
    """``data`` with its second section's bitmap made one the full parse refuses (its CRC
    fixed), and the parse's words for it."""
    frame_at = trailer_frames(data)[1]
    payload = bytearray(payload_of(data, frame_at))
    bitmap_at = parse_trailer_head(bytes(payload), 0, NAME, 3).bitmap_at
    payload[bitmap_at:] = b"\xff" * (len(payload) - bitmap_at)
    with pytest.raises(FormatError) as refused:
        parse_trailer(bytes(payload), FRAME_HEADER.size + frame_at, NAME, 3)
    return with_payload(data, frame_at, bytes(payload)), refused.value.reason


@pytest.mark.parametrize("data", [DATA, DENSE], ids=["sparse", "dense"])
@pytest.mark.parametrize("checks", ["decoded", "all"])
def test_a_bad_bitmap_is_refused_where_the_stream_checks_bitmaps(
    data: bytes, checks: FileChecks
) -> None:
    bad, reason = _bad_bitmap(data)
    e = format_error(lambda: _metas(bad, checks), len(bad))
    assert e.reason == reason


@pytest.mark.parametrize("data", [DATA, DENSE], ids=["sparse", "dense"])
def test_a_bitmap_left_to_another_stream_is_refused_when_its_offsets_are_asked_for(
    data: bytes,
) -> None:
    """A job's phase-2 pointer ("elsewhere") reads every record of a section whose bitmap
    is bad (phase 1's pointer, which reads the same object, refuses it and fails the
    job); the offsets, asked for, are refused in the parse's words."""
    bad, reason = _bad_bitmap(data)
    reader = _stream(bad, "elsewhere")
    sections = []
    for section in reader.sections():
        rows = sum(b.num_rows for b in section.batches())
        assert section.meta is not None and rows == section.meta.record_count
        sections.append(section)
    e = format_error(lambda: sections[1].offsets, len(bad))
    assert e.reason == reason
    assert sections[0].offsets is not None and sections[2].offsets is not None


@pytest.mark.parametrize("change", ["stats", "index"])
def test_a_trailer_that_disagrees_is_named_as_before(change: str) -> None:
    """A usual trailer whose stats disagree with the records, or whose index with the
    frames: the compiled check and the usual end decline, and the full parse names it."""
    data = DENSE
    frame_at = trailer_frames(data)[1]
    payload = bytearray(payload_of(data, frame_at))
    if change == "stats":
        payload[48] ^= 1  # the max timestamp
    else:
        bitmap_at = parse_trailer_head(bytes(payload), 0, NAME, 3).bitmap_at
        payload[bitmap_at - 8] ^= 1  # the last index entry's frame position
    bad = with_payload(data, frame_at, bytes(payload))
    with _counted() as accepted:
        e = format_error(lambda: _metas(bad, "elsewhere"), len(bad))
    assert len(accepted) == 1  # the first section's; the second's was declined
    words = "disagree with the records" if change == "stats" else "does not match"
    assert words in e.reason, e.reason


def test_a_first_reader_leaves_no_trailer_its_second_takes_by_its_usual_end() -> None:
    """A job's phase-1 pointer ("first", "all") reads a sparse bitmap through the full
    parse; its phase-2 pointer ("second", "elsewhere") takes that trailer through its
    usual end and never asks the memo, so the first leaves nothing there for it (which
    would only push out what the second does take: ``second_read``)."""
    MEMO.clear()
    reader = _stream(DATA, "all", "first")
    for section in reader.sections():
        section.skip()
    version = reader.format_version
    payloads = [payload_of(DATA, f) for f in trailer_frames(DATA)]
    assert all(MEMO.take((("trailer", version), p)) is None for p in payloads)
    MEMO.clear()
