from typing import Any, Literal

CRC: Literal["isal", "zlib"]
"""Which library computes the frame CRCs: ISA-L's where the build found libisal."""

Buffer = Any
"""Anything with the buffer protocol (bytes, a memoryview, a mapped object's view)."""

Batch = tuple[int, int, int]
"""A batch frame: (frame position, payload position, payload length)."""
Section = tuple[Literal["section"], str, int, int, int, list[Batch], int, int]
"""(kind, topic, partition, position, length, batches, trailer payload position, trailer
payload length); the length runs to the end of the section end."""
Block = tuple[Literal["block"], int, int, int, int, int, int]
"""(kind, position, length, batch payload position, batch payload length, table payload
position, table payload length); the length runs to the end of the block end."""

def walk(
    data: Buffer, object_name: str, /
) -> (
    tuple[Literal["ok"], list[Section | Block]]
    | tuple[Literal["error"], int, str]
    | tuple[Literal["decline"], str]
): ...

Payload = bytes | memoryview
"""A batch's or block's payload as an event holds it (``framing.Payload``): a copy of
the bytes fed, or the very object given to ``Walker.payload``."""

SectionEvent = tuple[Literal["section"], int, str, int]
"""A framed section's header frame: (kind, position, topic, partition), before its
batches."""
BatchEvent = tuple[Literal["batch"], int, int, Payload]
"""A batch frame of the framed section: (kind, position, crc, payload)."""
TrailerEvent = tuple[Literal["trailer"], int, int, bytes]
"""The section's trailer frame, once its section end is checked: (kind, position, payload
length, payload)."""
BlockEvent = tuple[Literal["block"], int, Payload, int, int, bytes]
"""A shared block, once its block end is checked: (kind, SBLK frame position, batch
payload as a batch's, STBL frame position, table payload length, table payload)."""
FooterEvent = tuple[Literal["footer"], int, int, int, bytes]
"""The footer frame, once the tail and the object's end are checked: (kind, position,
payload length, crc, payload)."""
ErrorEvent = tuple[Literal["error"], int, str]
"""The first problem, the last event: (kind, position, the reader's words)."""
Event = SectionEvent | BatchEvent | TrailerEvent | BlockEvent | FooterEvent | ErrorEvent

class Walker:
    """The walk of one version-3 object of ``size`` bytes from its byte ``start`` (after
    the file header), fed its stream's bytes chunk by chunk: ``walk``'s checks but the
    section order and the tables' keys, reported as events in stream order."""

    def __init__(self, object_name: str, size: int, start: int, long: int) -> None: ...
    @property
    def position(self) -> int:
        """The object's byte the walk reads next: the first of the next feed's data."""
    @property
    def object_name(self) -> str: ...
    def feed(self, data: Buffer, /, eof: bool) -> tuple[int, list[Event], int]:
        """(consumed, events, want): the whole items in ``data`` walked; ``want`` > 0 the
        bytes the next feed must hold, < 0 a long payload of -want bytes for ``payload``,
        0 the walk over. ``eof``: no bytes follow ``data``."""
    def payload(self, view: Payload, /) -> tuple[list[Event], int]:
        """(events, want): the pending long payload, exactly -want bytes (any buffer is
        taken, and an event holds it as it is), checked; then the walk goes on with no
        bytes held."""
