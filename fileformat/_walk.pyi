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
