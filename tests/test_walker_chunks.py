"""The chunk-fed walk (``fileformat._walk.Walker``) against the whole-object walk
(``_walk.walk``), which tests/test_walk_v3.py holds to today's stream reader.

A Walker is fed one version-3 object's bytes after its file header, chunk by chunk, as
the reader's read-ahead will feed it (``fed``), and must report what ``walk`` finds over
the same bytes after a valid version-3 header (Python reads and checks the header
itself): on a valid file, the same units, frame by frame, with the same payloads; on a
faulty one, the same first problem, at the same position and in the same words, as its
last event. Except where ``walk``'s problem is one of the checks the Walker leaves to
Python (the section order, a section table's count and layout): then the Walker must
report nothing before it. The faults are tests/test_walk_v3.py's (each byte of
tests/test_job_corruption_v3.py's input flipped, each cut, the crafted ones), each under
several chunkings: the whole object in one feed, 7-byte chunks, chunks of random sizes,
and chunks small beside a ``long`` of 64 bytes, so that a long batch's or block's payload
is left to the caller (``Walker.payload``).

A stream that ends before the object's size (the bytes cut, the size the whole
object's) is the reader's truncated read, checked against today's Python reader's words.
"""

from __future__ import annotations

import io
import itertools
import math
import random
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import FormatError, _walk
from compactor.fileformat.block import encode_section_table
from compactor.fileformat.framing import (
    FILE_HEADER,
    FRAME_HEADER,
    MAGIC,
    SHARED_VERSION,
    U32,
    describe_tag,
    encode_frame,
)
from compactor.fileformat.reader import SharedRun, StreamReader
from tests.test_job_corruption_v3 import GOOD, PROTECTED, STRIDE, _boundaries, flipped
from tests.test_shared_blocks import BLOCK, block_parts, frames_of
from tests.test_walk_v3 import (
    NAME,
    SECTION_HEADERS,
    VALID,
    _pieces,
    _table_file,
    crafted,
)

START = FILE_HEADER.size
HEADER = FILE_HEADER.pack(MAGIC, SHARED_VERSION, 0)
LONG = 64 << 10
"""The reader's ``long`` (reader.READ_AHEAD)."""
SMALL_LONG = 64
"""A ``long`` most of the corpus's batch and block payloads are over."""

Chunks = Iterator[int]
"""The sizes of the chunks a source gives, one after another."""


def whole() -> Chunks:
    return itertools.repeat(1 << 30)


def sized(n: int) -> Chunks:
    return itertools.repeat(n)


def randomly(seed: object, top: int = 70_000) -> Chunks:
    """Sizes 1..top, uniform in their logarithm: most chunks cut a frame of this corpus's
    (a few KiB), some hold it whole."""
    rng = random.Random(zlib.crc32(repr(seed).encode()))
    while True:
        yield int(math.exp(rng.uniform(0, math.log(top + 1))))


def fed(
    data: bytes, chunks: Chunks, *, size: int | None = None, long: int = LONG
) -> list[tuple[Any, ...]]:
    """The events of a Walker over ``data`` after its file header, fed as the reader will
    feed it. The object has ``size`` bytes (by default ``data``'s; more: the source ends
    early). Each feed holds the bytes the last one left, and new ones up to the next
    chunk's size or the walker's ``want``, whichever is larger, never past the object;
    ``eof`` only once the source has no more. A payload the walker leaves to its caller
    (``want`` < 0) is read (a memoryview of exactly its bytes) and handed to ``payload``;
    a source that ends inside it is the caller's truncated read."""
    size = len(data) if size is None else size
    walker = _walk.Walker(NAME, size, START, long)
    assert walker.position == START and walker.object_name == NAME
    events: list[tuple[Any, ...]] = []
    owners: list[object] = []  # the objects fed and given; a payload given is held as it is
    held = b""  # what the last feed left: the object's bytes from walker.position
    taken = START  # data's next byte to give
    want = 0
    while True:
        at = walker.position
        assert taken - len(held) == at
        target = min(max(want, next(chunks)), size - at)
        assert target > len(held) or target == 0
        new = data[taken : taken + target - len(held)]
        taken += len(new)
        held += new
        eof = len(held) < target
        consumed, got, want = walker.feed(held, eof)
        owners.append(held)
        events += got
        assert 0 <= consumed <= len(held) and walker.position == at + consumed
        held = held[consumed:]
        assert not eof or want == 0  # with all the bytes there will be, the walk ends
        if want < 0:
            n = -want
            assert n > len(held)  # a frame held whole is walked, not left to the caller
            tag = data[walker.position - FRAME_HEADER.size :][:4]
            assert tag in (b"BTCH", b"SBLK")  # only a batch's or a block's payload
            view = memoryview(held + data[taken : taken + n - len(held)])
            taken += len(view) - len(held)
            held = b""
            if len(view) < n:  # the source ends inside it: _Input.read's words
                words = f"truncated {describe_tag(tag)} frame payload: the object ends after"
                reason = f"{words} {len(view)} of {n}"
                events.append(("error", walker.position, reason + " bytes"))
                return events
            got, want = walker.payload(view)
            owners.append(view)
            assert all(e[3] is view for e in got if e[0] == "batch")
            events += got
            # With no bytes held, it cannot walk on: it asks for more, or is over.
            assert want >= 0 and (want == 0 or walker.position == at + consumed + n)
        if want == 0:
            assert walker.feed(b"", False) == (0, [], 0)
            payloads = [e[3] if e[0] == "batch" else e[2] for e in events if e[0] in KEPT]
            assert all(type(p) is bytes or any(p is o for o in owners) for p in payloads)
            return events
        # It asks for the next item only, never past the object's end, and cannot walk on.
        assert len(held) < want <= size - walker.position


