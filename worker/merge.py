"""Walks the job's inputs partition by partition: one pointer's sections, merged.

Each input file's sections are sorted by (topic, partition); the merge takes the
smallest pending (topic, partition) and every input's section of it, in input order.
Inputs are a contiguous run of the live sequence, oldest first, so a partition's
sections come in offset order and their concatenation is the offset-ordered merge (the
writer still checks that offsets strictly increase).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter

from compactor.fileformat import SectionReader, StreamReader


class SectionMerge:
    """One pointer (phase 1 or phase 2) over all inputs."""

    def __init__(self, readers: Sequence[StreamReader]) -> None:
        self._iters = [r.sections() for r in readers]
        self._heads: list[SectionReader | None] = [next(it, None) for it in self._iters]

    def next_partition(self) -> tuple[str, int] | None:
        live = [h for h in self._heads if h is not None]
        if not live:
            return None
        head = min(live, key=attrgetter("key"))
        return head.topic, head.partition

    def peek(self, topic: str, partition: int) -> list[SectionReader]:
        """The inputs' sections of this partition, oldest input first, not yet taken."""
        return [
            h for h in self._heads if h is not None and (h.topic, h.partition) == (topic, partition)
        ]

    def take(self, topic: str, partition: int) -> Iterator[SectionReader]:
        """The inputs' sections of this partition, oldest input first; each is consumed
        (or skipped) before the merge moves that input on."""
        for i, head in enumerate(self._heads):
            if head is not None and (head.topic, head.partition) == (topic, partition):
                yield head
                head.skip()
                self._heads[i] = next(self._iters[i], None)
