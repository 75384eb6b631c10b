"""Which codec a file's batches are written with, by the file's level.

Files below the top level (L0 to L3) live for minutes to hours and are read again by the
next compaction; the top level is what is kept. So the default spends bytes where they are
short-lived and CPU where it is read again: lz4 below the top (about half zstd's CPU to
encode and decode, about twice its bytes), zstd at the top (docs/ARCHITECTURE.md §9.1,
step 6; ``python -m bench.codecs`` measures the trade on a store's own batches). Every
reader reads every codec, so a store may hold files of both, and changing the choice needs
no migration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from compactor.planner.job import MAX_LEVEL

CODECS: Final[dict[str, str | None]] = {"zstd": "zstd", "lz4": "lz4", "none": None}
"""The codecs by the name a user gives them; ``none`` stores batches uncompressed."""


def codec_named(name: str) -> str | None:
    """The codec called ``name`` (``CODECS``); ValueError naming the choices otherwise."""
    try:
        return CODECS[name]
    except KeyError:
        raise _unknown(name) from None


def _unknown(codec: str | None) -> ValueError:
    return ValueError(f"unknown codec {codec!r}; one of {', '.join(CODECS)}")


def codec_name(codec: str | None) -> str:
    return "none" if codec is None else codec


@dataclass(frozen=True, slots=True)
class LevelCodecs:
    """The codec of the files at each level: ``top`` at L{MAX_LEVEL}, ``below_top`` at every
    level under it, ingest's L0 files included."""

    top: str | None = "zstd"
    below_top: str | None = "lz4"

    def __post_init__(self) -> None:
        for codec in (self.top, self.below_top):
            if codec not in CODECS.values():
                raise _unknown(codec)

    def for_level(self, level: int) -> str | None:
        """The codec of a file written at ``level`` (0 for ingest's files)."""
        if not 0 <= level <= MAX_LEVEL:
            raise ValueError(f"level must be in 0..{MAX_LEVEL}, got {level}")
        return self.top if level == MAX_LEVEL else self.below_top


DEFAULT_CODECS: Final = LevelCodecs()