KEPT = ("batch", "block")
"""The events whose payloads are not copied: a view of the bytes fed, or the view given."""


def plain(events: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Events with their payloads as bytes, to compare."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e[0] == "batch":
            out.append((*e[:3], bytes(e[3])))
        elif e[0] == "block":
            out.append((e[0], e[1], bytes(e[2]), *e[3:]))
        else:
            out.append(e)
    return out


def events_of(data: bytes, units: list[Any]) -> list[tuple[Any, ...]]:
    """``walk``'s units of ``data`` as a Walker's events: each section's header, batches and
    trailer, each block, then the footer, with their payloads from ``data``."""
    out: list[tuple[Any, ...]] = []
    end = START
    for unit in units:
        if unit[0] == "section":
            _, topic, partition, position, length, batches, trailer_at, trailer_length = unit
            out.append(("section", position, topic, partition))
            for frame, at, n in batches:
                (crc,) = U32.unpack_from(data, frame + 8)
                out.append(("batch", frame, crc, data[at : at + n]))
            trailer = data[trailer_at : trailer_at + trailer_length]
            out.append(("trailer", trailer_at - FRAME_HEADER.size, trailer_length, trailer))
        else:
            _, position, length, batch_at, batch_length, table_at, table_length = unit
            batch = data[batch_at : batch_at + batch_length]
            table = data[table_at : table_at + table_length]
            out.append(
                ("block", position, batch, table_at - FRAME_HEADER.size, table_length, table)
            )
        end = position + length
    tag, length, crc = FRAME_HEADER.unpack_from(data, end)
    assert tag == b"FOOT"
    payload = data[end + FRAME_HEADER.size : end + FRAME_HEADER.size + length]
    out.append(("footer", end, length, crc, payload))
    return out


LEFT_TO_PYTHON = ("is out of order", "section table claims", "truncated section table count")
"""``walk``'s words for the checks a Walker leaves to Python (the section order and a
table's count), besides its declines of a table not laid out as keys and trailers."""


def check(
    data: bytes, chunks: Chunks, long: int = LONG, unfaulted: list[tuple[Any, ...]] | None = None
) -> str:
    """That a Walker over ``data`` after its header, fed in ``chunks``, reports what
    ``walk`` finds after a valid version-3 header; ``walk``'s verdict. ``data`` a fault of
    a file whose events are ``unfaulted``: the events before its error are theirs."""
    assert len(data) >= START
    reference = HEADER + data[START:]
    got = _walk.walk(reference, NAME)
    events = fed(data, chunks, long=long)
    errors = [i for i, e in enumerate(events) if e[0] == "error"]
    assert errors in ([], [len(events) - 1]), events
    if errors and unfaulted is not None:
        assert plain(events[:-1]) == unfaulted[: len(events) - 1]
    if got[0] == "ok":
        assert plain(events) == events_of(reference, got[1])
        return "ok"
    if got[0] == "error" and not any(words in got[2] for words in LEFT_TO_PYTHON):
        assert events[-1] == got, (events[-1], got)
        return "error"
    # A check left to Python, at `at`: nothing the Walker reports comes before it.
    if got[0] == "error":
        at = got[1]
    else:
        found = re.search(r"section table at byte (\d+) ", got[1])
        assert found is not None, got
        at = int(found[1])
    assert not errors or events[-1][1] >= at, (events[-1], got)
    return "left"


CHUNKINGS: dict[str, Callable[[object], tuple[Chunks, int]]] = {
    "whole": lambda seed: (whole(), LONG),
    "random": lambda seed: (randomly(seed), LONG),
    "7 bytes": lambda seed: (sized(7), LONG),
    "long 64": lambda seed: (randomly(seed, 2000), SMALL_LONG),
}
"""How a case's bytes are fed: (chunk sizes, ``long``) for a case's seed."""


def check_all(
    cases: dict[str, bytes], chunking: str, unfaulted: list[tuple[Any, ...]] | None = None
) -> dict[str, int]:
    """``check`` of each case; how many ended in each verdict."""
    verdicts: dict[str, int] = {}
    for name, data in cases.items():
        chunks, long = CHUNKINGS[chunking](name)
        try:
            verdict = check(data, chunks, long, unfaulted)
        except AssertionError as e:
            raise AssertionError(f"{name}, {chunking}: {e}") from e
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return verdicts


FLIPS = {
    f"flip {pos}": flipped(pos)
    for pos in range(len(GOOD))
    if pos not in PROTECTED or pos % STRIDE == 0
}
"""tests/test_walk_v3.py's flips: every byte outside a frame's CRC field and payload,
every STRIDE-th inside one."""
GOOD_EVENTS = events_of(GOOD, _walk.walk(GOOD, NAME)[1])
CUT_AT = sorted(_boundaries() | set(range(0, len(GOOD), STRIDE)))
CUTS = {f"cut {n}": GOOD[:n] for n in CUT_AT if n >= START}
"""tests/test_walk_v3.py's cuts, but those inside the file header (Python's to read)."""


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", VALID)
def test_a_valid_file_walks_to_walks_units(name: str, chunking: str) -> None:
    assert check_all({name: VALID[name]}, chunking) == {"ok": 1}


@pytest.mark.parametrize("name", VALID)
def test_a_valid_file_fed_a_byte_at_a_time(name: str) -> None:
    assert check(VALID[name], sized(1)) == "ok"
    assert check(VALID[name], sized(1), SMALL_LONG) == "ok"


@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_every_byte_flipped_is_walks_error(chunking: str) -> None:
    verdicts = check_all(FLIPS, chunking, GOOD_EVENTS)
    # A flip in the file header is Python's to find (the walk after it is GOOD's).
    assert verdicts == {"error": len(FLIPS) - START, "ok": START}, verdicts


@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_every_cut_of_the_object_is_walks_error(chunking: str) -> None:
    """The object's size is the cut's: a read runs past its end."""
    assert check_all(CUTS, chunking, GOOD_EVENTS) == {"error": len(CUTS)}


def reader_error(data: bytes, size: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Today's Python reader's error over ``data``, of an object of ``size`` bytes (its
    compiled path, if any, off: ``frame_walk.COMPILED_PATH_ENV``)."""
    monkeypatch.setenv("COMPACTOR_COMPILED_PATH", "0")
    reader = StreamReader(
        io.BytesIO(data), object_name=NAME, size=size, keep_footer=False, file_checks="all"
    )
    try:
        for unit in reader.units():
            if not isinstance(unit, SharedRun):
                unit.skip()
    except FormatError as e:
        return e.position, e.reason
    raise AssertionError("the reader found no error")


@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_a_source_that_ends_early_is_the_readers_truncated_read(
    chunking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The object's size is the whole file's, its bytes cut (``eof``): the reader's words
    for the read that comes short, header, payload, end or tail."""
    for name, data in CUTS.items():
        chunks, long = CHUNKINGS[chunking](name)
        events = fed(data, chunks, size=len(GOOD), long=long)
        expected = ("error", *reader_error(data, len(GOOD), monkeypatch))
        assert "truncated" in expected[2]
        assert [e for e in events if e[0] == "error"] == [expected], (name, chunking)
        assert events[-1] == expected
        assert plain(events[:-1]) == GOOD_EVENTS[: len(events) - 1]


def _frame(tag: bytes, index: int = 0) -> tuple[int, int]:
    """The position and payload length of GOOD's index-th frame tagged ``tag``."""
    at, _, length = [f for f in frames_of(GOOD) if f[1] == tag][index]
    return at, length


def truncated(what: str, at: int, have: int, n: int) -> tuple[str, int, str]:
    return ("error", at, f"truncated {what}: the object ends after {have} of {n} bytes")


def _truncations() -> dict[str, tuple[int, tuple[str, int, str]]]:
    """Cuts of GOOD inside each kind of read, and the error each gives: (cut, error)."""
    batch, batch_length = _frame(b"BTCH")
    block, block_length = _frame(b"SBLK", 1)
    section, _ = _frame(b"SHDR")
    table, table_length = _frame(b"STBL")
    trailer, trailer_length = _frame(b"STRL")
    footer, footer_length = _frame(b"FOOT")
    send = trailer + FRAME_HEADER.size + trailer_length
    bend = table + FRAME_HEADER.size + table_length
    tail = footer + FRAME_HEADER.size + footer_length
    payload = batch + FRAME_HEADER.size
    return {
        "a section or footer header": (
            section + 5,
            truncated("section or footer frame header", section, 5, 12),
        ),
        "a batch or trailer header": (
            batch + 11,
            truncated("batch or trailer frame header", batch, 11, 12),
        ),
        "a table header": (table + 1, truncated("section table frame header", table, 1, 12)),
        "a batch payload": (
            payload + 10,
            truncated("'BTCH' frame payload", payload, 10, batch_length),
        ),
        "a batch payload's first byte": (
            payload,
            truncated("'BTCH' frame payload", payload, 0, batch_length),
        ),
        "a block payload": (
            block + FRAME_HEADER.size + block_length - 1,
            truncated("'SBLK' frame payload", block + 12, block_length - 1, block_length),
        ),
        "a section end": (send + 3, truncated("section end", send, 3, 8)),
        "a block end": (bend + 7, truncated("block end", bend, 7, 8)),
        "the tail": (tail + 19, truncated("file tail", tail, 19, 20)),
        "the tail's first byte": (tail, truncated("file tail", tail, 0, 20)),
    }


TRUNCATIONS = _truncations()


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", TRUNCATIONS)
def test_the_words_of_a_truncated_read(
    name: str, chunking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut, expected = TRUNCATIONS[name]
    chunks, long = CHUNKINGS[chunking](name)
    assert fed(GOOD[:cut], chunks, size=len(GOOD), long=long)[-1] == expected
    assert ("error", *reader_error(GOOD[:cut], len(GOOD), monkeypatch)) == expected


def _crafted() -> dict[str, bytes]:
    """tests/test_walk_v3.py's crafted faults: tags that need escapes, units out of order,
    a section without batches, bytes after the tail; section headers that do not parse;
    tables whose count cannot fit, or not laid out as keys and trailers in order."""
    out = dict(crafted())
    header, block1, section, block2, footer = _pieces(GOOD).values()
    shdr_end = frames_of(section, 0)[1][0]
    for name, payload in SECTION_HEADERS.items():
        shdr = encode_frame(b"SHDR", payload)
        rest = section[shdr_end:] + block2 + footer
        out[f"section header: {name}"] = header + block1 + shdr + rest
    entries = block_parts(BLOCK).entries
    table = encode_section_table(entries)
    for count in (0, 2**32 - 1, len(table)):
        out[f"table count {count}"] = _table_file(count.to_bytes(4, "little") + table[4:])
    out["table of 2 bytes"] = _table_file(b"\1\0")
    out["table out of order"] = _table_file(encode_section_table([entries[1], *entries[::2]]))
    out["table with a byte after"] = _table_file(table + b"\0")
    return out


CRAFTED = _crafted()
LEFT = {"section twice", "block twice", "block after its successor", "blocks swapped"}
LEFT |= {k for k in CRAFTED if k.startswith("table")}
LEFT |= {f"section header: {k}" for k in ("a key before the block's", "the block's last key")}
"""The crafted faults whose problem is one the Walker leaves to Python."""


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_fault_under_every_chunking(name: str) -> None:
    verdict = "left" if name in LEFT else "error"
    for chunking in CHUNKINGS:
        assert check_all({name: CRAFTED[name]}, chunking) == {verdict: 1}


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(VALID)),
    sizes=st.lists(st.integers(1, 9000), min_size=1, max_size=40),
    long=st.sampled_from([0, 1, SMALL_LONG, 1000, LONG]),
)
def test_any_chunking_of_a_valid_file(name: str, sizes: list[int], long: int) -> None:
    assert check(VALID[name], itertools.cycle(sizes), long) == "ok"


@settings(max_examples=100, deadline=None)
@given(
    cut=st.integers(START, len(GOOD) - 1),
    sizes=st.lists(st.integers(1, 9000), min_size=1, max_size=40),
    long=st.sampled_from([0, SMALL_LONG, LONG]),
)
def test_any_chunking_of_a_source_that_ends_early(cut: int, sizes: list[int], long: int) -> None:
    events = fed(GOOD[:cut], itertools.cycle(sizes), size=len(GOOD), long=long)
    at_once = fed(GOOD[:cut], whole(), size=len(GOOD))
    assert plain(events) == plain(at_once)
    assert events[-1][0] == "error" and "truncated" in events[-1][2]


def _long_batch() -> tuple[int, int]:
    """GOOD's first batch frame: its position and payload length (over SMALL_LONG)."""
    at, length = _frame(b"BTCH")
    assert length > SMALL_LONG
    return at, length


def _pending(long: int = SMALL_LONG) -> tuple[_walk.Walker, int, int]:
    """A Walker fed GOOD up to a few bytes into its first batch's payload: (the walker,
    the batch's position, its payload length), the payload pending."""
    at, length = _long_batch()
    walker = _walk.Walker(NAME, len(GOOD), START, long)
    consumed, events, want = walker.feed(GOOD[START : at + FRAME_HEADER.size + 5], False)
    assert [e[0] for e in events] == ["block", "section"]
    assert consumed == at + FRAME_HEADER.size - START and want == -length
    assert walker.position == at + FRAME_HEADER.size
    return walker, at, length


def test_a_long_payload_not_held_is_left_to_the_caller() -> None:
    walker, at, length = _pending()
    payload = at + FRAME_HEADER.size
    view = memoryview(GOOD)[payload : payload + length]
    events, want = walker.payload(view)
    assert events == [("batch", at, U32.unpack_from(GOOD, at + 8)[0], view)]
    assert events[0][3] is view
    assert want == FRAME_HEADER.size and walker.position == payload + length


def test_a_long_frame_held_whole_is_walked_from_the_chunk() -> None:
    for long in (0, SMALL_LONG):
        walker = _walk.Walker(NAME, len(GOOD), START, long)
        consumed, events, want = walker.feed(GOOD[START:], False)
        assert (consumed, want) == (len(GOOD) - START, 0)
        assert plain(events) == events_of(GOOD, _walk.walk(GOOD, NAME)[1])


def test_a_short_frame_not_held_waits_for_the_whole_frame() -> None:
    at, length = _long_batch()
    walker = _walk.Walker(NAME, len(GOOD), START, LONG)
    consumed, events, want = walker.feed(GOOD[START : at + FRAME_HEADER.size + 5], False)
    assert consumed == at - START and want == FRAME_HEADER.size + length
    # Fed less than its header, it asks for the header first.
    assert walker.feed(GOOD[at : at + 3], False) == (0, [], FRAME_HEADER.size)
    assert walker.feed(GOOD[at : at + 20], False) == (0, [], FRAME_HEADER.size + length)
    consumed, events, want = walker.feed(GOOD[at : at + FRAME_HEADER.size + length], False)
    assert consumed == FRAME_HEADER.size + length and [e[0] for e in events] == ["batch"]
    assert want == FRAME_HEADER.size


def test_a_long_payloads_crc_is_checked() -> None:
    walker, at, length = _pending()
    payload = bytearray(GOOD[at + FRAME_HEADER.size :][:length])
    payload[-1] ^= 1
    events, want = walker.payload(memoryview(payload))
    assert want == 0 and len(events) == 1
    assert events[0][:2] == ("error", at) and "'BTCH' frame checksum mismatch" in events[0][2]
    assert walker.feed(GOOD, False) == (0, [], 0)


def test_payload_misused() -> None:
    walker = _walk.Walker(NAME, len(GOOD), START, SMALL_LONG)
    with pytest.raises(RuntimeError, match="no payload is pending"):
        walker.payload(b"")
    walker, at, length = _pending()
    payload = GOOD[at + FRAME_HEADER.size :][:length]
    for wrong in (payload[:-1], payload + b"\0", b""):
        with pytest.raises(ValueError, match="pending"):
            walker.payload(wrong)
    with pytest.raises(TypeError):
        walker.payload("text")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="payload is pending"):
        walker.feed(GOOD[walker.position :], False)
    events, want = walker.payload(payload)  # none of that changed its place
    assert [e[0] for e in events] == ["batch"] and events[0][3] is payload and want > 0
    with pytest.raises(RuntimeError, match="no payload is pending"):
        walker.payload(payload)


