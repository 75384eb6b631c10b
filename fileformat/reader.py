"""Reads files front to back from a non-seekable byte stream (one sequential GET).

Every frame's CRC is checked before its payload is interpreted; nothing longer than the
frame cap (or the remaining object, when its size is known) is ever requested, and a long
frame is requested in bounded chunks, so a corrupt length cannot make the reader allocate
more than the bytes that actually arrive.

The ranged (random access) readers live in ``fileformat.ranged`` and are re-exported here.
"""

from __future__ import annotations

import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

import pyarrow as pa
import pyarrow.ipc

from compactor.fileformat import _sections
from compactor.fileformat.batches import BatchStats, int64_view
from compactor.fileformat.bitmap import OffsetSet, OffsetSetBuilder
from compactor.fileformat.block import (
    Block,
    check_block_end,
    entry_meta,
    parse_section_table,
)
from compactor.fileformat.errors import FormatError
from compactor.fileformat.field_decode import decode_fields, field_indices
from compactor.fileformat.footer import encode_footer_entry, parse_footer, parse_tail
from compactor.fileformat.frame_walk import FrameWalk, compiled_path
from compactor.fileformat.framing import (
    FILE_HEADER,
    FILE_TAIL,
    FORMAT_VERSION,
    FRAME_HEADER,
    SECTION_END,
    SHARED_VERSION,
    TAG_BATCH,
    TAG_FOOTER,
    TAG_SECTION_HEADER,
    TAG_SECTION_TABLE,
    TAG_SHARED_BATCH,
    TAG_TRAILER,
    U32,
    Cursor,
    EncodedFrame,
    Payload,
    check_file_header,
    check_frame_length,
    describe_tag,
    layout_version,
    verify_frame,
)
from compactor.fileformat.ipc import decode_measured
from compactor.fileformat.meta import FileMeta, SectionMeta, section_key
from compactor.fileformat.ranged import read_footer, read_section, read_section_offsets
from compactor.fileformat.read_frames import keep_frame
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.second_read import Role
from compactor.fileformat.section import (
    encode_topic,
    is_dense_bitmap,
    parse_section_end,
    parse_section_header,
    parse_trailer,
    parse_trailer_head,
)

if TYPE_CHECKING:
    from compactor.fileformat._sections import FramedTrailer
    from compactor.fileformat.frame_walk import InSectionEvent, TopEvent

__all__ = [
    "SectionReader",
    "Source",
    "StreamReader",
    "decode_fields",
    "read_footer",
    "read_section",
    "read_section_offsets",
    "verify_stream",
]

READ_AHEAD = 64 << 10
"""Reads shorter than this are served from a buffer read ahead of them (``_Input``)."""
READ_AHEAD_MAPPING = 8 << 10
"""The read-ahead of a source once it has given a long payload mapped (``MappingSource``;
an S3 stream, which gives none, keeps ``READ_AHEAD``). Such a payload usually starts
within the read-ahead, just after its frame's header, and what the read-ahead holds of it
was copied for nothing; with 64 KiB a payload, mapping gained nothing at ingest-64p
(bench/README.md, "Long payloads mapped, not copied")."""
READ_CHUNK = 4 << 20
"""Longest single ``read`` issued to the source when the object's size is unknown."""


class Source(Protocol):
    """A sequential byte stream: ``read(n)`` returns exactly n bytes, and ``readinto(view)``
    fills all of ``view`` and returns its length, unless the stream ends first."""

    def read(self, n: int, /) -> bytes: ...

    def readinto(self, view: memoryview, /) -> int: ...


@runtime_checkable
class MappingSource(Source, Protocol):
    """A ``Source`` that may give its bytes without a copy
    (``objectstore.ObjectStream.read_mapped``)."""

    def read_mapped(self, n: int, back: int, /) -> memoryview | None: ...


