"""The kernel benchmark's Markdown table rows, shared by ``bench.kernel_bench`` and
``bench.run`` (which must not import the kernel itself)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def kernel_rows(rows: Iterable[dict[str, Any]]) -> list[str]:
    lines = [
        "| what | threads | ns/key | keys/s | vs raw C hash |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
        lines.append(
            f"| {r['name']} | {r['threads']} | {r['ns_per_key']:.0f} | "
            f"{r['keys_per_s'] / 1e6:.2f} M | {ratio} |"
        )
    return lines
