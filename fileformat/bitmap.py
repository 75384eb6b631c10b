"""The offsets present in a section, as a roaring bitmap (FORMAT.md, "Offset bitmap").

Offsets are int64; a roaring bitmap holds unsigned integers. A section stores
``offset - first_offset`` for every record: a 32-bit roaring bitmap (kind 1) when the
section spans fewer than 2^32 offsets, which is the case for any realistic partition, and
a 64-bit roaring bitmap (kind 2) otherwise. Both use the portable serialization of the
RoaringFormatSpec, so any roaring implementation can read them.
"""

from __future__ import annotations

import array
from collections.abc import Iterator
from typing import Final

import pyarrow as pa
from pyroaring import BitMap, BitMap64

from compactor.fileformat import _sections
from compactor.fileformat.batches import SMALL_BATCH, int64_view

KIND_ROARING32: Final = 1
KIND_ROARING64: Final = 2
SPAN_32: Final = 1 << 32


class OffsetSet:
    """A set of int64 offsets, stored as a roaring bitmap of ``offset - base``.

    ``relative`` is the bitmap itself (``BitMap`` for kind 1, ``BitMap64`` for kind 2); the
    methods here take and return absolute offsets. A set this process made of known
    offsets (``made``) may hold only its serialized bytes and its last offset, until
    something asks for more than ``serialize``, ``kind``, ``first`` and ``last``.
    """

    __slots__ = ("base", "_relative", "_kind", "_serialized", "_last")

    def __init__(self, base: int, relative: BitMap | BitMap64) -> None:
        self.base = base
        self._relative: BitMap | BitMap64 | None = relative
        self._kind = KIND_ROARING64 if isinstance(relative, BitMap64) else KIND_ROARING32
        self._serialized: bytes | None = None
        self._last = 0

    @classmethod
    def made(cls, kind: int, serialized: bytes, base: int, last: int) -> OffsetSet:
        """The set whose bitmap this process serialized itself (``small_bitmap``) from
        offsets from ``base`` (present) to ``last``: its bytes are trusted and
        deserialized only if the bitmap itself is asked for."""
        made = cls.__new__(cls)
        made.base, made._relative, made._kind = base, None, kind
        made._serialized, made._last = serialized, last
        return made

    @property
    def relative(self) -> BitMap | BitMap64:
        if self._relative is None:
            assert self._serialized is not None
            self._relative = _deserialize(self._kind, self._serialized)
        return self._relative

    @property
    def kind(self) -> int:
        return self._kind

    def __len__(self) -> int:
        return len(self.relative)

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        r = offset - self.base
        limit = SPAN_32 if self.kind == KIND_ROARING32 else 1 << 64
        return 0 <= r < limit and r in self.relative

    def __iter__(self) -> Iterator[int]:
        base = self.base
        return (base + r for r in self.relative)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetSet):
            return NotImplemented
        if len(self) != len(other):
            return False
        if len(self) == 0:
            return True
        if self.base == other.base and self.kind == other.kind:
            return bool(self.relative == other.relative)
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OffsetSet(base={self.base}, count={len(self)})"

    def first(self) -> int:
        if self._relative is None:
            return self.base
        return self.base + int(self.relative.min())

    def last(self) -> int:
        if self._relative is None:
            return self._last
        return self.base + int(self.relative.max())

    def next_present(self, offset: int) -> int | None:
        """The smallest offset in the set that is >= ``offset``, or None (Kafka fetch rule)."""
        if len(self.relative) == 0:
            return None
        r = max(offset - self.base, 0)
        if r > self.relative.max():
            return None
        return self.base + int(self.relative.next_set_bit(r))

    def serialize(self) -> bytes:
        if self._serialized is not None:
            return self._serialized
        self.relative.run_optimize()
        return bytes(self.relative.serialize())

    @classmethod
    def deserialize(cls, kind: int, data: bytes, base: int) -> OffsetSet:
        """Decodes a portable roaring bitmap; ValueError for any malformed input.

        The whole of ``data`` must be the bitmap: trailing bytes are an error.
        """
        return cls(base, _deserialize(kind, data))


def _deserialize(kind: int, data: bytes) -> BitMap | BitMap64:
    """``OffsetSet.deserialize``'s bitmap."""
    try:
        if kind == KIND_ROARING32:
            bm: BitMap | BitMap64 = BitMap.deserialize(data)
        elif kind == KIND_ROARING64:
            bm = BitMap64.deserialize(data)
        else:
            raise ValueError(f"unknown bitmap kind {kind}")
        used = len(bm.serialize())
    except ValueError:
        raise
    except Exception as exc:  # pyroaring signals some bad input with IndexError etc.
        raise ValueError(f"malformed bitmap: {exc}") from None
    if used != len(data):
        raise ValueError(f"bitmap uses {used} of its {len(data)} bytes")
    return bm


class OffsetSetBuilder:
    """Collects the offsets of one section, batch by batch, in strictly increasing order."""

    __slots__ = ("base", "_bitmap")

    def __init__(self, base: int) -> None:
        self.base = base
        self._bitmap: BitMap | BitMap64 = BitMap()

    def add(self, offsets: pa.Array, first: int, last: int) -> None:
        """Adds an int64 array of offsets whose smallest is ``first`` and largest ``last``.

        ``first >= base`` is the caller's invariant (offsets increase across the section).
        """
        lo, hi = first - self.base, last - self.base
        if hi >= SPAN_32 and not isinstance(self._bitmap, BitMap64):
            self._bitmap = BitMap64(self._bitmap)
        if hi - lo + 1 == len(offsets):  # strictly increasing and dense: one range
            self._bitmap.add_range(lo, hi + 1)
            return
        if len(offsets) <= SMALL_BATCH:
            base = self.base
            self._bitmap.update([o - base for o in int64_view(offsets)])
            return
        wide = isinstance(self._bitmap, BitMap64)
        values = array.array("Q" if wide else "I")
        values.frombytes(_sections.relative_offsets(int64_view(offsets), self.base, wide))
        self._bitmap.update(values)

    def add_column(self, offsets: pa.Array) -> None:
        """``add`` for a non-empty offset column, whose ends are its first and last."""
        view = int64_view(offsets)
        self.add(offsets, view[0], view[-1])

    def build(self) -> OffsetSet:
        return OffsetSet(self.base, self._bitmap)


def small_bitmap(offsets: pa.Array | memoryview, base: int) -> bytes | None:
    """What ``OffsetSetBuilder(base)`` serializes of one column of offsets (strictly
    increasing, the first ``base``; an int64 array, or its values as ``int64_view``
    gives them) when they are 1 to 4,096 within 2^16 of ``base``: a kind-1 bitmap of one
    container, made in one compiled pass (``_sections.small_bitmap``) instead of a
    pyroaring bitmap built, run-optimized and serialized; None for any other offsets."""
    view = offsets if isinstance(offsets, memoryview) else int64_view(offsets)
    return _sections.small_bitmap(view, base)
