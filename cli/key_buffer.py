"""``--key-buffer-bytes``, one option for every command that runs jobs (``compact``,
``worker``, ``replay``, ``spark compact``, ``demo``): checked when the line is parsed, so a
size the key buffer cannot have is a usage error before anything is read or written."""

from __future__ import annotations

import argparse

from compactor.cli.context import integer_in
from compactor.worker.compactor import DEFAULT_KEY_BUFFER_BYTES
from compactor.worker.kernel import ENTRY_BYTES

MAX_KEY_BUFFER_ENTRIES = 2**32 - 1
"""The key buffer's table is indexed by 32 bits (``worker/kernel/_keybuffer.c``)."""
MIN_KEY_BUFFER_BYTES = ENTRY_BYTES
MAX_KEY_BUFFER_BYTES = MAX_KEY_BUFFER_ENTRIES * ENTRY_BYTES
"""2^32 - 1 entries of ENTRY_BYTES (41) bytes: 176,093,659,095 bytes, about 164 GiB."""


def key_buffer_bytes(text: str) -> int:
    """An argparse type: a key buffer size, one entry to 2^32 - 1 entries, in bytes."""
    return integer_in(
        text,
        MIN_KEY_BUFFER_BYTES,
        MAX_KEY_BUFFER_BYTES,
        f"must be {MIN_KEY_BUFFER_BYTES}..{MAX_KEY_BUFFER_BYTES} bytes "
        f"(one to 2^32 - 1 entries of {ENTRY_BYTES} bytes)",
    )


def add_key_buffer_option(
    p: argparse.ArgumentParser,
    default: int | None = DEFAULT_KEY_BUFFER_BYTES,
    help: str = "the key buffer's size in bytes (default 128 MiB)",  # noqa: A002
) -> None:
    p.add_argument(
        "--key-buffer-bytes", type=key_buffer_bytes, default=default, metavar="B", help=help
    )
