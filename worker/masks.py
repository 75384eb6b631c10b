"""Record masks as Python ints: bit i is record i, as in Arrow's LSB-first bitmaps.

For the small batches of small sections a handful of int operations cost far less than
as many compute calls; above ``SMALL_BATCH`` records the comparisons go through Arrow.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import pyarrow as pa

from compactor.fileformat import compute
from compactor.fileformat.batches import SMALL_BATCH, bitmap_bits, int64_view, validity_bits


def bool_bits(arr: pa.Array) -> int:
    """Which slots of a boolean array are true (a null counts as false)."""
    bits = bitmap_bits(arr.buffers()[1], arr.offset, len(arr))
    return bits & validity_bits(arr) if arr.null_count else bits


def bool_array(bits: int, n: int) -> pa.Array:
    """A null-free BooleanArray of ``n`` slots, true where ``bits`` has a bit set."""
    return pa.Array.from_buffers(
        pa.bool_(), n, [None, pa.py_buffer(bits.to_bytes((n + 7) >> 3, "little"))]
    )


def at_most(arr: pa.Array, limit: int) -> int:
    """Which slots of an int64 array hold a value <= ``limit`` (nulls: no)."""
    return _compare(arr, limit, operator.le, compute.less_equal)


def _compare(
    arr: pa.Array,
    limit: int,
    small: Callable[[int, int], bool],
    compute: Callable[[pa.Array, int], pa.Array],
) -> int:
    if len(arr) <= SMALL_BATCH:
        bits = 0
        for i, v in enumerate(int64_view(arr)):  # a null slot's value is ignored below
            if small(v, limit):
                bits |= 1 << i
        return bits & validity_bits(arr) if arr.null_count else bits
    return bool_bits(compute(arr, limit))