class _Input:
    """Sequential reads that track the absolute position; shortfalls are FormatErrors.

    Small reads are served from a read-ahead of ``READ_AHEAD`` bytes (never past the
    object's size, when known): a section of a few records is a handful of frames, and
    each read of the source costs more than the bytes it returns. A long read that starts
    in the read-ahead (a frame's payload after its header), of an object whose size is
    known, is one new bytes object that the source reads straight into after the
    read-ahead's part (``_sections.joined_read``): joining the two parts would copy the
    payload once more. A long batch payload (``batch_payload``) of a source that can map
    its bytes (``MappingSource``) is not copied at all, and once one is, the source is
    read ahead by ``READ_AHEAD_MAPPING``, not ``READ_AHEAD``."""

    __slots__ = (
        "source",
        "object_name",
        "size",
        "position",
        "_ahead",
        "_at",
        "_mapping",
        "_read_ahead",
    )

    def __init__(self, source: Source, object_name: str, size: int | None) -> None:
        self.source = source
        self.object_name = object_name
        self.size = size
        self.position = 0
        self._ahead = b""
        self._at = 0  # the next unread byte of _ahead
        self._mapping = source if isinstance(source, MappingSource) else None
        self._read_ahead = READ_AHEAD

    def error(self, at: int, reason: str) -> FormatError:
        return FormatError(self.object_name, at, reason)

    def read(self, n: int, what: str) -> bytes:
        at = self.position
        if self.size is not None and at + n > self.size:
            raise self.error(
                at, f"{what} of {n} bytes runs past the end of the {self.size}-byte object"
            )
        ahead = len(self._ahead) - self._at
        if n <= ahead:
            data = self._ahead[self._at : self._at + n]
            self._at += n
        elif ahead and n > READ_AHEAD and self.size is not None:
            rest = memoryview(self._ahead)[self._at :]
            self._ahead, self._at = b"", 0
            data = _sections.joined_read(rest, n, self.source.readinto)
        else:
            head = self._ahead[self._at :]
            self._ahead, self._at = b"", 0
            data = head + self._read_source(n - len(head), at + len(head))
        if len(data) != n:
            if len(data) > n:
                raise ValueError(f"source returned {len(data)} bytes for read({n})")
            raise self.error(
                at, f"truncated {what}: the object ends after {len(data)} of {n} bytes"
            )
        self.position += n
        return data

    def _read_source(self, n: int, at: int) -> bytes:
        """``n`` bytes (fewer if the object ends) from the source, which is at ``at``;
        a short read reads ahead."""
        if n < self._read_ahead:
            ahead = self._read_ahead
            want = ahead if self.size is None else min(ahead, self.size - at)
            chunk = self.source.read(max(n, want))
            if len(chunk) > n:
                self._ahead, self._at = chunk, n
                return chunk[:n]
            return chunk
        if n <= READ_CHUNK or self.size is not None:
            return self.source.read(n)
        # The length may be corrupt: only ask for more once the earlier bytes arrived.
        chunks: list[bytes] = []
        got = 0
        while got < n:
            want = min(READ_CHUNK, n - got)
            chunk = self.source.read(want)
            chunks.append(chunk)
            got += len(chunk)
            if len(chunk) < want:
                break
        return b"".join(chunks)

    def chunk(self, want: int) -> tuple[bytes, bool]:
        """The bytes held unread, then more from the source until there are at least
        ``want`` (at least the read-ahead, never past the object's size, which must be
        known): the bytes for the next ``feed`` of a compiled walk (``frame_walk``), which
        starts at ``position``; and whether the source ended before the object's size.
        ``consume`` then moves past what the walk took."""
        assert self.size is not None
        held = len(self._ahead) - self._at
        data = self._ahead if self._at == 0 else self._ahead[self._at :]
        eof = False
        if held < want:
            more = min(max(want - held, self._read_ahead), self.size - self.position - held)
            new = self.source.read(more)
            eof = len(new) < more
            data = data + new if held else new
        self._ahead, self._at = data, 0
        return data, eof

    def consume(self, n: int) -> None:
        """Moves past the first ``n`` bytes of the last ``chunk``."""
        self._at += n
        self.position += n

    def long_payload(self, tag: bytes, n: int) -> Payload:
        """The next ``n`` bytes, a long batch payload (the frame header already read):
        mapped where the source can, else read; not checked (its callers, ``batch_payload``
        and the frame walk, check its CRC)."""
        payload = self._mapped(n)
        return self.read(n, f"{describe_tag(tag)} frame payload") if payload is None else payload

    def at_end(self) -> bool:
        """Whether the object has no bytes after those read (asks the source for one)."""
        return self._at == len(self._ahead) and not self.source.read(1)

    def frame_header(self, what: str) -> tuple[bytes, int, int, int]:
        """Reads a frame header: (tag, payload length, crc, frame position); length checked."""
        at = self.position
        tag, length, crc = FRAME_HEADER.unpack(self.read(FRAME_HEADER.size, f"{what} frame header"))
        check_frame_length(tag, length, at, self.object_name)
        if self.size is not None and self.position + length > self.size:
            raise self.error(
                at + 4,
                f"{describe_tag(tag)} frame length {length} runs past the end of the "
                f"{self.size}-byte object",
            )
        return tag, length, crc, at

    def frame_payload(self, tag: bytes, length: int, crc: int, at: int) -> bytes:
        payload = self.read(length, f"{describe_tag(tag)} frame payload")
        verify_frame(tag, length, crc, payload, at, self.object_name)
        return payload

    def batch_payload(self, tag: bytes, length: int, crc: int, at: int) -> Payload:
        """``frame_payload`` of a batch or shared batch frame, whose payload only Arrow
        and compiled code read: one longer than ``READ_AHEAD`` of a source that can map
        it (``MappingSource``) is a read-only view of the source's own bytes."""
        if length <= READ_AHEAD:
            return self.frame_payload(tag, length, crc, at)
        payload = self.long_payload(tag, length)
        verify_frame(tag, length, crc, payload, at, self.object_name)
        return payload

    def _mapped(self, n: int) -> memoryview | None:
        """The next ``n`` bytes from the source's ``read_mapped`` (what is left of the
        read-ahead is let go), or None, the position not moved, where it gives none."""
        if self._mapping is None or self.size is None or self.position + n > self.size:
            return None
        view = self._mapping.read_mapped(n, len(self._ahead) - self._at)
        if view is not None:
            if len(view) != n:
                raise ValueError(f"source mapped {len(view)} bytes for read_mapped({n})")
            self._ahead, self._at = b"", 0
            self.position += n
            self._read_ahead = READ_AHEAD_MAPPING
        return view


