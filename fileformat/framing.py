"""The byte-level building blocks of a file (FORMAT.md, "Framing"): magic, version, frames.

All integers are little-endian. A frame is ``tag[4] | length u32 | crc u32 | payload``, and
its CRC (CRC-32/ISO-HDLC, zlib's) covers the tag, the length and the payload, so a
reader rejects a frame before it interprets any of its payload.

The CRC is computed by ISA-L (``isal``): the same function as ``zlib.crc32``, about 3.4
times faster on a store's frames here (``python -m bench.crc``). A job computes it over
every byte it reads, once per pointer, and every byte it writes.
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

from isal.isal_zlib import crc32

from compactor.fileformat.errors import FormatError

MAGIC: Final = b"\x89KCF\r\n\x1a\n"
FORMAT_VERSION: Final = 2
"""The version the writer writes when it shares no sections (FORMAT.md, "Evolution")."""
SHARED_VERSION: Final = 3
"""The version of files that may hold shared blocks (FORMAT.md, "Shared blocks"): version
2 plus the block, its sections laid out as in version 2."""
SUPPORTED_VERSIONS: Final = frozenset({1, FORMAT_VERSION, SHARED_VERSION})

FILE_HEADER: Final = struct.Struct("<8sII")  # magic, format version, flags (zero)
FRAME_HEADER: Final = struct.Struct("<4sII")  # tag, payload length, crc
SECTION_END: Final = struct.Struct("<I4s")  # trailer frame length, SECTION_END_MAGIC
FILE_TAIL: Final = struct.Struct("<III8s")  # footer frame length, footer crc, version, magic

SECTION_END_MAGIC: Final = b"SEND"
BLOCK_END_MAGIC: Final = b"BEND"
TAG_SECTION_HEADER: Final = b"SHDR"
TAG_BATCH: Final = b"BTCH"
TAG_TRAILER: Final = b"STRL"
TAG_FOOTER: Final = b"FOOT"
TAG_SHARED_BATCH: Final = b"SBLK"
TAG_SECTION_TABLE: Final = b"STBL"

MAX_FRAME_PAYLOAD: Final = 256 << 20
"""No frame payload is longer; readers reject larger lengths before reading them."""
MAX_DECODED_BATCH: Final = 256 << 20
"""No batch's Arrow body is larger once decompressed; checked before Arrow allocates."""
MAX_EXPANSION: Final = 64
"""A batch's decoded body is at most this many times its frame payload's length, so even a
crafted frame with a valid CRC cannot make a reader allocate much more than it read.
Writers store a batch uncompressed when compression would shrink it more than that."""
MAX_TOPIC_BYTES: Final = 0xFFFF

# Smallest possible encodings, used to reject impossible lengths early.
MIN_SECTION_HEADER_PAYLOAD: Final = 2 + 1 + 4
MIN_SECTION_LENGTH: Final = 3 * FRAME_HEADER.size + MIN_SECTION_HEADER_PAYLOAD + SECTION_END.size
MIN_FILE_SIZE: Final = FILE_HEADER.size + FRAME_HEADER.size + 4 + FILE_TAIL.size


def frame_crc(tag: bytes, length: int, payload: bytes | memoryview) -> int:
    """The CRC of a frame: CRC-32 over tag, little-endian u32 length, then payload."""
    return crc32(payload, crc32(tag + length.to_bytes(4, "little")))


def encode_frame_header(tag: bytes, payload: bytes | memoryview) -> bytes:
    """The 12-byte header that precedes ``payload`` in a frame."""
    n = len(payload)
    if n > MAX_FRAME_PAYLOAD:
        raise ValueError(f"frame payload of {n} bytes exceeds the {MAX_FRAME_PAYLOAD}-byte cap")
    return FRAME_HEADER.pack(tag, n, frame_crc(tag, n, payload))


Payload = bytes | memoryview
"""A frame's payload as a reader read it: its own bytes, or a read-only view of the
store's (``reader._Input.batch_payload``), which stays valid while it is held."""


class EncodedFrame(NamedTuple):
    """A batch frame as a reader read it: its payload (an encoded batch message) and the
    CRC its header gives, which the reader has verified. A writer may write the same
    payload as its own frame of the same records (``FileWriter.write_batch``): the CRC is
    then the same too."""

    payload: Payload
    crc: int


