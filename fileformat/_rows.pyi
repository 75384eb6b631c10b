from collections.abc import Sequence
from typing import Any

Buffer = Any
"""Anything with the buffer protocol (a pyarrow Buffer, bytes, a memoryview)."""

def pick_fixed(
    mask: Buffer,
    rows: int,
    width: int,
    chunks: Sequence[tuple[int, int, Buffer | None, Buffer]],
) -> tuple[bytes, bytes | None, int]: ...
def pick_binary(
    mask: Buffer,
    rows: int,
    chunks: Sequence[tuple[int, int, Buffer | None, Buffer, Buffer]],
) -> tuple[bytes, bytes, bytes | None, int]: ...
def take_fixed(
    located: Buffer,
    width: int,
    chunks: Sequence[tuple[int, int, Buffer | None, Buffer]],
) -> tuple[bytes, bytes | None, int]: ...
def take_binary(
    located: Buffer,
    chunks: Sequence[tuple[int, int, Buffer | None, Buffer, Buffer]],
) -> tuple[bytes, bytes, bytes | None, int]: ...
def locate(order: Buffer, lengths: Sequence[int]) -> bytes: ...
