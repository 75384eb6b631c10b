"""A version-3 stream's frames walked and checked by compiled code, as events in order.

``StreamReader`` reads a version-3 object whose size is known through a ``FrameWalk``
(unless ``COMPACTOR_COMPILED_PATH=0``): the compiled ``_walk.Walker`` takes the stream's
read-ahead chunk by chunk and makes every check of the frames that needs no payload's
content (lengths, CRCs, tags, section headers, section and block ends, the tail and the
object's end), in today's reader's words (docs/COMPILED_PATH.md, ``walk``). The reader
takes its events one by one and makes the rest of its checks from them as before: the
sections' order, trailers, tables, the footer, and every batch it decodes.

Invariants, held here:
- the events come in the stream's order, and the walker's first problem is an ``error``
  event after the last sound frame: the reader raises it only when it gets there, after
  every check it makes of the frames before, as it would have on its own;
- the walk reads only the stream's own reads: the read-ahead, and each long batch payload
  (over ``READ_AHEAD``) once, mapped where the source can, so a GET stream is still the
  one sequential read of its object.
"""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Final

from compactor.fileformat import _walk
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import TAG_BATCH, TAG_SHARED_BATCH

if TYPE_CHECKING:  # the events' types are the stub's (_walk.pyi), for the checker only
    from typing import TypeAlias

    from compactor.fileformat.reader import _Input

    TopEvent: TypeAlias = _walk.SectionEvent | _walk.BlockEvent | _walk.FooterEvent
    """A file's next unit, or its footer."""
    InSectionEvent: TypeAlias = _walk.BatchEvent | _walk.TrailerEvent
    """A framed section's next frame: a batch, or its trailer."""

COMPILED_PATH_ENV: Final = "COMPACTOR_COMPILED_PATH"
"""Set to ``0``, streams are read by today's Python reader alone: the reference the
compiled path is compared with (docs/COMPILED_PATH.md, "How it is proven")."""


def compiled_path() -> bool:
    """Whether streams are walked by compiled code (``COMPILED_PATH_ENV`` not ``0``)."""
    return os.environ.get(COMPILED_PATH_ENV, "1") != "0"


class FrameWalk:
    """The events of one stream's frames after its file header (``_walk.pyi``, ``Event``):
    ``next`` gives them one at a time, feeding the walker from the stream as it needs;
    an ``error`` event is raised as the stream's ``FormatError``."""

    __slots__ = ("_input", "_walker", "_events", "_want", "_in_section")

    def __init__(self, inp: _Input, long: int) -> None:
        assert inp.size is not None
        self._input = inp
        self._walker = _walk.Walker(inp.object_name, inp.size, inp.position, long)
        self._events: deque[_walk.Event] = deque()
        self._want = 1  # feed what the read-ahead holds first
        self._in_section = False  # whether a long payload pending is a batch's, not a block's

    def next(self) -> TopEvent | InSectionEvent:
        """The next event; an ``error`` event raises the stream's ``FormatError``."""
        events = self._events
        while not events:
            self._fill()
        event = events.popleft()
        if event[0] == "error":
            raise FormatError(self._input.object_name, event[1], event[2])
        return event

    def _fill(self) -> None:
        inp, want = self._input, self._want
        if want > 0:
            data, eof = inp.chunk(want)
            consumed, events, want = self._walker.feed(data, eof)
            inp.consume(consumed)
            if not events and want > 0 and not consumed and want <= len(data):
                raise RuntimeError(f"{inp.object_name}: the walk made no progress")
        elif want < 0:
            tag = TAG_BATCH if self._in_section else TAG_SHARED_BATCH
            events, want = self._walker.payload(inp.long_payload(tag, -want))
        else:
            raise RuntimeError(f"{inp.object_name}: read past the end of the walk")
        self._want = want
        if events:
            self._in_section = events[-1][0] in ("section", "batch")
            self._events.extend(events)
