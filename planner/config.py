"""The planner's settings: every threshold is named, with the documented default.

Names are what an operator types (``--set level.trigger.files=16``); a
``PlannerConfig`` is only built by its constructor (defaults) or ``parse``, which
validates, so every instance is usable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from compactor.catalog.errors import ConfigError
from compactor.catalog.numbers import INT64_MAX, parse_float, saturated_int, shown

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    level_trigger_files: int = 32
    """L0 -> L1, L1 -> L2, L2 -> L3 and L3 -> L4 start at this many contiguous files of
    a level; each job takes exactly this many, oldest first."""
    top_run_min_files: int = 10
    """At the top level, a run of similar-sized files this long is compacted together."""
    top_run_max_files: int = 32
    top_run_size_ratio: float = 2.0
    """Similar size: within a top-level run, the largest file of an output group (the
    compacted topics' files, the other topics' files) is at most this many times its
    smallest."""
    full_compaction_interval_ms: int = 24 * HOUR_MS
    """The daily compaction across sizes runs this long after the last full one."""
    max_partition_uncompressed_bytes: int = 128 * GiB
    """A file holding a partition section larger than this, uncompressed, is never
    compacted."""
    max_lag_buffer_ms: int = 15 * MINUTE_MS
    """Files that became dirty under max.compaction.lag.ms wait this long so that one
    job batches them..."""
    max_lag_deadline_ms: int = 30 * MINUTE_MS
    """...and are compacted before this long after becoming dirty (the promise the
    simulator checks)."""
    retention_min_expired_ratio: float = 0.5
    """A file holding records past retention.ms is rewritten without them once about this
    share of its bytes has expired (as min.cleanable.dirty.ratio does for cleaning)..."""
    retention_max_delay_ms: int = HOUR_MS
    """...and in any case this long after its oldest record expired. Files all of whose
    records expired are dropped at once, without being read."""
    tombstone_buffer_ms: int = 15 * MINUTE_MS
    """Files holding a tombstone past its delete horizon wait this long, so that one job
    removes the tombstones of many; they are due at the horizon plus this."""

    def __post_init__(self) -> None:
        if self.level_trigger_files < 2:
            raise ConfigError("level.trigger.files must be at least 2")
        if not 2 <= self.top_run_min_files <= self.top_run_max_files:
            raise ConfigError("need 2 <= top.run.min.files <= top.run.max.files")
        if not (math.isfinite(self.top_run_size_ratio) and self.top_run_size_ratio >= 1.0):
            raise ConfigError("top.run.size.ratio must be a number >= 1.0")
        if self.max_lag_buffer_ms < 0 or self.max_lag_deadline_ms <= self.max_lag_buffer_ms:
            raise ConfigError("need 0 <= max.lag.buffer.ms < max.lag.deadline.ms")
        if not 0.0 <= self.retention_min_expired_ratio <= 1.0:
            raise ConfigError("retention.min.expired.ratio must be between 0 and 1")
        if self.retention_max_delay_ms < 0 or self.tombstone_buffer_ms < 0:
            raise ConfigError("retention.max.delay.ms and tombstone.buffer.ms must be >= 0")
        if self.full_compaction_interval_ms <= 0 or self.max_partition_uncompressed_bytes <= 0:
            raise ConfigError(
                "full.compaction.interval.ms and max.partition.uncompressed.bytes must be > 0"
            )

    @staticmethod
    def setting_name(field_name: str) -> str:
        return field_name.replace("_", ".")

    @classmethod
    def parse(cls, settings: Mapping[str, str]) -> PlannerConfig:
        """Defaults overridden by ``name=value`` settings; unknown names are errors."""
        by_name = {cls.setting_name(f.name): f for f in fields(cls)}
        changes: dict[str, int | float] = {}
        for name, text in settings.items():
            f = by_name.get(name)
            if f is None:
                raise ConfigError(f"unknown planner setting {name!r} (known: {', '.join(by_name)})")
            try:
                value = parse_float(text) if f.type == "float" else saturated_int(text)
            except ValueError:
                raise ConfigError(f"{name} must be a number, got {shown(text)!r}") from None
            if f.type == "int" and value > INT64_MAX:
                raise ConfigError(
                    f"{name} must be at most {INT64_MAX} (2^63 - 1), got {shown(text)}"
                )
            changes[f.name] = value
        return replace(cls(), **changes)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, int | float]:
        return {self.setting_name(f.name): getattr(self, f.name) for f in fields(self)}
