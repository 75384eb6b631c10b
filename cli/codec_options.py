"""``--compression-top`` / ``--compression-below-top``: the codec of each level's files, on
the commands that run jobs (``planner.codecs``)."""

from __future__ import annotations

import argparse

from compactor.planner.codecs import CODECS, DEFAULT_CODECS, LevelCodecs, codec_name, codec_named
from compactor.planner.job import MAX_LEVEL


def codec_argument(text: str) -> str | None:
    """An argparse type: a codec's name (zstd, lz4, none)."""
    try:
        return codec_named(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_codec_options(p: argparse.ArgumentParser) -> None:
    names = "|".join(CODECS)
    p.add_argument(
        "--compression-top",
        type=codec_argument,
        default=DEFAULT_CODECS.top,
        metavar=names,
        help=f"the codec of L{MAX_LEVEL} files, the ones kept "
        f"(default {codec_name(DEFAULT_CODECS.top)})",
    )
    p.add_argument(
        "--compression-below-top",
        type=codec_argument,
        default=DEFAULT_CODECS.below_top,
        metavar=names,
        help=f"the codec of L1..L{MAX_LEVEL - 1} files, read again by the next compaction "
        f"(default {codec_name(DEFAULT_CODECS.below_top)})",
    )


def level_codecs(args: argparse.Namespace) -> LevelCodecs:
    return LevelCodecs(top=args.compression_top, below_top=args.compression_below_top)
