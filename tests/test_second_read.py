"""The second-read memo: a job's second reader of the same bytes takes the first reader's
result, and nothing else ever does. And a job's pointers hold no footer entries."""

from __future__ import annotations

import io
import struct

import pytest

from compactor.fileformat import FileWriter, FormatError, Record, StreamReader, records_to_batch
from compactor.fileformat.footer import parse_tail
from compactor.fileformat.framing import FILE_TAIL
from compactor.fileformat.ipc import decode_batch, decode_unchecked, inspect_message
from compactor.fileformat.reader import SharedRun
from compactor.fileformat.second_read import MEMO, SecondReadMemo
from compactor.fileformat.section import parse_trailer
from tests.test_fileformat_corruption import (
    DATA,
    NAME,
    batch_frames,
    format_error,
    frames,
    payload_of,
    stream_all,
    trailer_frames,
    with_payload,
)


def _plain_batch_payload() -> bytes:
    for frame_at in batch_frames(DATA):
        payload = payload_of(DATA, frame_at)
        if not inspect_message(payload, 0, NAME).compressed:
            return payload
    raise AssertionError("no uncompressed batch")


def test_the_second_decode_of_equal_bytes_is_the_first_ones_result() -> None:
    payload = _plain_batch_payload()
    MEMO.clear()
    first = decode_batch(payload, 0, NAME, role="first")
    again = bytes(bytearray(payload))  # equal bytes, another object
    assert decode_batch(again, 0, NAME) is not first  # a reader on its own takes nothing
    second = decode_batch(again, 0, NAME, role="second")
    assert second is first
    third = decode_batch(payload, 0, NAME, role="second")  # taken once: decoded afresh
    assert third is not first and third.equals(first)
    decode_batch(payload, 0, NAME)  # a reader on its own leaves nothing
    assert len(MEMO) == 0


def test_an_unchecked_decode_is_shared_as_the_first_left_it() -> None:
    """A shared block's whole decode (``decode_unchecked``, its records checked by the
    block): the second reader takes the first's batch of equal bytes, once, under a key
    of its own (a measured decode of the same bytes takes nothing from it)."""
    payload = _plain_batch_payload()
    MEMO.clear()
    first = decode_unchecked(payload, 0, NAME, role="first")
    assert first.equals(decode_batch(payload, 0, NAME))
    assert decode_batch(payload, 0, NAME, role="second") is not first
    assert decode_unchecked(bytes(bytearray(payload)), 0, NAME, role="second") is first
    again = decode_unchecked(payload, 0, NAME, role="second")
    assert again is not first and again.equals(first)
    assert len(MEMO) == 0
    first = decode_unchecked(payload, 0, NAME, role="first")
    meta_len = struct.unpack_from("<i", payload, 4)[0]
    rejected = 0
    for at in range(8 + meta_len, len(payload) - 4, 4):
        bad = payload[:at] + struct.pack("<i", 10**8) + payload[at + 4 :]
        try:
            assert decode_unchecked(bad, 0, NAME, role="second") is not first
        except FormatError:
            rejected += 1
    assert rejected > 0


def test_bytes_that_differ_are_decoded_and_rejected_afresh() -> None:
    payload = _plain_batch_payload()
    decode_batch(payload, 0, NAME, role="first")  # accepted, memoized
    meta_len = struct.unpack_from("<i", payload, 4)[0]
    rejected = 0
    for at in range(8 + meta_len, len(payload) - 4, 4):
        bad = payload[:at] + struct.pack("<i", 10**8) + payload[at + 4 :]
        try:
            decode_batch(bad, 0, NAME, role="second")
        except FormatError:
            rejected += 1
    assert rejected > 0
    trailer = payload_of(DATA, trailer_frames(DATA)[0])
    parse_trailer(trailer, 0, NAME, 2, role="first")
    bad = bytearray(trailer)
    bad[0] ^= 1  # first_offset: no longer in the index
    with pytest.raises(FormatError):
        parse_trailer(bytes(bad), 0, NAME, 2, role="second")


def test_the_memo_is_bounded() -> None:
    memo = SecondReadMemo(max_payload=10, max_bytes=25)
    assert memo.keeps(b"x" * 10, "first") and not memo.keeps(b"x" * 10, None)
    assert not memo.keeps(b"x" * 11, "first") and not memo.keeps(bytearray(1), "first")
    for i in range(5):
        memo.put(i, str(i), 10)
    assert len(memo) == 2 and memo.take(0) is None and memo.take(4) == "4"
    assert memo.take(4) is None


def test_a_pair_of_readers_reads_the_same_as_one_and_leaves_the_memo_empty() -> None:
    MEMO.clear()
    alone = stream_all(DATA, len(DATA))
    batches = {}
    for role in ("first", "second"):
        r = StreamReader(io.BytesIO(DATA), object_name=NAME, size=len(DATA), role=role)
        batches[role] = [b for section in r.sections() for b in section.batches()]
        assert r.footer == alone
    assert batches["first"] and all(
        a.equals(b) for a, b in zip(batches["first"], batches["second"], strict=True)
    )
    assert len(MEMO) == 0