def test_feeds_after_the_walk_is_over() -> None:
    walker = _walk.Walker(NAME, len(GOOD), START, LONG)
    consumed, events, want = walker.feed(GOOD[START:], False)
    assert events[-1][0] == "footer" and want == 0 and walker.position == len(GOOD)
    assert walker.feed(b"", False) == (0, [], 0)
    assert walker.feed(b"more", True) == (0, [], 0)
    with pytest.raises(RuntimeError, match="no payload is pending"):
        walker.payload(b"")
    faulty = _walk.Walker(NAME, len(GOOD), START, LONG)
    consumed, events, want = faulty.feed(b"SHDX" + GOOD[START + 4 :], False)
    assert (consumed, want) == (0, 0) and [e[0] for e in events] == ["error"]
    assert faulty.feed(GOOD[START:], False) == (0, [], 0)


def test_a_payload_fed_is_a_copy_of_its_bytes() -> None:
    """As the reader's read-ahead gives it: a shared block held ahead holds its own bytes,
    not the chunk it came in, and the second-read memo keeps bytes only."""
    fed_bytes = GOOD[START:]
    for data in (fed_bytes, bytearray(fed_bytes), memoryview(fed_bytes)):
        walker = _walk.Walker(NAME, len(GOOD), START, LONG)
        _, events, _ = walker.feed(data, False)
        batches = [e[3] for e in events if e[0] == "batch"]
        blocks = [e[2] for e in events if e[0] == "block"]
        assert batches and blocks
        assert all(type(p) is bytes for p in batches + blocks)
        assert plain(events) == GOOD_EVENTS[: len(events)]
    # An array of 8-byte items is taken byte by byte too.
    eights = fed_bytes[: len(fed_bytes) // 8 * 8]
    walker = _walk.Walker(NAME, len(GOOD), START, LONG)
    _, events, _ = walker.feed(memoryview(eights).cast("q"), False)
    assert [e[0] for e in events] == ["block", "section", "batch", "batch", "trailer", "block"]
    assert plain(events) == GOOD_EVENTS[: len(events)]


def test_a_block_payload_given_is_held_as_it_is() -> None:
    at, length = _frame(b"SBLK")
    walker = _walk.Walker(NAME, len(GOOD), START, SMALL_LONG)
    consumed, events, want = walker.feed(GOOD[START : START + 20], False)
    assert (consumed, events, want) == (FRAME_HEADER.size, [], -length)
    view = memoryview(bytearray(GOOD[at + FRAME_HEADER.size :][:length]))
    events, want = walker.payload(view)
    assert (events, want) == ([], FRAME_HEADER.size)  # its event waits for its block end
    table_at, table_length = _frame(b"STBL")
    end = table_at + FRAME_HEADER.size + table_length + 8
    consumed, events, want = walker.feed(GOOD[walker.position : end], False)
    assert len(events) == 1 and events[0][0] == "block" and events[0][2] is view
    assert events[0][3:5] == (table_at, table_length)


def test_a_walker_is_made_for_an_object_after_its_header() -> None:
    walker = _walk.Walker(object_name=NAME, size=100, start=16, long=0)
    assert (walker.position, walker.object_name) == (16, NAME)
    with pytest.raises(AttributeError):
        walker.position = 17  # type: ignore[misc]
    for size, start, long in ((10, 16, 0), (-1, 0, 0), (100, -1, 0), (100, 16, -1)):
        with pytest.raises(ValueError):
            _walk.Walker(NAME, size, start, long)
    with pytest.raises(TypeError):
        _walk.Walker(b"name", 100, 16, 0)  # type: ignore[arg-type]
    # An object that ends with its header: the first frame's header runs past it.
    walker = _walk.Walker(NAME, 16, 16, LONG)
    reason = "section or footer frame header of 12 bytes runs past the end of the 16-byte object"
    assert walker.feed(b"", False) == (0, [("error", 16, reason)], 0)
