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


def add_codec_option(
    p: argparse.ArgumentParser, flag: str, default: str | None, files: str
) -> None:
    """``flag``: the codec of ``files``, a codec's name (``planner.codecs.CODECS``)."""
    p.add_argument(
        flag,
        type=codec_argument,
        default=default,
        metavar="|".join(CODECS),
        help=f"the codec of {files} (default {codec_name(default)})",
    )


def add_codec_options(p: argparse.ArgumentParser) -> None:
    """The codecs of the files a job writes, by level."""
    add_codec_option(
        p, "--compression-top", DEFAULT_CODECS.top, f"L{MAX_LEVEL} files, the ones kept"
    )
    add_codec_option(
        p,
        "--compression-below-top",
        DEFAULT_CODECS.below_top,
        f"L1..L{MAX_LEVEL - 1} files, read again by the next compaction",
    )


def level_codecs(args: argparse.Namespace) -> LevelCodecs:
    return LevelCodecs(top=args.compression_top, below_top=args.compression_below_top)