FileChecks = Literal["decoded", "all", "elsewhere"]
"""Which of a file's checks that need only its checksummed bytes, not its records, a
stream makes: the footer against the sections streamed, and each shared block's offset
bitmaps against its sections' stats (FORMAT.md 6.4).

- ``"decoded"``: the footer, and a block's bitmaps when its whole batch is decoded (a
  reader on its own).
- ``"all"``: the footer, and every block's bitmaps as its table is read, whatever is
  decoded (a job's phase-1 pointer, which streams every input to its end).
- ``"elsewhere"``: neither; another stream of the same immutable object makes them (a
  job's phase-2 pointer, whose job fails unless phase 1's pointer made them all). Every
  frame's CRC, the tail, the object's end and every batch it decodes against its table
  are still checked.
"""


class StreamReader:
    """Walks a file's sections in order from a sequential stream.

    ``sections()`` yields a ``SectionReader`` per section. Moving on to the next section
    first reads what is left of the current one (checksummed, not decoded). After the last
    section the footer is read and must list exactly the sections streamed; then
    ``footer`` is set (unless ``keep_footer=False``: a job's pointers only need the check,
    not thousands of section entries per input held to its end; a job's two pointers are
    ``role`` "first" and "second", ``fileformat.second_read``). ``file_checks`` says
    which checks of the bytes alone it makes (``FileChecks``: with "elsewhere", not the
    footer's, and ``keep_footer`` must be False). With ``verify=True`` each section's
    offset bitmap is also compared with the offsets its records actually hold
    (``verify_stream`` does this).
    """

    footer: FileMeta | None
    format_version: int | None

    def __init__(
        self,
        source: Source,
        *,
        object_name: str,
        size: int | None = None,
        verify: bool = False,
        keep_footer: bool = True,
        role: Role = None,
        file_checks: FileChecks = "decoded",
    ) -> None:
        if keep_footer and file_checks == "elsewhere":
            raise ValueError("a stream that leaves the footer's check elsewhere cannot keep it")
        self.object_name = object_name
        self.footer = None
        self.footer_crc: int | None = None
        """The footer frame's CRC (the tail's ``footer_crc``), once the footer is read."""
        self.format_version = None
        self._input = _Input(source, object_name, size)
        self._verify = verify
        self._keep_footer = keep_footer
        self._file_checks = file_checks
        self.role = role
        """Its part in a pair of readers of the same bytes (``fileformat.second_read``)."""
        self._started = False
        self._walk: FrameWalk | None = None
        """The compiled walk of its frames, once ``units`` finds it may take one."""

    @property
    def placeable(self) -> bool:
        """Whether its shared sections may be taken by their place in their block: not
        when it verifies, which reads every section through ``batches``."""
        return not self._verify

    def sections(self) -> Iterator[SectionReader]:
        for unit in self.units():
            if isinstance(unit, SharedRun):
                yield from unit.readers()
            else:
                yield unit

    def units(self) -> Iterator[SectionReader | SharedRun]:
        """The file's sections as ``sections()`` gives them, except that the sections of a
        shared block come as one ``SharedRun``: a reader that takes a block's sections by
        their place in it (a job's pointers) makes no object per section. A framed
        section is valid until the next unit is asked for (that reads past its frames); a
        ``SharedRun`` stays valid after (its block's bytes are read and checked), so a
        reader may look at blocks ahead (``SectionMerge.pending_shared``). Either iterator
        can be taken once, and only one."""
        if self._started:
            raise RuntimeError(
                f"{self.object_name}: a stream's sections (or units) can be iterated once"
            )
        self._started = True
        inp = self._input
        name = self.object_name
        self.format_version = check_file_header(
            Cursor(inp.read(FILE_HEADER.size, "file header"), 0, name)
        )
        if self.format_version == SHARED_VERSION and inp.size is not None and compiled_path():
            self._walk = FrameWalk(inp, READ_AHEAD)
        streamed = Streamed()
        previous: tuple[bytes, int] | None = None
        while True:
            event = self._top_event()
            if event[0] == "section":
                _, at, topic, partition = event
                key = section_key(topic, partition)
                if previous is not None and key <= previous:
                    raise FormatError(name, at, f"section {topic}/{partition} is out of order")
                previous = key
                section = SectionReader(self, topic, partition, at, key)
                yield section
                section.skip()
                assert section.meta is not None
                streamed.add(self._footer_entry(section.meta, key[0]), 1)
            elif event[0] == "block":
                _, at, block_payload, table_at, table_length, table = event
                length = table_at + FRAME_HEADER.size + table_length + SECTION_END.size - at
                block, entries = self._block(block_payload, at, table, table_at, length)
                shared = block.sections.entries  # strictly sorted (parse_section_table)
                if previous is not None and shared[0].key <= previous:
                    first = shared[0]
                    raise FormatError(
                        name, at, f"section {first.topic}/{first.partition} is out of order"
                    )
                previous = shared[-1].key
                streamed.add(entries, len(shared))
                yield SharedRun(self, block, at, length)
                del block, shared  # one block held at a time, not this one into the next
            else:
                _, at, length, crc, payload = event
                footer = self._finish(payload, length, crc, at, streamed)
                self.footer = footer if self._keep_footer else None
                self.footer_crc = crc
                return

    def _top_event(self) -> TopEvent:
        """The next unit of the file, or its footer, as the compiled walk gives it
        (``_walk.pyi``): from the walk where it reads this stream, else read and checked
        here the same way: a section header, parsed; a shared block's batch frame, its
        section table and its end (the table's content is the caller's); the footer
        frame, and the tail and the object's end after it (the footer's content is
        ``_finish``'s)."""
        if self._walk is not None:
            return cast("TopEvent", self._walk.next())
        inp = self._input
        name = self.object_name
        tag, length, crc, at = inp.frame_header("section or footer")
        if tag == TAG_SECTION_HEADER:
            payload = inp.frame_payload(tag, length, crc, at)
            topic, partition = parse_section_header(payload, at + FRAME_HEADER.size, name)
            return ("section", at, topic, partition)
        if tag == TAG_FOOTER:
            payload = inp.frame_payload(tag, length, crc, at)
            self._tail(length, crc)
            return ("footer", at, length, crc, payload)
        if tag == TAG_SHARED_BATCH:
            block_payload = inp.batch_payload(tag, length, crc, at)
            assert self.format_version is not None
            if self.format_version >= SHARED_VERSION:
                return ("block", at, block_payload, *self._table())
        raise FormatError(
            name, at, f"expected a section or the footer, found tag {describe_tag(tag)}"
        )

    def _table(self) -> tuple[int, int, bytes]:
        """The section table frame after a shared block's batch frame, and the block's
        end, checked: the table's position, payload length and payload."""
        inp = self._input
        tag, length, crc, table_at = inp.frame_header("section table")
        if tag != TAG_SECTION_TABLE:
            raise FormatError(
                self.object_name,
                table_at,
                f"expected the shared block's section table, found tag {describe_tag(tag)}",
            )
        table = inp.frame_payload(tag, length, crc, table_at)
        end_at = inp.position
        end = inp.read(SECTION_END.size, "block end")
        check_block_end(end, end_at, self.object_name, FRAME_HEADER.size + length)
        return table_at, length, table

    def _section_event(self) -> InSectionEvent:
        """The next frame of a framed section as the compiled walk gives it: a batch, or
        the trailer and the section end after it, checked."""
        if self._walk is not None:
            return cast("InSectionEvent", self._walk.next())
        inp = self._input
        tag, length, crc, at = inp.frame_header("batch or trailer")
        if tag == TAG_BATCH:
            return ("batch", at, crc, inp.batch_payload(tag, length, crc, at))
        if tag == TAG_TRAILER:
            payload = inp.frame_payload(tag, length, crc, at)
            end_at = inp.position
            recorded = parse_section_end(
                inp.read(SECTION_END.size, "section end"), end_at, self.object_name
            )
            if recorded != FRAME_HEADER.size + length:
                raise FormatError(
                    self.object_name,
                    end_at,
                    f"section end records a {recorded}-byte trailer, "
                    f"the trailer frame has {FRAME_HEADER.size + length}",
                )
            return ("trailer", at, length, payload)
        raise FormatError(
            self.object_name,
            at,
            f"expected a batch or trailer frame, found tag {describe_tag(tag)}",
        )

    def _block(
        self, payload: Payload, at: int, table: bytes, table_at: int, length: int
    ) -> tuple[Block, bytes]:
        """The shared block whose ``SBLK`` frame is at ``at`` (``length`` bytes to the end
        of its block end), with its section table checked; the batch is decoded when asked
        for. With it, the footer's entries of its sections, all at once: they are the
        table's, whatever the reader of the sections does (none for a stream that leaves
        the footer's check elsewhere: ``FileChecks``)."""
        role, checks = self.role, self._file_checks
        sections = parse_section_table(table, table_at + FRAME_HEADER.size, self.object_name, role)
        if checks == "all":
            sections.check_bitmaps()
        block = Block(
            payload, at + FRAME_HEADER.size, sections, self.object_name, role, checks == "decoded"
        )
        if checks == "elsewhere":
            return block, b""
        return block, _sections.footer_entries(sections.entries, at, length)

    def _footer_entry(self, meta: SectionMeta, raw_topic: bytes) -> bytes:
        """A framed section's footer entry, for the footer's check (none if made elsewhere)."""
        return b"" if self._file_checks == "elsewhere" else encode_footer_entry(meta, raw_topic)

    def _finish(
        self,
        payload: bytes,
        length: int,
        crc: int,
        at: int,
        streamed: Streamed,
    ) -> FileMeta | None:
        """Checks the footer (the tail after it is checked); the footer's sections, or
        None when they are not kept and the footer is exactly the encoding of the sections
        streamed (a version-2 or later footer, as ``encode_footer`` writes it)."""
        name = self.object_name
        assert self.format_version is not None
        head = U32.pack(streamed.sections)
        if self.format_version >= SHARED_VERSION:
            head = U32.pack(self.format_version) + head
        canonical = self._file_checks == "elsewhere" or (
            not self._keep_footer
            and self.format_version >= FORMAT_VERSION
            and payload[: len(head)] == head
            and streamed.encoded_in(payload, len(head))
        )
        if canonical:
            sections: tuple[SectionMeta, ...] = ()
        else:
            sections = parse_footer(payload, at + FRAME_HEADER.size, name, at, self.format_version)
        if canonical:
            return None
        if len(sections) != streamed.sections:
            raise FormatError(
                name,
                at,
                f"footer lists {len(sections)} sections, the file has {streamed.sections}",
            )
        if (unit := streamed.first_disagreeing(sections)) is not None:
            i, count = unit
            raise FormatError(
                name,
                at,
                f"footer entry {i} {sections[i]} disagrees with the section streamed"
                if count == 1
                else f"footer entries {i}..{i + count - 1} disagree with the shared block's "
                "sections streamed",
            )
        end = at + FRAME_HEADER.size + length + FILE_TAIL.size
        return FileMeta(sections, end, self.format_version)

    def _tail(self, footer_length: int, footer_crc: int) -> None:
        """Reads and checks the tail after the footer frame, and the object's end there."""
        inp = self._input
        name = self.object_name
        tail_at = inp.position
        tail_length, tail_crc, version = parse_tail(
            inp.read(FILE_TAIL.size, "file tail"), tail_at, name
        )
        if tail_length != FRAME_HEADER.size + footer_length or tail_crc != footer_crc:
            raise FormatError(name, tail_at, "file tail does not describe the footer frame")
        if version != self.format_version:
            raise FormatError(
                name, tail_at + 8, f"tail says version {version}, header {self.format_version}"
            )
        if inp.size is None:
            if not inp.at_end():
                raise FormatError(name, inp.position, "bytes after the file tail")
        elif inp.position != inp.size:
            raise FormatError(name, inp.position, f"file ends before the {inp.size}-byte object")


