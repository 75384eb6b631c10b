"""A synthetic workload shaped like agents' traffic, for the demo, tests and benchmarks.

Keys are UUIDs drawn with a skewed update distribution (a few hot keys are updated
often, most rarely), a fraction of records are tombstones, and records of every
partition arrive interleaved, so each L0 file holds many partitions.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from compactor.ingest.jsonl import InputRecord

_KEY_NAMESPACE = uuid.UUID("6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab")


@dataclass(frozen=True, slots=True)
class Workload:
    topics: tuple[tuple[str, int], ...]
    """(topic, partitions) pairs the records are spread over."""
    records: int
    keys_per_partition: int = 1000
    skew: float = 3.0
    """Key index = keys * u**skew for uniform u: 1 is uniform, higher is hotter."""
    tombstone_ratio: float = 0.05
    value_bytes: int = 100
    start_ms: int = 1_700_000_000_000
    ms_per_record: int = 1
    seed: int = 0
    version_header: str = "version"
    """Name of the 8-byte big-endian version header given to records of ``versioned_topics``
    (for ``compaction.strategy=header``)."""
    versioned_topics: frozenset[str] = frozenset()

    def generate(self) -> Iterator[InputRecord]:
        rng = random.Random(self.seed)
        partitions = [(t, p) for t, n in self.topics for p in range(n)]
        for i in range(self.records):
            topic, partition = partitions[rng.randrange(len(partitions))]
            key_index = int(self.keys_per_partition * rng.random() ** self.skew)
            key = str(uuid.uuid5(_KEY_NAMESPACE, f"{topic}/{partition}/{key_index}"))
            if rng.random() < self.tombstone_ratio:
                value = None
            else:
                value = rng.randbytes(self.value_bytes // 2).hex().encode()[: self.value_bytes]
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if topic in self.versioned_topics:
                # Versions mostly grow with time but not always: the header decides, not order.
                version = i + rng.randrange(-50, 50)
                headers = ((self.version_header, version.to_bytes(8, "big", signed=True)),)
            yield InputRecord(
                topic=topic,
                partition=partition,
                timestamp=self.start_ms + i * self.ms_per_record,
                key=key.encode(),
                value=value,
                headers=headers,
            )


def _header_json(value: bytes | None) -> object:
    return None if value is None else {"b64": base64.b64encode(value).decode()}


def write_jsonl(records: Iterator[InputRecord], out: TextIO) -> int:
    n = 0
    for r in records:
        out.write(
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "key": None if r.key is None else r.key.decode(),
                    "value": None if r.value is None else r.value.decode(),
                    "timestamp": r.timestamp,
                    "headers": [[k, _header_json(v)] for k, v in r.headers],
                },
                separators=(",", ":"),
            )
        )
        out.write("\n")
        n += 1
    return n