def encode_frame(tag: bytes, payload: bytes) -> bytes:
    return encode_frame_header(tag, payload) + payload


def describe_tag(tag: bytes) -> str:
    return repr(tag)[1:]


class Cursor:
    """Reads fields from untrusted bytes that start at absolute ``base`` in the object.

    Every failure (too few bytes, a bad value) is a FormatError naming the absolute byte
    position of the field, so callers never see struct.error or IndexError.
    """

    __slots__ = ("data", "base", "object_name", "offset")

    def __init__(self, data: bytes, base: int, object_name: str, offset: int = 0) -> None:
        self.data = data
        self.base = base
        self.object_name = object_name
        self.offset = offset

    @property
    def position(self) -> int:
        """Absolute position of the next field."""
        return self.base + self.offset

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def error(self, reason: str, at: int | None = None) -> FormatError:
        """A FormatError at absolute position ``at`` (default: the next field)."""
        return FormatError(self.object_name, self.position if at is None else at, reason)

    def unpack(self, st: struct.Struct, what: str) -> tuple[Any, ...]:
        if self.remaining < st.size:
            raise self.error(f"truncated {what}: needs {st.size} bytes, {self.remaining} left")
        values = st.unpack_from(self.data, self.offset)
        self.offset += st.size
        return values

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.remaining < n:
            raise self.error(f"truncated {what}: needs {n} bytes, {self.remaining} left")
        out = self.data[self.offset : self.offset + n]
        self.offset += n
        return out

    def expect_end(self, what: str) -> None:
        if self.remaining:
            raise self.error(f"{self.remaining} unexpected bytes after {what}")


U16: Final = struct.Struct("<H")
I32: Final = struct.Struct("<i")
U32: Final = struct.Struct("<I")


def check_file_header(cur: Cursor) -> int:
    """Reads and checks the 16-byte file header; returns the format version."""
    at = cur.position
    magic, version, flags = cur.unpack(FILE_HEADER, "file header")
    if magic != MAGIC:
        raise cur.error(f"bad magic {magic!r}: not a compactor file", at)
    if version not in SUPPORTED_VERSIONS:
        raise cur.error(f"unsupported format version {version}", at + 8)
    if flags != 0:
        raise cur.error(f"unknown header flags {flags:#x}", at + 12)
    return int(version)


def encode_file_header(version: int = FORMAT_VERSION) -> bytes:
    return FILE_HEADER.pack(MAGIC, version, 0)


def layout_version(version: int) -> int:
    """The version whose layout a file's sections, trailers and batches have: version 3
    lays them out as version 2 does."""
    return min(version, FORMAT_VERSION)


def check_frame_length(tag: bytes, length: int, at: int, object_name: str) -> None:
    if length > MAX_FRAME_PAYLOAD:
        raise FormatError(
            object_name,
            at + 4,
            f"{describe_tag(tag)} frame length {length} exceeds the {MAX_FRAME_PAYLOAD}-byte cap",
        )


def verify_frame(
    tag: bytes, length: int, crc: int, payload: bytes | memoryview, at: int, object_name: str
) -> None:
    """Raises FormatError unless ``crc`` is the frame CRC of the frame that starts at ``at``."""
    actual = frame_crc(tag, length, payload)
    if actual != crc:
        raise FormatError(
            object_name,
            at,
            f"{describe_tag(tag)} frame checksum mismatch (stored {crc:#010x}, "
            f"computed {actual:#010x})",
        )


def parse_frame(cur: Cursor, expected_tag: bytes, what: str) -> bytes:
    """Reads one whole frame from ``cur``, checks its tag, length and CRC; returns its payload."""
    at = cur.position
    tag, length, crc = cur.unpack(FRAME_HEADER, f"{what} frame header")
    if tag != expected_tag:
        raise cur.error(
            f"expected a {what} frame ({describe_tag(expected_tag)}), found tag "
            f"{describe_tag(tag)}",
            at,
        )
    check_frame_length(tag, length, at, cur.object_name)
    payload = cur.take(length, f"{what} frame")
    verify_frame(tag, length, crc, payload, at, cur.object_name)
    return payload