class Streamed:
    """The footer entries of the units a stream has read (a framed section, or a shared
    block's sections), for its footer's check: each unit's encoded entries as one hash,
    their length and how many sections it has. 24 bytes a unit, rather than a SectionMeta
    kept per section: a job streams every input twice, and an input may hold 10,000
    sections. Unequal entries collide with odds of about 2^-64, on top of the CRCs both
    sides passed."""

    __slots__ = ("_hashes", "_lengths", "_counts", "sections")

    def __init__(self) -> None:
        self._hashes = array.array("q")
        self._lengths = array.array("q")
        self._counts = array.array("q")
        self.sections = 0

    def add(self, entries: bytes, count: int) -> None:
        """A unit of ``count`` sections whose footer entries encode as ``entries``."""
        self._hashes.append(hash(entries))
        self._lengths.append(len(entries))
        self._counts.append(count)
        self.sections += count

    def encoded_in(self, footer: bytes, start: int) -> bool:
        """Whether ``footer`` from ``start`` to its end is exactly the entries streamed,
        unit after unit (a hash of each unit's bytes, no parse)."""
        if len(footer) - start != sum(self._lengths):
            return False
        view = memoryview(bytes(footer))  # read-only, so hashable (bytes: not copied)
        for seen, length in zip(self._hashes, self._lengths, strict=True):
            if hash(view[start : start + length]) != seen:
                return False
            start += length
        return True

    def first_disagreeing(self, listed: Sequence[SectionMeta]) -> tuple[int, int] | None:
        """The first unit whose entries in ``listed`` (a footer's sections, as many as
        were streamed) do not encode as streamed, as (its first, its sections); None if
        every unit's do."""
        at = 0
        for seen, count in zip(self._hashes, self._counts, strict=True):
            unit = listed[at : at + count]
            entries = [encode_footer_entry(s, encode_topic(s.topic)) for s in unit]
            if hash(b"".join(entries)) != seen:
                return at, count
            at += count
        return None