def test_a_pair_of_readers_of_shared_blocks_takes_each_blocks_table_once() -> None:
    """The second pointer takes a shared block's parsed table from the first; a third
    reader of the same bytes finds nothing left. (The first leaves no footer entries: a
    job's second pointer leaves the footer's check to its first, ``FileChecks``.)"""
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name=NAME, share_below=4000, block_bytes=4000)
    for p in range(60):
        recs = [Record(p * 10 + i, 1_700_000_000_000, b"k%d" % i, b"v" * 50, ()) for i in range(5)]
        writer.write_section("t", p, [records_to_batch(recs)])
    writer.finish()
    data = sink.getvalue()
    MEMO.clear()
    for role in ("first", "second"):
        r = StreamReader(
            io.BytesIO(data), object_name=NAME, size=len(data), keep_footer=False, role=role
        )
        blocks = sum(1 for unit in r.units() if isinstance(unit, SharedRun))
        if role == "first":
            assert blocks > 1 and len(MEMO) == blocks  # a table each
    assert len(MEMO) == 0


def test_pointers_keep_no_footer_but_still_check_it() -> None:
    reader = StreamReader(io.BytesIO(DATA), object_name=NAME, size=len(DATA), keep_footer=False)
    for section in reader.sections():
        section.skip()
    assert reader.footer is None and reader.footer_crc is not None
    frame_at = frames(DATA)[-1][0]
    payload = bytearray(payload_of(DATA, frame_at))
    struct.pack_into("<q", payload, len(payload) - 16, 1_700_000_000_999)  # a max timestamp
    bad = with_payload(DATA, frame_at, bytes(payload))

    def stream() -> None:
        r = StreamReader(io.BytesIO(bad), object_name=NAME, size=len(bad), keep_footer=False)
        for section in r.sections():
            section.skip()

    assert "footer entry 2" in format_error(stream, len(bad)).reason


def test_a_footer_entry_of_a_shared_section_that_disagrees_names_its_blocks_entries() -> None:
    """A shared block's sections are checked against the footer as one unit: an entry
    that disagrees (a max timestamp changed under a valid CRC) fails the stream, naming
    the range of its block's entries, whether the reader keeps the footer or not."""
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name=NAME, share_below=4000, block_bytes=4000)
    for p in range(40):
        recs = [Record(p * 10 + i, 1_700_000_000_000, b"k%d" % i, b"v" * 50, ()) for i in range(5)]
        writer.write_section("t", p, [records_to_batch(recs)])
    meta = writer.finish()
    data = sink.getvalue()
    positions = [s.position for s in meta.sections]
    k = 17  # inside the second block or later
    block = [i for i, at in enumerate(positions) if at == positions[k]]
    assert len(block) > 1 and block[0] < k
    tail_length, _, _ = parse_tail(data[-FILE_TAIL.size :], len(data) - FILE_TAIL.size, NAME)
    frame_at = len(data) - FILE_TAIL.size - tail_length  # the footer frame
    payload = bytearray(payload_of(data, frame_at))
    entry = 2 + len(b"t") + 84  # topic length, topic, the fixed fields
    struct.pack_into("<q", payload, 8 + k * entry + 3 + 20 + 8 * 6, 1_700_000_000_999)
    bad = with_payload(data, frame_at, bytes(payload))
    for keep in (False, True):
        r = StreamReader(io.BytesIO(bad), object_name=NAME, size=len(bad), keep_footer=keep)
        with pytest.raises(FormatError, match=rf"footer entries {block[0]}\.\.{block[-1]} "):
            for section in r.sections():
                section.skip()


def test_a_footer_equal_to_the_sections_streamed_is_not_parsed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's pointers compare the footer with the encoding of the sections they streamed
    and parse it only when it differs (to name the entry that does)."""
    from compactor.fileformat import reader as reader_module

    parsed: list[int] = []
    real = reader_module.parse_footer

    def counting(*args: object, **kwargs: object) -> object:
        parsed.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader_module, "parse_footer", counting)
    for keep in (False, True):
        r = StreamReader(io.BytesIO(DATA), object_name=NAME, size=len(DATA), keep_footer=keep)
        for section in r.sections():
            section.skip()
    assert parsed == [1]  # only for the reader that keeps the footer
    frame_at = frames(DATA)[-1][0]
    payload = bytearray(payload_of(DATA, frame_at))
    struct.pack_into("<q", payload, len(payload) - 16, 1_700_000_000_999)
    bad = with_payload(DATA, frame_at, bytes(payload))
    r = StreamReader(io.BytesIO(bad), object_name=NAME, size=len(bad), keep_footer=False)
    with pytest.raises(FormatError, match="footer entry 2"):
        for section in r.sections():
            section.skip()
    assert parsed == [1, 1]
