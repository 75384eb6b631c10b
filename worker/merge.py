"""Walks the job's inputs partition by partition: one pointer's sections, merged.

Each input file's sections are sorted by (topic, partition); the merge takes the
smallest pending (topic, partition) and every input's section of it, in input order.
Inputs are a contiguous run of the live sequence, oldest first, so a partition's
sections come in offset order and their concatenation is the offset-ordered merge (the
writer still checks that offsets strictly increase).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from compactor.fileformat import SectionReader, StreamReader
from compactor.fileformat.reader import SharedRun
from compactor.worker.gather import PlacedRows

_Key = tuple[bytes, int]


class SectionMerge:
    """One pointer (phase 1 or phase 2) over all inputs.

    Each input's head is its next section: a framed one as its ``SectionReader``, or the
    i-th section of a shared block (``SharedRun``), held as the run and i, so that taking
    a block's sections one partition after another makes no object per section. Invariant:
    ``_keys[i]``, ``_parts[i]`` are input i's head's key and (topic, partition), None once
    the input is done; ``_framed[i]`` is its head when that is a framed section, else
    ``_runs[i]`` and ``_at[i]`` are its block and index."""

    def __init__(self, readers: Sequence[StreamReader]) -> None:
        n = len(readers)
        self._units = [r.units() for r in readers]
        self._framed: list[SectionReader | None] = [None] * n
        self._runs: list[SharedRun | None] = [None] * n
        self._at = [0] * n
        self._keys: list[_Key | None] = [None] * n
        self._parts: list[tuple[str, int] | None] = [None] * n
        for i in range(n):
            self._next_unit(i)

    def next_partition(self) -> tuple[str, int] | None:
        live = [(k, i) for i, k in enumerate(self._keys) if k is not None]
        return self._parts[min(live)[1]] if live else None

    def logical_bytes(self, topic: str, partition: int) -> list[int | None]:
        """Each input's section of this partition, not yet taken (oldest input first): its
        logical bytes if known before it is read (a shared section), else None."""
        tp = (topic, partition)
        out: list[int | None] = []
        for i, part in enumerate(self._parts):
            if part == tp:
                run = self._runs[i]
                if run is None:
                    head = self._framed[i]
                    assert head is not None
                    out.append(head.logical_bytes)
                else:
                    out.append(run.block.sections[self._at[i]].trailer.stats.uncompressed_bytes)
        return out

    def take(self, topic: str, partition: int) -> Iterator[SectionReader]:
        """The inputs' sections of this partition, oldest input first; each is consumed
        (or skipped) before the merge moves that input on."""
        tp = (topic, partition)
        for i, part in enumerate(self._parts):
            if part == tp:
                head = self._reader(i)
                yield head
                head.skip()
                self._advance(i)

    def take_placed(self, topic: str, partition: int, rows: PlacedRows) -> int:
        """``take``, each section's rows added to ``rows`` (a shared section's by its
        place in its block); returns how many rows were added."""
        tp = (topic, partition)
        added = 0
        for i, part in enumerate(self._parts):
            if part == tp:
                run = self._runs[i]
                if run is not None and run.placeable:
                    shared = run.block.sections[self._at[i]]
                    added += rows.add_placed(run.block, shared.start, shared.count)
                else:
                    head = self._reader(i)
                    added += rows.add(head)
                    head.skip()
                self._advance(i)
        return added

    def _reader(self, i: int) -> SectionReader:
        """Input i's head as a SectionReader (a shared section's made on demand)."""
        run = self._runs[i]
        head = self._framed[i] if run is None else run.reader(self._at[i])
        assert head is not None
        return head

    def _advance(self, i: int) -> None:
        """Moves input i past its head."""
        run = self._runs[i]
        if run is not None and self._at[i] + 1 < len(run.block.sections):
            self._at[i] += 1
            shared = run.block.sections[self._at[i]]
            self._keys[i], self._parts[i] = shared.key, (shared.topic, shared.partition)
        else:
            self._next_unit(i)

    def _next_unit(self, i: int) -> None:
        """Input i's next unit (a framed section or a block's run) becomes its head."""
        unit = next(self._units[i], None)
        self._framed[i] = self._runs[i] = None
        self._at[i] = 0
        if unit is None:
            self._keys[i] = self._parts[i] = None
        elif isinstance(unit, SharedRun):
            self._runs[i] = unit
            shared = unit.block.sections[0]
            self._keys[i], self._parts[i] = shared.key, (shared.topic, shared.partition)
        else:
            self._framed[i] = unit
            self._keys[i], self._parts[i] = unit.key, (unit.topic, unit.partition)