class SectionReader:
    """One section of a ``StreamReader``; valid until the stream moves to the next section.

    ``batches()`` yields the section's batches, each checksummed, decoded, validated and in
    strictly increasing offset order; it may be left and resumed. ``batches(fields)``
    decodes only those columns (``decode_fields``): a reader that needs the keys but not
    the values skips most of the decoding. ``skip()`` reads the rest without decoding.
    Once the trailer is read, ``meta`` and ``offsets`` are set; by then the trailer's batch
    index has been matched against the frames seen and, if every batch was decoded whole,
    its stats against the records.
    """

    meta: SectionMeta | None

    def __init__(
        self,
        stream: StreamReader,
        topic: str,
        partition: int,
        position: int,
        key: tuple[bytes, int],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        """The section's place in the file's order (``section_key``)."""
        self.position = position
        self.meta = None
        self._offsets: OffsetSet | None = None
        self._stream = stream
        self._positions: list[int] = []  # batch frame positions relative to the section
        self._firsts: list[int] = []  # first offsets of the batches decoded
        self._last_offset: int | None = None  # of the last batch decoded
        self._stats: BatchStats | None = None
        self._all_decoded = True
        self._builder: OffsetSetBuilder | None = None
        self._trailer: tuple[bytes, int] | None = None
        """The trailer's payload and its first byte in the file, while its bitmap is
        not read yet (``_usual_end``)."""
        self._done = False

    @property
    def offsets(self) -> OffsetSet | None:
        """The section's offset bitmap, once its trailer is read (a FormatError if the
        bitmap, left unread by ``_usual_end``, disagrees with the trailer)."""
        if self._offsets is None and self._trailer is not None:
            payload, base = self._trailer
            stream = self._stream
            head = parse_trailer_head(payload, base, stream.object_name, stream.format_version)
            self._offsets = head.offsets()
            self._trailer = None
        return self._offsets

    @property
    def logical_bytes(self) -> int | None:
        """The section's logical size (FORMAT.md 6.3) if known before its batches are
        read: a shared section's, from its block's table."""
        return None

    @property
    def batch_positions(self) -> list[int]:
        """The positions, relative to the section, of the batch frames read so far."""
        return list(self._positions)

    @property
    def batch_firsts(self) -> list[int]:
        """The first offsets of the batches decoded so far."""
        return list(self._firsts)

    def batches(self, fields: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The rest of the section's batches, whole, or with only ``fields`` (and the
        offset) decoded."""
        if fields is not None and len(field_indices(fields)) == len(RECORD_SCHEMA):
            fields = None
        while not self._done:
            batch = self._advance(decode=True, fields=fields)
            if batch is not None:
                yield batch

    def skip(self) -> None:
        while not self._done:
            self._advance(decode=False)

    def _advance(self, decode: bool, fields: Sequence[str] | None = None) -> pa.RecordBatch | None:
        """Reads the next frame: a batch (returned if decoded) or the trailer (then
        done). A batch decoded whole leaves its frame for a writer (``read_frames``)."""
        name = self._stream.object_name
        event = self._stream._section_event()
        if event[0] == "trailer":
            _, at, length, trailer = event
            self._end(trailer, length, at)
            return None
        _, at, crc, payload = event
        self._positions.append(at - self.position)
        if not decode:
            self._all_decoded = False
            return None
        version = self._stream.format_version
        role = self._stream.role
        assert version is not None
        if fields is None:
            batch, stats = decode_measured(payload, at + FRAME_HEADER.size, name, version, role)
            keep_frame(batch, EncodedFrame(payload, crc))
            first, last = stats.first_offset, stats.last_offset
        else:
            batch = decode_fields(payload, at + FRAME_HEADER.size, name, fields, version, role)
            view = int64_view(batch.column(0))
            first, last = view[0], view[-1]
        if self._last_offset is not None and first <= self._last_offset:
            raise FormatError(
                name, at, f"batch starts at offset {first}, not after {self._last_offset}"
            )
        if self._stream._verify:
            if self._builder is None:
                self._builder = OffsetSetBuilder(first)
            self._builder.add(batch.column(0), first, last)
        if fields is None and self._all_decoded:
            self._stats = stats if self._stats is None else self._stats.then(stats)
        else:
            self._all_decoded = False  # the trailer's stats cannot be checked
        self._last_offset = last
        self._firsts.append(first)
        return batch

    def _end(self, payload: bytes, length: int, at: int) -> None:
        name = self._stream.object_name
        if not self._positions:
            raise FormatError(name, at, "section has no batches")
        version = self._stream.format_version
        usual = None
        if self._builder is None and version is not None and layout_version(version) == 2:
            usual = _sections.framed_trailer(payload, self._positions, self._firsts)
        stats = None if usual is None else self._usual_end(usual, payload, at + FRAME_HEADER.size)
        if stats is None:
            # A trailer the compiled check accepts, a second reader of the same bytes takes
            # through its usual end: the full parse leaves nothing for it (second_read).
            stats = self._checked_end(payload, at, self._stream.role if usual is None else None)
        self.meta = stats.section_meta(
            self.topic,
            self.partition,
            self.position,
            at + FRAME_HEADER.size + length + SECTION_END.size - self.position,
        )
        self._done = True

    def _usual_end(self, usual: FramedTrailer, payload: bytes, base: int) -> BatchStats | None:
        """The trailer's stats, where the compiled check accepted it (``usual``, from
        ``_sections.framed_trailer``: a layout-2 trailer as this system writes it, whose
        index lists the batch frames and first offsets read; never asked of a verifying
        stream) and it passes the rest of ``_checked_end``'s checks here: its stats are the
        records' (when every batch was decoded) and its bitmap is the writer's dense one
        (FORMAT.md 6.4), or, in a stream that leaves the bytes' own checks to another
        (``FileChecks`` "elsewhere"), left unread. The bitmap is read when ``offsets`` is
        asked for. None for anything else: ``_checked_end`` reads it and names any
        problem, so an error's words are its own either way."""
        figures, kind, bitmap_at = usual
        stats = BatchStats(*figures)
        if self._all_decoded and stats != self._stats:
            return None
        dense = is_dense_bitmap(
            kind, stats.first_offset, stats.last_offset, stats.record_count, payload,
            bitmap_at, len(payload),
        )  # fmt: skip
        if not dense and self._stream._file_checks != "elsewhere":
            return None
        self._trailer = (payload, base)
        return stats

    def _checked_end(self, payload: bytes, at: int, role: Role) -> BatchStats:
        """Reads the trailer (as a reader in ``role``: ``second_read``) and makes every
        check of it, raising the first problem; returns its stats and sets the offsets."""
        name = self._stream.object_name
        trailer = parse_trailer(
            payload, at + FRAME_HEADER.size, name, self._stream.format_version, role
        )
        if [p for _, p in trailer.index] != self._positions:
            raise FormatError(name, at, "trailer's batch index does not match the batch frames")
        if [o for o, _ in trailer.index[: len(self._firsts)]] != self._firsts:
            raise FormatError(
                name, at, "trailer's batch index does not match the batches' first offsets"
            )
        if self._all_decoded and (self._stats is None or not trailer.agrees(self._stats)):
            raise FormatError(
                name, at, f"trailer stats {trailer.stats} disagree with the records {self._stats}"
            )
        if self._builder is not None and self._builder.build() != trailer.offsets:
            raise FormatError(name, at, "offset bitmap differs from the offsets in the records")
        self._offsets = trailer.offsets
        return trailer.stats


