"""The Arrow compute functions this package calls, by name, through Arrow's function
registry.

``import pyarrow.compute`` builds a Python wrapper, with a docstring scraped from Arrow's
documentation, for each of Arrow's several hundred compute functions: about 25 ms of
every command's start, and on a one-shot ``compact`` that start comes before phase 1's
helper is forked (``worker.helper_process``), so the whole job waits for it. The wrappers call
``call_function`` with options made from their arguments; this module makes the same
calls, with the same options, for the functions the package uses. pyarrow's own
``take``, ``filter`` and ``cast`` methods import ``pyarrow.compute`` too, so the package
calls them here instead. ``tests/test_compute.py`` checks that a job, a command and its
helper never import it.

``call_function`` lives in ``pyarrow._compute``, the compiled module ``pyarrow.compute``
re-exports it from; pyarrow is pinned to one major version (``pyproject.toml``).

A Python value among the arguments becomes the Arrow scalar pyarrow would infer for it
(``_arrow``), given its type: inferring one would have pyarrow import dateutil, 2 ms.
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa
from pyarrow._compute import (
    CastOptions,
    CumulativeOptions,
    IndexOptions,
    SetLookupOptions,
    call_function,
)

Data = Any
"""An Array, a ChunkedArray, a RecordBatch or a Table (where the function takes one)."""
_INFERRED: Final = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
}
"""The type pyarrow infers for a Python value of each of these types."""


def _call(name: str, *args: Any, options: Any = None) -> Any:
    return call_function(name, [_arrow(a) for a in args], options)


def _arrow(value: Any) -> Any:
    kind = _INFERRED.get(type(value))
    return value if kind is None else pa.scalar(value, kind)


def take(data: Data, indices: pa.Array) -> Data:
    """The rows of ``data`` at ``indices`` (bounds checked)."""
    return _call("take", data, indices)


def filter(data: Data, mask: pa.Array) -> Data:  # Arrow's name
    """The rows of ``data`` where ``mask`` is true (a null drops its row)."""
    return _call("filter", data, mask)


def cast(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """``arr`` as ``to``, checked (an overflow or truncation raises)."""
    return _call("cast", arr, options=CastOptions.safe(to))


def cumulative_sum(arr: pa.Array, start: pa.Scalar | None = None) -> pa.Array:
    return _call("cumulative_sum", arr, options=CumulativeOptions(start))


def is_in(arr: pa.Array, value_set: pa.Array) -> pa.Array:
    return _call("is_in", arr, options=SetLookupOptions(value_set))


def index(arr: pa.Array, value: Any) -> int:
    """The first slot of ``arr`` holding ``value``, or -1."""
    return int(_call("index", arr, options=IndexOptions(pa.scalar(value, arr.type))).as_py())


def fill_null(arr: pa.Array, value: Any) -> pa.Array:
    return _call("coalesce", arr, pa.scalar(value, arr.type))


def if_else(cond: pa.Array, left: Any, right: Any) -> pa.Array:
    return _call("if_else", cond, left, right)


def and_(left: pa.Array, right: pa.Array) -> pa.Array:
    return _call("and", left, right)


def invert(arr: pa.Array) -> pa.Array:
    return _call("invert", arr)


def is_valid(arr: pa.Array) -> pa.Array:
    return _call("is_valid", arr)


def equal(left: Any, right: Any) -> pa.Array:
    return _call("equal", left, right)


def less_equal(left: Any, right: Any) -> pa.Array:
    return _call("less_equal", left, right)


def greater_equal(left: Any, right: Any) -> pa.Array:
    return _call("greater_equal", left, right)


def add(left: Any, right: Any) -> pa.Array:
    return _call("add", left, right)


def multiply(left: Any, right: Any) -> pa.Array:
    return _call("multiply", left, right)


def max(arr: pa.Array) -> pa.Scalar:  # Arrow's name
    """The largest non-null value (a null scalar if there is none)."""
    return _call("max", arr)


def any(arr: pa.Array) -> bool:  # Arrow's name
    """Whether any slot is true (nulls skipped)."""
    return bool(_call("any", arr).as_py())


def all(arr: pa.Array) -> bool:  # Arrow's name
    """Whether every slot is true (nulls skipped)."""
    return bool(_call("all", arr).as_py())


def binary_length(arr: pa.Array) -> pa.Array:
    return _call("binary_length", arr)


def list_value_length(arr: pa.Array) -> pa.Array:
    return _call("list_value_length", arr)


def list_flatten(arr: pa.Array) -> pa.Array:
    return _call("list_flatten", arr)


def list_parent_indices(arr: pa.Array) -> pa.Array:
    return _call("list_parent_indices", arr)
