from collections.abc import Callable, Iterator
from typing import Any, Generic, Literal, TypeAlias, TypeVar, overload

_T = TypeVar("_T")
_E = TypeVar("_E")

FIGURES: int
USUAL_TRAILER: int
TRAILER_FIXED: int
FLAG_HORIZON: int
KIND_ROARING32: int
KIND_ROARING64: int
RECORD_OVERHEAD: int
NO_HORIZON: int
FOOTER_ENTRY_HEAD: int
INDEX_ENTRY_FIXED: int
INDEX_BATCH: int
METADATA_V5: int
HEADER_RECORD_BATCH: int
FIELD_NODES: int
BUFFERS: int
FIELD_NODES_V1: int
BUFFERS_V1: int
CODEC_LZ4_FRAME: int
CODEC_ZSTD: int
MIN_ROW_BYTES: int
KEPT_ZSTD_CONTEXT: bool

@overload
def figures(
    sections: Any,
    start_at: int,
    count_at: int,
    offsets: Any,
    compare: Literal[False] = False,
) -> tuple[int, list[tuple[Any, ...]]]: ...
@overload
def figures(
    sections: Any, start_at: int, count_at: int, offsets: Any, *, compare: Literal[True]
) -> tuple[int, int]: ...
@overload
def figures(
    sections: Any, start_at: int, count_at: int, offsets: Any, compare: bool
) -> tuple[int, Any]: ...
@overload
def batch_figures(
    arrays: tuple[object, object],
    sections: Any,
    start_at: int,
    count_at: int,
    compare: Literal[False] = False,
    checked: Literal[False] = False,
) -> tuple[int, list[tuple[Any, ...]]]: ...
@overload
def batch_figures(
    arrays: tuple[object, object],
    sections: Any,
    start_at: int,
    count_at: int,
    *,
    compare: Literal[True],
    checked: Literal[False] = False,
) -> tuple[int, int]: ...
@overload
def batch_figures(
    arrays: tuple[object, object],
    sections: Any,
    start_at: int,
    count_at: int,
    compare: bool = False,
    checked: bool = False,
) -> tuple[int, Any] | str: ...
def checked_figures(
    arrays: tuple[object, object], ordered: bool
) -> tuple[int, int, int, int, int, int, int, int | None] | str: ...

class SectionEntries(Generic[_E]):
    def __init__(self, entry_type: type[_E]) -> None: ...
    def append(self, entry: _E) -> None: ...
    def start(self, i: int) -> int: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[_E]: ...
    @overload
    def __getitem__(self, i: int) -> _E: ...
    @overload
    def __getitem__(self, i: slice) -> list[_E]: ...

def usual_entries(
    payload: bytes,
    offset: int,
    count: int,
    topics: dict[bytes, str],
    previous: tuple[bytes, int] | None,
    start: int,
    entries: SectionEntries[Any],
) -> tuple[int, int]: ...

FramedTrailer: TypeAlias = tuple[tuple[int, int, int, int, int, int, int, int | None], int, int]
"""``framed_trailer``'s answer for a trailer it accepts: (its figures, its bitmap's kind,
where the bitmap starts)."""

def framed_trailer(
    payload: bytes, positions: list[int], firsts: list[int], /
) -> FramedTrailer | None:
    """A framed section's layout-2 trailer checked up to its bitmap where it is as this
    system writes it and lists exactly the batch frames at ``positions`` (relative to the
    section), its first offsets beginning with ``firsts``: (its figures, its bitmap's
    kind, where the bitmap starts). None for anything else (``parse_trailer_head``'s to
    read and name); it never accepts what that refuses."""

def footer_entries(entries: Any, position: int, length: int) -> bytes: ...
def table_payload(entries: Any, bitmaps: list[bytes]) -> bytes: ...
def index_entries(entries: Any, bitmaps: list[bytes], position: int, length: int) -> bytes: ...
def unsettled(entries: Any, payload: bytes, dense: Any) -> list[int]: ...
def record_sizes(
    rows: int,
    key_offsets: Any,
    key_validity: Any,
    key_bit: int,
    value_offsets: Any,
    value_validity: Any,
    value_bit: int,
    header_offsets: Any,
    item_key_offsets: Any,
    item_value_offsets: Any,
    item_value_validity: Any,
    item_value_bit: int,
) -> bytes: ...
def relative_offsets(offsets: Any, base: int, wide: bool) -> bytes: ...
def valid_bytes(offsets: Any, validity: Any, bit: int) -> int: ...
def small_bitmap(offsets: Any, base: int) -> bytes | None: ...
def small_sections(
    items: list[tuple[str, int, int, int]],
    figures: list[Any],
    offsets: Any,
    headers_at: Any,
    previous: tuple[bytes, int] | None,
    entry_type: type[_T],
) -> tuple[list[_T], list[bytes | None], list[int]] | None: ...
def usual_message(
    payload: Any, check_expansion: bool, max_decoded: int, max_expansion: int
) -> tuple[int, int, int | None, int] | None: ...
def zstd_stored_as_is(payload: Any, wanted: int, max_decoded: int) -> bytes | None: ...
def table_columns(entries: Any) -> tuple[list[Any], list[int], list[int]]: ...
def span_weights(
    spans: list[tuple[list[Any], list[int], int, int]], budget: int
) -> tuple[list[Any], list[int]]: ...
def key_ranks(among: Any, keys: Any, at: int, end: int) -> list[int]: ...
def joined_read(head: Any, n: int, readinto: Callable[[memoryview], int]) -> bytes: ...
def json_rows(
    objects: list[Any],
    names: tuple[str, ...],
    quote: Callable[[str], str],
    quoted: dict[str, bytes],
) -> bytes: ...
def entry_metas(cls: type[_T], entries: list[Any], position: int, length: int) -> list[_T]: ...