class SharedRun:
    """The sections of one shared block of a stream (``StreamReader.units``), in order:
    ``block.sections[i]`` is the i-th. The block's footer accounting is done; its batch
    is decoded when first asked for."""

    __slots__ = ("stream", "block", "position", "length")

    def __init__(self, stream: StreamReader, block: Block, position: int, length: int) -> None:
        self.stream = stream
        self.block = block
        self.position = position
        """The block's first byte in the file (its ``SBLK`` frame)."""
        self.length = length

    def reader(self, i: int) -> SharedSectionReader:
        """The block's i-th section, as a SectionReader."""
        return SharedSectionReader(self.stream, self.block, i, self.position, self.length)

    def readers(self) -> Iterator[SharedSectionReader]:
        return (self.reader(i) for i in range(len(self.block.sections)))

    @property
    def placeable(self) -> bool:
        """Whether its sections may be taken by their place in the block (a group's run of
        them, ``SectionMerge.take_upto``): not when the stream verifies, which reads every
        section through ``batches``."""
        return self.stream.placeable


class SharedSectionReader(SectionReader):
    """A section of a shared block (FORMAT.md section 13): its meta and offsets are known
    from the block's table at once; its batch is its rows of the block's batch, which is
    decoded and checked once for all the block's sections. It reads its table entry
    (``TableEntry``); the entry's ``SharedSection``, with the trailer, is made only for
    ``offsets``."""

    def __init__(
        self, stream: StreamReader, block: Block, index: int, position: int, length: int
    ) -> None:
        # Not SectionReader.__init__: a reader of small sections makes one of these per
        # section, and needs none of a framed section's state.
        entry = block.sections.entries[index]
        self.topic = entry.topic
        self.partition = entry.partition
        self.key = entry.key
        self.position = position
        self._length = length
        self._stream = stream
        self._block = block
        self._index = index
        self._entry = entry
        self._offsets: OffsetSet | None = None
        self._done = False

    @property
    def meta(self) -> SectionMeta:  # type: ignore[override]
        """Made when first asked for (a compaction never asks)."""
        return entry_meta(self._entry, self.position, self._length)

    @property
    def offsets(self) -> OffsetSet:
        """Deserialized and checked when first asked for (a compaction never asks)."""
        if self._offsets is None:
            self._offsets = self._block.sections[self._index].trailer.offsets()
        return self._offsets

    @property
    def logical_bytes(self) -> int:
        return self._entry.uncompressed_bytes

    @property
    def batch_positions(self) -> list[int]:
        return [0]

    @property
    def batch_firsts(self) -> list[int]:
        return [self._entry.first_offset]

    def batches(self, fields: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        if self._done:
            return
        self._done = True
        e = self._entry
        batch = self._block.rows(e.start, e.record_count, fields)
        if self._stream._verify:
            builder = OffsetSetBuilder(e.first_offset)
            builder.add_column(batch.column(0))
            if builder.build() != self.offsets:
                raise FormatError(
                    self._stream.object_name,
                    self.position,
                    f"offset bitmap of {self.topic}/{self.partition} differs from the offsets "
                    "in the records",
                )
        yield batch

    def skip(self) -> None:
        self._done = True


def verify_stream(source: Source, *, object_name: str, size: int | None = None) -> FileMeta:
    """Reads and checks a whole file; returns its footer, or raises FormatError.

    Checks every CRC; decodes and validates every batch; that offsets strictly increase
    within each section and sections are strictly sorted; that each section's trailer
    (stats, batch index, offset bitmap) equals what its records show; and that the footer
    lists exactly the sections streamed.
    """
    reader = StreamReader(source, object_name=object_name, size=size, verify=True)
    for section in reader.sections():
        for _ in section.batches():
            pass
    assert reader.footer is not None
    return reader.footer
