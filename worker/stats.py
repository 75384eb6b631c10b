"""Counters a job reports (docs/ARCHITECTURE.md §5), summed over its partitions, and its
progress."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CompactionStats:
    records_in: int = 0
    records_out: int = 0
    dropped_superseded: int = 0
    dropped_tombstone_expired: int = 0
    dropped_retention: int = 0
    tombstones_kept: int = 0
    tombstones_removed: int = 0
    null_keys: int = 0
    windows: int = 0
    max_buffer_utilization: float = 0.0
    partitions: int = 0
    frames_reused: int = 0
    """Input batch frames written to an output as they were read, not encoded again: a
    batch that passed through the job unchanged (``fileformat.read_frames``)."""

    @property
    def dropped(self) -> dict[str, int]:
        return {
            "superseded": self.dropped_superseded,
            "tombstone_expired": self.dropped_tombstone_expired,
            "retention": self.dropped_retention,
        }

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("dropped_superseded", "dropped_tombstone_expired", "dropped_retention"):
            del out[k]
        out["dropped"] = self.dropped
        return out


@dataclass
class FileStats:
    key: str
    bytes: int
    gets: int = 0
    resumes: int = 0


@dataclass
class JobReport:
    job_id: str
    rule: str
    output_level: int
    outputs: list[str]
    bytes_in: int
    bytes_out: int
    duration_s: float
    stats: CompactionStats
    inputs: list[FileStats] = field(default_factory=list)
    committed: bool = True
    note: str = ""
    phase1: str = "inline"
    """Where phase 1 ran: "inline" (on the job's thread), or a window ahead of phase 2 on
    a "thread" or in a "process" of its own (``worker.pipeline.phase1_mode``)."""
    peak_rss_kib: int = 0
    """This process's own peak RSS (KiB) when the job ended: since the process started,
    so a bound on the job's; a helper's is not in it (``phase1_peak_rss_kib``)."""
    phase1_peak_rss_kib: int = 0
    """The peak RSS of phase 1's process, when it had one: the job's memory is this
    process's and that one's together (at most the sum of the two peaks)."""

    @property
    def records_per_s(self) -> float:
        return self.stats.records_in / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "rule": self.rule,
            "output_level": self.output_level,
            "outputs": self.outputs,
            "committed": self.committed,
            "note": self.note,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "duration_s": round(self.duration_s, 3),
            "records_per_s": round(self.records_per_s),
            "phase1": self.phase1,
            "peak_rss_kib": self.peak_rss_kib,
            "phase1_peak_rss_kib": self.phase1_peak_rss_kib,
            **self.stats.to_json(),
            "inputs": [asdict(f) for f in self.inputs],
        }


@dataclass(frozen=True)
class JobProgress:
    """How far a running job is: phase 2 has read ``records_in`` of the inputs'
    ``records_total`` records and kept ``records_out``."""

    job_id: str
    rule: str
    records_total: int
    records_in: int
    records_out: int
    partitions: int
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return self.records_in / self.records_total if self.records_total else 1.0

    @property
    def records_per_s(self) -> float:
        return self.records_in / self.elapsed_s if self.elapsed_s > 0 else 0.0


class ProgressReporter:
    """Calls ``callback`` with the job's progress when polled, at most every
    ``interval_s``, and ``guard`` at every poll: cheap enough to poll for every batch."""

    def __init__(
        self,
        job_id: str,
        rule: str,
        records_total: int,
        stats: CompactionStats,
        callback: Callable[[JobProgress], None] | None,
        interval_s: float = 0.5,
        guard: Callable[[], None] = lambda: None,
    ) -> None:
        self._job_id, self._rule, self._total = job_id, rule, records_total
        self._guard = guard
        self._stats = stats
        self._callback = callback
        self._interval_s = interval_s
        self._started = self._last = time.monotonic()

    def poll(self) -> None:
        self._guard()
        if self._callback is None:
            return
        now = time.monotonic()
        if now - self._last < self._interval_s:
            return
        self._last = now
        s = self._stats
        self._callback(
            JobProgress(
                self._job_id,
                self._rule,
                self._total,
                s.records_in,
                s.records_out,
                s.partitions,
                now - self._started,
            )
        )
